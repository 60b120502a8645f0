"""Replicas of a replay (greengpu.sim.replicas): the trace moved by under a second, and the figures' spread."""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

import pytest

from greengpu.cli import main
from greengpu.config.inventory import load_cluster
from greengpu.config.policy import load_policy
from greengpu.sim.engine import Simulation
from greengpu.sim.replicas import JITTER_S, replica_jobs, summary
from greengpu.sim.traces import read_trace

REPO = Path(__file__).resolve().parents[3]
LAB_TRACE = REPO / "examples" / "lab-a100.week.trace.csv"
LAB_CLUSTER = REPO / "examples" / "lab-a100.cluster.yaml"


def test_replica_zero_is_the_trace_and_the_others_move_each_submit_by_under_a_second() -> None:
    jobs = read_trace(LAB_TRACE).jobs
    assert replica_jobs(jobs, 0) == jobs
    moved = replica_jobs(jobs, 1)
    shifts = [after.submit_time_s - before.submit_time_s for before, after in zip(jobs, moved, strict=True)]
    assert all(0.0 <= shift < JITTER_S for shift in shifts)
    assert len(set(shifts)) > len(jobs) // 2  # a draw per job, not one offset for all
    for before, after in zip(jobs, moved, strict=True):  # nothing else changes
        assert after.job_id == before.job_id and after.gpus == before.gpus and after.duration_s == before.duration_s
    assert replica_jobs(jobs, 1) == moved  # the same seed and replica give the same trace
    assert replica_jobs(jobs, 2) != moved and replica_jobs(jobs, 1, seed=7) != moved


def test_the_summary_gives_each_figures_median_least_and_most() -> None:
    cluster, policy, jobs = load_cluster(LAB_CLUSTER), load_policy("default"), read_trace(LAB_TRACE).jobs
    results = [Simulation(cluster, policy, replica_jobs(jobs, k)).run() for k in range(3)]
    spread: Any = summary(results)
    assert spread["count"] == 3 and spread["jitter_s"] == JITTER_S
    energies = [r.energy_kwh for r in results]
    assert spread["median"]["energy_kwh"] == pytest.approx(statistics.median(energies))
    assert spread["min"]["energy_kwh"] == min(energies) and spread["max"]["energy_kwh"] == max(energies)
    p95s = [r.wait_s.p95 or 0.0 for r in results]
    assert spread["median"]["wait_s"]["p95"] == statistics.median(p95s)
    assert spread["max"]["invariant_violations"] == 0


def test_simulate_replicas_keeps_the_first_replays_figures_and_adds_their_spread(
        capsys: pytest.CaptureFixture[str]) -> None:
    args = ["simulate", "--trace", str(LAB_TRACE), "--cluster", str(LAB_CLUSTER), "--policy", "default", "--json"]
    assert main(args) == 0
    once = json.loads(capsys.readouterr().out)["results"][0]
    assert "replicas" not in once  # the contract's keys, unchanged without the flag
    assert main([*args, "--replicas", "3"]) == 0
    thrice = json.loads(capsys.readouterr().out)["results"][0]
    spread = thrice.pop("replicas")
    once.pop("sim_wall_s"), thrice.pop("sim_wall_s")
    assert thrice == once  # the top-level figures are the trace's as given
    assert spread["count"] == 3
    low, mid, high = (spread[k]["energy_kwh"] for k in ("min", "median", "max"))
    assert low <= once["energy_kwh"] <= high and low <= mid <= high


def test_simulate_replicas_prints_the_spread_table(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", "--trace", str(LAB_TRACE), "--cluster", str(LAB_CLUSTER), "--policy", "always-on",
                 "--replicas", "2"]) == 0
    out = capsys.readouterr().out
    assert "over 2 replicas" in out and "wait p99 (s)" in out
