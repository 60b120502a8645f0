"""Stress scenarios: the public Philly trace on clusters from comfortable to overloaded, plus the lab example.

Run on demand (about 10-15 minutes on a 2-core machine):
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
violations, energy per completed GPU-hour and wall time (and the same for the default with capping off);
then checks issue 35's conditions.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

import pytest
from conftest import REPO, public_data

from greengpu.config.inventory import load_cluster
from greengpu.config.policy import load_policy
from greengpu.model import Cluster, Job, Node
from greengpu.policy import Policy
from greengpu.sim.engine import Simulation
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

_RESULTS: dict[tuple[str, str], dict[str, Any]] = {}


def policy_named(name: str) -> Policy:
    """A built-in policy, or the default with its capping off (CAPPING_OFF)."""
    if name == CAPPING_OFF:
        default = load_policy("default")
        return replace(default, capping=replace(default.capping, enabled=False))
    return load_policy(name)


def replay(scenario: str, policy: str) -> dict[str, Any]:
    key = (scenario, policy)
    if key not in _RESULTS:
        chosen = SCENARIOS[scenario]
        cluster, jobs = chosen.cluster(), chosen.jobs()
        started = time.perf_counter()
        result = Simulation(cluster, policy_named(policy), jobs).run().to_json()
        result["bench_wall_s"] = time.perf_counter() - started
        _RESULTS[key] = result
    return _RESULTS[key]


def _row(scenario: str, policy: str) -> str:
    r = replay(scenario, policy)
    base = replay(scenario, "always-on")
    w = r["wait_s"]
    per_job_ms = 1000 * r["bench_wall_s"] / max(1, r["jobs"])
    return (f"[stress] {scenario:3s} {policy:12s} energy {r['energy_kwh'] / base['energy_kwh']:.3f} "
            f"({r['energy_kwh']:,.0f} kWh)  wait p50/p95/p99 {w['p50']:.0f}/{w['p95']:.0f}/{w['p99']:.0f} s  "
            f"preemptions {r['preemptions']}  lost {r['lost_gpu_hours']:,.1f} GPU-h  SLA {r['sla_violations']}  "
            f"{r['energy_kwh_per_gpu_hour']:.3f} kWh/GPU-h  wall {r['bench_wall_s']:.1f} s ({per_job_ms:.2f} ms/job)  "
            f"invariants {r['invariant_violations']}")


@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_stress_scenario(scenario: str) -> None:
    print(f"\n[stress] {scenario}: {SCENARIOS[scenario].description}")
    for policy in COMPARED:
        print(_row(scenario, policy))
    for policy in COMPARED:
        assert replay(scenario, policy)["invariant_violations"] == 0


def _within(value: float, reference: float, factor: float, plus_s: float = 0.0) -> bool:
    return value <= max(reference * factor, reference + plus_s) + 1e-9


@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_default_spends_slack_never_queue_time(scenario: str) -> None:
    """Issue 35's conditions for the default against always-on, idle-timeout and its own capping-off variant."""
    always_on, idle, default, capping_off = (replay(scenario, p) for p in COMPARED)
    checks = {
        "energy <= always-on's": default["energy_kwh"] <= always_on["energy_kwh"],
        "SLA violations <= always-on's": default["sla_violations"] <= always_on["sla_violations"],
        "0 invariant violations": default["invariant_violations"] == 0,
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
            "0 SLA violations": default["sla_violations"] == 0,
        })
    if scenario == "a":  # issue 35 retired the 30% of issue 15 (measured against a baseline that re-ran killed work)
        checks["saves >= 25% of always-on's energy"] = default["energy_kwh"] <= 0.75 * always_on["energy_kwh"]
    for name, held in checks.items():
        print(f"[stress] {scenario:3s} {'holds' if held else 'FAILS'}: {name}")
    assert all(held for held in checks.values()), [name for name, held in checks.items() if not held]


def test_saturated_replays_cost_at_most_three_times_per_job() -> None:
    light = replay("a", "default")
    light_ms = light["bench_wall_s"] / light["jobs"]
    worst = 0.0
    for scenario in ("b", "c", "d"):
        for policy in POLICIES:
            r = replay(scenario, policy)
            worst = max(worst, r["bench_wall_s"] / r["jobs"] / light_ms)
    total_s = sum(r["bench_wall_s"] for r in _RESULTS.values())
    print(f"\n[stress] worst saturated wall time per job: {worst:.1f} x the 1,000-GPU example's; "
          f"all replays {total_s:.0f} s")
    assert math.isfinite(worst)
    assert worst <= 3.0
