"""Health-aware placement against health-blind placement under the same GPU failures (issue 20).

The public Philly trace (64,483 jobs over 72 days) on the bundled 1,000-GPU Philly cluster under the
default policy, with a deterministic mix: a fifth of the 1-GPU jobs of tenants with a quota (by a hash
of the job id) are non-interruptible inference, the rest training that checkpoints every 30 minutes.
The failure model (greengpu/sim/failures.py) is accelerated ten times (`FailureModel.scaled`: ten
times the sudden failures and degradations, each degrading GPU's course as by default), so that 72
days hold enough failures to compare. Both runs share the trace, the model and the seed; only
placement differs (and with it, which failing GPUs are replaced before they fail).

Run on demand:  nice -n 10 python3 -m pytest tests/benchmarks/test_bench_health.py -s
"""

from __future__ import annotations

import zlib
from dataclasses import replace
from typing import Any

import pytest
from conftest import REPO, public_data

from greengpu.config.inventory import load_cluster
from greengpu.config.policy import load_policy
from greengpu.model import Job
from greengpu.sim.engine import Simulation
from greengpu.sim.failures import FailureModel, failure_replay
from greengpu.sim.traces import read_trace

SEEDS = (1, 2, 3, 4, 5)
ACCELERATION = 10.0


def mixed_jobs() -> list[Job]:
    jobs = read_trace(public_data("philly-2017/philly.csv"), "philly").jobs
    tenants = load_cluster(REPO / "examples" / "philly.cluster.yaml").tenants
    mixed = []
    for job in jobs:
        # Only tenants with a quota: a job that cannot be preempted may not run on borrowed quota.
        if job.gpus == 1 and job.tenant in tenants and zlib.crc32(job.job_id.encode()) % 5 == 0:
            mixed.append(replace(job, job_class="inference", interruptible=False))
        else:
            mixed.append(replace(job, checkpoint_interval_s=1800.0))
    return mixed


def replay(jobs: list[Job], seed: int, health_aware: bool) -> dict[str, Any]:
    cluster = load_cluster(REPO / "examples" / "philly.cluster.yaml")
    origin_s = jobs[0].submit_time_s
    end_s = max(j.submit_time_s for j in jobs) + 30 * 86400.0
    failures = failure_replay(cluster, FailureModel(seed=seed).scaled(ACCELERATION), origin_s, end_s, health_aware)
    return Simulation(cluster, load_policy("default"), jobs, failures=failures).run().to_json()


@pytest.mark.benchmark
def test_health_aware_placement_spares_inference_and_loses_fewer_gpu_hours() -> None:
    jobs = mixed_jobs()
    totals: dict[bool, dict[str, float]] = {}
    for health_aware in (False, True):
        keys = ("failures", "replaced", "inference_hit", "jobs_hit", "lost_gpu_h", "inference_lost_gpu_h",
                "p95_wait_s", "energy_kwh", "wall_s")
        sums = dict.fromkeys(keys, 0.0)
        for seed in SEEDS:
            result = replay(jobs, seed, health_aware)
            assert result["invariant_violations"] == 0
            assert result["jobs_completed"] == len(jobs)
            row = {
                "failures": result["gpu_failures"],
                "replaced": result["gpus_replaced_before_failing"],
                "inference_hit": result["jobs_hit_by_failures_by_class"].get("inference", 0),
                "jobs_hit": result["jobs_hit_by_failures"],
                "lost_gpu_h": result["failure_lost_gpu_hours"],
                "inference_lost_gpu_h": result["failure_lost_gpu_hours_by_class"].get("inference", 0.0),
                "p95_wait_s": result["wait_s"]["p95"],
                "energy_kwh": result["energy_kwh"],
                "wall_s": result["sim_wall_s"],
            }
            print(f"\n[health] seed {seed} {'aware' if health_aware else 'blind'}: " +
                  ", ".join(f"{k} {v:,.1f}" for k, v in row.items()))
            for key, value in row.items():
                sums[key] += value
        totals[health_aware] = {k: v / len(SEEDS) for k, v in sums.items()}
    blind, aware = totals[False], totals[True]
    print(f"\n[health] mean of {len(SEEDS)} seeds, blind -> aware: " +
          ", ".join(f"{k} {blind[k]:,.1f} -> {aware[k]:,.1f}" for k in blind))
    assert aware["inference_hit"] < blind["inference_hit"]
    assert aware["lost_gpu_h"] < blind["lost_gpu_h"]
