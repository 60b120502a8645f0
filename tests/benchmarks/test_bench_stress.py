"""Stress scenarios: the public Philly trace on clusters from comfortable to overloaded, plus the lab example.

Run on demand (about 35 minutes on a 2-core machine with the default 10 replicas for b, c and d and 5 for a and the
lab; GREENGPU_STRESS_REPLICAS=N sets N for every scenario: 5 took 20 min 31 s on 2026-12-07, 1 replays each policy
once, on the trace as given, in about 10; GREENGPU_STRESS_JSON=FILE also writes every replica's figures there, a line
per scenario and policy):
    nice -n 10 python3 -m pytest tests/benchmarks/test_bench_stress.py -s

Scenarios (public data only, docs/SIMULATOR.md "Stress scenarios"):
  a  the whole trace on examples/philly.cluster.yaml (1,000 GPUs, little queueing);
  b  a 640-GPU cluster in the same 2:1 mix of GPUs on 8- and 4-GPU nodes, quotas scaled the same way;
  c  b's cluster with the arrival gaps shortened so that the offered load is 1.4 times b's;
  d  a 320-GPU cluster (sustained overload);
  lab  examples/lab-a100.* (ten GPUs, interactive work with a 300 s wait target).
b, c and d replay a contiguous window of the trace (WINDOW below) so that the whole benchmark fits
in its time budget on 2 cores; a is the whole trace. For always-on, idle-timeout and default each
prints: facility energy ratio to always-on, wait p50/p95/p99, preemptions, lost GPU-hours, SLA
violations, energy per completed GPU-hour and CPU time (and the same for the default with capping off), each
the median over `replicas_of(scenario)` replays with submit times moved by under a second; then checks issue
35's conditions on those medians.
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

import pytest
from conftest import REPO, public_data
from forked import forked_map

from greengpu.config.inventory import load_cluster
from greengpu.config.policy import load_policy
from greengpu.model import Cluster, Job, Node
from greengpu.policy import Policy
from greengpu.sim.engine import Simulation
from greengpu.sim.replicas import replica_jobs, summary
from greengpu.sim.results import SimResult
from greengpu.sim.traces import read_trace

POLICIES = ("always-on", "idle-timeout", "default")
CAPPING_OFF = "default capping-off"
COMPARED = (*POLICIES, CAPPING_OFF)
"""The built-in policies, and the default with its capping off: capping must earn its place (issue 35)."""
WINDOW = (datetime(2017, 10, 1, tzinfo=UTC), datetime(2017, 10, 11, tzinfo=UTC))
"""The window of b, c and d: the first ten days of October 2017, the trace's busiest stretch (its
offered load alone fills a 640-GPU cluster: about 590 GPUs in use on average over October)."""
EIGHT_GPU_SHARE = 672 / 1000
"""The 1,000-GPU example's share of GPUs on 8-GPU nodes (84 x 8 of 1,000): the 2:1 mix kept when scaling."""


@dataclass(frozen=True)
class Scenario:
    name: str
    description: str
    cluster: Callable[[], Cluster]
    jobs: Callable[[], list[Job]]


def scaled_philly_cluster(total_gpus: int) -> Cluster:
    """The Philly example's node types, GPU mix, racks of 21 nodes and tenants, scaled to `total_gpus`."""
    base = load_cluster(REPO / "examples" / "philly.cluster.yaml")
    eights = round(total_gpus * EIGHT_GPU_SHARE / 8)
    fours = (total_gpus - 8 * eights) // 4
    nodes = tuple(Node(f"philly{i + 1:03d}", "p100x8" if i < eights else "p100x4", domain=f"rack{i // 21:02d}",
                       wol_host="127.0.0.1") for i in range(eights + fours))
    scale = total_gpus / base.total_gpus
    tenants = {name: replace(t, quota_gpus=round(t.quota_gpus * scale)) for name, t in base.tenants.items()}
    return replace(base, nodes=nodes, tenants=tenants)


_TRACE: list[Job] = []


def philly_jobs() -> list[Job]:
    if not _TRACE:
        _TRACE.extend(read_trace(public_data("philly-2017/philly.csv"), "philly").jobs)
    return _TRACE


def window_jobs(load_factor: float = 1.0) -> list[Job]:
    """The jobs submitted in WINDOW; with `load_factor` > 1 the gaps between arrivals shrink by it."""
    low, high = WINDOW[0].timestamp(), WINDOW[1].timestamp()
    jobs = [j for j in philly_jobs() if low <= j.submit_time_s < high]
    if load_factor == 1.0:
        return jobs
    origin = jobs[0].submit_time_s
    return [replace(j, submit_time_s=origin + (j.submit_time_s - origin) / load_factor) for j in jobs]


SCENARIOS = {
    "a": Scenario("a", "whole trace, 1,000 GPUs", lambda: load_cluster(REPO / "examples" / "philly.cluster.yaml"),
                  philly_jobs),
    "b": Scenario("b", "10 days, 640 GPUs", lambda: scaled_philly_cluster(640), window_jobs),
    "c": Scenario("c", "10 days at 1.4x load, 640 GPUs", lambda: scaled_philly_cluster(640),
                  lambda: window_jobs(1.4)),
    "d": Scenario("d", "10 days, 320 GPUs", lambda: scaled_philly_cluster(320), window_jobs),
    "lab": Scenario("lab", "lab-a100 week, 10 GPUs", lambda: load_cluster(REPO / "examples" / "lab-a100.cluster.yaml"),
                    lambda: read_trace(REPO / "examples" / "lab-a100.week.trace.csv").jobs),
}

SATURATED = ("b", "c", "d")
"""The scenarios whose queue runs full: chaotic, so their medians need more draws."""
REPLICAS_SET = os.environ.get("GREENGPU_STRESS_REPLICAS")
"""One count of replicas for every scenario, when set."""


def replicas_of(scenario: str) -> int:
    """Replays per policy of `scenario`: the trace as given, then with submit times moved by under a second
    (greengpu.sim.replicas). The figures compared are their medians: one replay of a busy queue is one draw (on c,
    always-on's own p95 wait spans 37,650-42,641 s over five replicas, its lost work 545-3,003 GPU-hours). Ten for
    the saturated scenarios, whose five-replica medians moved by as much as the bounds from one set of five draws
    to the next (b's default lost 410.9 GPU-hours over replicas 0-4, 337.8 over 0-9); five for a and the lab,
    whose replicas agree within 0.3% on energy. GREENGPU_STRESS_REPLICAS sets one count for all."""
    if REPLICAS_SET:
        return int(REPLICAS_SET)
    return 10 if scenario in SATURATED else 5


_RESULTS: dict[tuple[str, str], dict[str, Any]] = {}
_LOADED: dict[str, tuple[Cluster, list[Job]]] = {}


def policy_named(name: str) -> Policy:
    """A built-in policy, or the default with its capping off (CAPPING_OFF)."""
    if name == CAPPING_OFF:
        default = load_policy("default")
        return replace(default, capping=replace(default.capping, enabled=False))
    return load_policy(name)


def _inputs(scenario: str) -> tuple[Cluster, list[Job]]:
    if scenario not in _LOADED:
        chosen = SCENARIOS[scenario]
        _LOADED[scenario] = (chosen.cluster(), chosen.jobs())
    return _LOADED[scenario]


def _replay_one(scenario: str, policy: str, replica: int) -> tuple[SimResult, float]:
    """One replica's result and the CPU seconds it took."""
    cluster, jobs = _inputs(scenario)
    started = time.process_time()
    result = Simulation(cluster, policy_named(policy), replica_jobs(jobs, replica)).run()
    return result, time.process_time() - started


def _replay_scenario(scenario: str) -> None:
    """Every compared policy's replicas of `scenario`, on two forked workers (inputs loaded first, shared)."""
    _inputs(scenario)
    tasks = [(policy, replica) for policy in COMPARED for replica in range(replicas_of(scenario))]
    done = forked_map(_replay_one, [scenario] * len(tasks), [p for p, _ in tasks], [r for _, r in tasks])
    for policy in COMPARED:
        runs = [found for (p, _), found in zip(tasks, done, strict=True) if p == policy]
        medians = summary([result for result, _ in runs])["median"]
        assert isinstance(medians, dict)
        first, first_cpu_s = runs[0]
        _RESULTS[(scenario, policy)] = {**first.to_json(), **medians, "bench_cpu_s": first_cpu_s,
                                        "replicas": [result.to_json() for result, _ in runs]}
        if os.environ.get("GREENGPU_STRESS_JSON"):  # every replica's figures, one line per policy (for the docs)
            with open(os.environ["GREENGPU_STRESS_JSON"], "a", encoding="utf-8") as out:
                out.write(json.dumps({"scenario": scenario, "policy": policy,
                                      "replicas": _RESULTS[(scenario, policy)]["replicas"]}) + "\n")


def replay(scenario: str, policy: str) -> dict[str, Any]:
    """The medians of `policy`'s replicas of `scenario` (other keys: the trace as given; `bench_cpu_s`: its CPU)."""
    if (scenario, policy) not in _RESULTS:
        _replay_scenario(scenario)
    return _RESULTS[(scenario, policy)]


def _row(scenario: str, policy: str) -> str:
    r = replay(scenario, policy)
    base = replay(scenario, "always-on")
    w = r["wait_s"]
    per_job_ms = 1000 * r["bench_cpu_s"] / max(1, r["jobs"])
    spread = [x["wait_s"]["p95"] for x in r["replicas"]]
    return (f"[stress] {scenario:3s} {policy:12s} energy {r['energy_kwh'] / base['energy_kwh']:.3f} "
            f"({r['energy_kwh']:,.0f} kWh)  wait p50/p95/p99 {w['p50']:.0f}/{w['p95']:.0f}/{w['p99']:.0f} s  "
            f"preemptions {r['preemptions']:.0f}  lost {r['lost_gpu_hours']:,.1f} GPU-h  "
            f"SLA {r['sla_violations']:.0f}  "
            f"{r['energy_kwh_per_gpu_hour']:.3f} kWh/GPU-h  CPU {r['bench_cpu_s']:.1f} s ({per_job_ms:.2f} ms/job)  "
            f"invariants {r['invariant_violations']:.0f}  "
            f"(medians of {len(spread)}; p95 {min(spread):.0f}-{max(spread):.0f} s)")


@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_stress_scenario(scenario: str) -> None:
    print(f"\n[stress] {scenario}: {SCENARIOS[scenario].description}")
    for policy in COMPARED:
        print(_row(scenario, policy))
    for policy in COMPARED:
        assert all(r["invariant_violations"] == 0 for r in replay(scenario, policy)["replicas"])


def _within(value: float, reference: float, factor: float, plus_s: float = 0.0) -> bool:
    return value <= max(reference * factor, reference + plus_s) + 1e-9


@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_default_spends_slack_never_queue_time(scenario: str) -> None:
    """Issue 35's conditions for the default against always-on, idle-timeout and its own capping-off variant."""
    always_on, idle, default, capping_off = (replay(scenario, p) for p in COMPARED)
    checks = {
        "energy <= always-on's": default["energy_kwh"] <= always_on["energy_kwh"],
        "SLA violations <= always-on's": default["sla_violations"] <= always_on["sla_violations"],
        "0 invariant violations (every replica)": all(r["invariant_violations"] == 0 for r in default["replicas"]),
    }
    if idle["node_sleep_hours"] > 0:  # the cluster has idle time: the levers must save energy there
        checks["energy < idle-timeout's"] = default["energy_kwh"] < idle["energy_kwh"]
        checks["energy < its own with capping off (capping earns its place)"] = (
            default["energy_kwh"] < capping_off["energy_kwh"])
    if scenario != "lab":
        checks.update({
            "p95 wait <= max(1.05x, +60 s) of always-on's":
                _within(default["wait_s"]["p95"], always_on["wait_s"]["p95"], 1.05, 60.0),
            "p99 wait <= max(1.10x, +60 s) of always-on's":
                _within(default["wait_s"]["p99"], always_on["wait_s"]["p99"], 1.10, 60.0),
            "lost GPU-hours <= 1.05x always-on's":
                _within(default["lost_gpu_hours"], always_on["lost_gpu_hours"], 1.05),
            "preemptions <= 1.05x always-on's": _within(default["preemptions"], always_on["preemptions"], 1.05),
            "0 SLA violations (every replica)": all(r["sla_violations"] == 0 for r in default["replicas"]),
        })
    if scenario == "a":  # issue 35 retired the 30% of issue 15 (measured against a baseline that re-ran killed work)
        checks["saves >= 25% of always-on's energy"] = default["energy_kwh"] <= 0.75 * always_on["energy_kwh"]
    for name, held in checks.items():
        print(f"[stress] {scenario:3s} {'holds' if held else 'FAILS'}: {name}")
    assert all(held for held in checks.values()), [name for name, held in checks.items() if not held]


def test_saturated_replays_cost_at_most_three_times_per_job() -> None:
    light = replay("a", "default")
    light_ms = light["bench_cpu_s"] / light["jobs"]
    worst = 0.0
    for scenario in ("b", "c", "d"):
        for policy in POLICIES:
            r = replay(scenario, policy)
            worst = max(worst, r["bench_cpu_s"] / r["jobs"] / light_ms)
    print(f"\n[stress] worst saturated CPU time per job: {worst:.1f} x the 1,000-GPU example's")
    assert math.isfinite(worst)
    assert worst <= 3.0
