"""The figures of one replay: typed while greengpu works with them, JSON only at the edge.

`SimResult.to_json` gives the keys of docs/SIMULATOR.md in their documented order.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from greengpu.json_types import JsonObject, JsonValue
from greengpu.model import Job

CLASS_WAIT_SLA_S = {"inference": 300.0, "interactive": 300.0}
"""Longest wait before an inference or interactive job counts as an SLA violation."""


@dataclass(frozen=True)
class WaitStats:
    """Nearest-rank percentiles and mean of waits in seconds (None: no job started)."""

    p50: float | None = None
    p95: float | None = None
    p99: float | None = None
    mean: float | None = None

    @classmethod
    def of(cls, waits: Sequence[float]) -> WaitStats:
        if not waits:
            return cls()
        ordered = sorted(waits)

        def rank(q: float) -> float:
            return ordered[max(0, math.ceil(q * len(ordered)) - 1)]

        return cls(rank(0.50), rank(0.95), rank(0.99), sum(ordered) / len(ordered))

    def to_json(self) -> JsonObject:
        return {"p50": self.p50, "p95": self.p95, "p99": self.p99, "mean": self.mean}


def wait_stats(waits: Sequence[float]) -> JsonObject:
    """p50, p95, p99 and mean of waits (nearest-rank percentiles); nulls when there are none."""
    return WaitStats.of(waits).to_json()


@dataclass(frozen=True)
class SimResult:
    """The figures of one simulated policy (docs/SIMULATOR.md)."""

    policy: str
    jobs: int
    jobs_completed: int
    jobs_not_started: int
    unplaceable_jobs: tuple[str, ...]
    makespan_s: float
    energy_kwh: float
    gpu_energy_kwh: float
    cost: float
    co2_kg: float
    wait_s: WaitStats
    wait_s_by_class: Mapping[str, WaitStats]
    gpu_hours_allocated: float
    gpu_hours_capacity: float
    slowdown_mean: float | None
    preemptions: int
    lost_gpu_hours: float
    node_sleep_hours: float
    wakes: int
    failed_nodes: tuple[str, ...]
    sla_violations: int
    invariant_violations: int
    sim_wall_s: float
    pue: float
    currency: str
    scheduling_cycles: int
    energy_kwh_per_gpu_hour: float | None = None
    """Facility kWh per GPU-hour of completed work (their uncapped run time): capped slow-down and work
    re-run after a preemption add energy but no work (None when nothing completed)."""
    failures: Mapping[str, JsonValue] | None = None
    """The failure model's figures (sim/failures.py); None when the replay ran without it (no keys added)."""
    spot_share: float = 0.0
    """Spot GPU-hours over all GPU-hours run, on-premises and in the cloud (0 without pools)."""
    cloud_cost: float = 0.0
    """What the cloud nodes cost, from each request to its stop, boots included (also inside `cost`)."""
    interruptions: int = 0
    """Spot interruptions (notices) of cloud nodes."""
    deadline_misses: int = 0
    """Jobs with a deadline that finished after it, or had not finished when it passed."""
    cloud_pools: Mapping[str, JsonObject] | None = None
    """Per pool: node-hours, cost, GPU-hours, lost GPU-hours, interruptions, jobs per class (None without pools)."""
    interruption_lost_gpu_hours: float = 0.0
    """The part of `lost_gpu_hours` redone after spot interruptions (the rest: preemptions, failures)."""
    come_backs: int = 0
    """Cloud jobs that moved back on-premises at a checkpoint (not counted in `preemptions`)."""
    mig_reconfigurations: int | None = None
    """MIG GPUs repartitioned (each unusable for its `reconfigure_s`); None: the cluster has no MIG GPUs."""

    def to_json(self) -> JsonObject:
        """The result as the JSON object `greengpu simulate --json` prints (one per policy)."""
        return {
            "policy": self.policy,
            "jobs": self.jobs,
            "jobs_completed": self.jobs_completed,
            "jobs_not_started": self.jobs_not_started,
            "unplaceable_jobs": list(self.unplaceable_jobs),
            "makespan_s": self.makespan_s,
            "energy_kwh": self.energy_kwh,
            "gpu_energy_kwh": self.gpu_energy_kwh,
            "energy_kwh_per_gpu_hour": self.energy_kwh_per_gpu_hour,
            "cost": self.cost,
            "co2_kg": self.co2_kg,
            "wait_s": self.wait_s.to_json(),
            "wait_s_by_class": {c: stats.to_json() for c, stats in self.wait_s_by_class.items()},
            "gpu_hours_allocated": self.gpu_hours_allocated,
            "gpu_hours_capacity": self.gpu_hours_capacity,
            "slowdown_mean": self.slowdown_mean,
            "preemptions": self.preemptions,
            "lost_gpu_hours": self.lost_gpu_hours,
            "node_sleep_hours": self.node_sleep_hours,
            "wakes": self.wakes,
            "failed_nodes": list(self.failed_nodes),
            "sla_violations": self.sla_violations,
            "invariant_violations": self.invariant_violations,
            "sim_wall_s": self.sim_wall_s,
            "pue": self.pue,
            "currency": self.currency,
            "scheduling_cycles": self.scheduling_cycles,
            "spot_share": self.spot_share,
            "cloud_cost": self.cloud_cost,
            "interruptions": self.interruptions,
            "deadline_misses": self.deadline_misses,
            # Only with pools: a replay without them keeps its keys exactly.
            **({"cloud_pools": dict(self.cloud_pools),
                "interruption_lost_gpu_hours": self.interruption_lost_gpu_hours,
                "come_backs": self.come_backs} if self.cloud_pools is not None else {}),
            **(self.failures or {}),
            # Only with MIG GPUs: a replay without them keeps its keys exactly.
            **({"mig_reconfigurations": self.mig_reconfigurations} if self.mig_reconfigurations is not None else {}),
        }


def deadline_misses(jobs: Sequence[Job], finish_s: Mapping[str, float], now_s: float) -> int:
    """Jobs with a deadline (seconds after submit) that finished after it, or were unfinished when it passed."""
    missed = 0
    for job in jobs:
        if job.deadline_s is None:
            continue
        due_s = job.submit_time_s + job.deadline_s
        if finish_s.get(job.job_id, now_s if now_s > due_s else due_s) > due_s:
            missed += 1
    return missed


@dataclass
class JobOutcomes:
    """What happened to each job of a replay: first start, time run, completion."""

    first_start: dict[str, float]
    run_s: dict[str, float]
    completed: set[str]

    def waits(self, jobs: Sequence[Job]) -> tuple[WaitStats, Mapping[str, WaitStats], int, float | None]:
        """(waits, waits by class, SLA violations, mean slowdown) over the jobs that started."""
        waits: list[float] = []
        by_class: dict[str, list[float]] = {}
        sla = 0
        slowdowns: list[float] = []
        for job in jobs:
            start = self.first_start.get(job.job_id)
            if start is None:
                continue
            wait = start - job.submit_time_s
            waits.append(wait)
            by_class.setdefault(job.job_class, []).append(wait)
            limit = CLASS_WAIT_SLA_S.get(job.job_class)
            if limit is not None and wait > limit:
                sla += 1
            if job.job_id in self.completed:
                slowdowns.append(self.run_s[job.job_id] / job.duration_s)
        classes = {c: WaitStats.of(v) for c, v in sorted(by_class.items())}
        slowdown = (sum(slowdowns) / len(slowdowns)) if slowdowns else None
        return WaitStats.of(waits), classes, sla, slowdown


@dataclass
class PoolFigures:
    """What one pool cost and did: node-hours paid, money, GPU-hours of jobs, work lost, interruptions."""

    node_s: float = 0.0
    cost: float = 0.0
    gpu_s: float = 0.0
    lost_gpu_s: float = 0.0
    interruptions: int = 0
    placements_by_class: dict[str, int] = field(default_factory=dict)

    def to_json(self) -> JsonObject:
        return {"node_hours": self.node_s / 3600.0, "cost": self.cost, "gpu_hours": self.gpu_s / 3600.0,
                "lost_gpu_hours": self.lost_gpu_s / 3600.0, "interruptions": self.interruptions,
                "placements_by_class": dict(sorted(self.placements_by_class.items()))}


@dataclass(frozen=True)
class CloudFigures:
    """The cloud's share of a replay's figures (all zero without pools)."""

    cost: float = 0.0
    spot_share: float = 0.0
    """Spot GPU-hours over every GPU-hour run, on-premises and in the cloud."""
    interruptions: int = 0
    preemptions: int = 0
    lost_gpu_s: float = 0.0
    last_finish_s: float = 0.0
