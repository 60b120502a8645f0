"""The rules every victim strategy shares: when a victim last saved its work, what stopping it now loses,
the order victims are taken in, and when a node's GPUs fit a request on their own."""

from __future__ import annotations

import math
from collections.abc import Collection, Sequence
from dataclasses import dataclass

from greengpu.model import GPU_UNITS, RunningJob

HOUR_S = 3600.0
WAIT_SENSITIVE_CLASSES = frozenset({"inference", "interactive"})
"""Job classes whose wait is what they are judged by (a person or a service waits): they reclaim without
weighing, as does a job with a deadline."""


def last_checkpoint_s(victim: RunningJob, now_s: float) -> float:
    """The time of the victim's last checkpoint (its start when it never checkpointed)."""
    start = victim.start_time_s
    if victim.last_checkpoint_s is not None:
        return max(start, min(victim.last_checkpoint_s, now_s))
    interval = victim.job.checkpoint_interval_s
    if interval:
        return start + math.floor(max(0.0, now_s - start) / interval) * interval
    return start


def lost_gpu_s(victim: RunningJob, now_s: float) -> float:
    """GPU-seconds of work the victim would redo if stopped now."""
    return max(0.0, now_s - last_checkpoint_s(victim, now_s)) * victim.job.gpus


def victim_rank(victim: RunningJob, now_s: float, order: str) -> tuple[float, float, str]:
    """Sort key: lower priority first, then least work lost (or newest first)."""
    if order == "newest-first":
        return (victim.job.priority, -victim.start_time_s, victim.job.job_id)
    return (victim.job.priority, lost_gpu_s(victim, now_s), victim.job.job_id)


NodeEnd = tuple[float, str, tuple[tuple[int, int], ...]]
"""A running job's expected end on one node: (end, job id, ((GPU index, units), ...))."""


def free_after_s(free_units: Sequence[int], need: int, fractional: bool, ends: Sequence[NodeEnd],
                 skip: Collection[str] = ()) -> float | None:
    """When a node's GPUs fit a request on their own: `need` whole free GPUs (or, fractional, one GPU with
    `need` free units), as its running jobs end in `ends` (earliest first; jobs in `skip` free nothing);
    -inf when they fit now, None when not even after they all end."""
    free = list(free_units)

    def fits() -> bool:
        return any(f >= need for f in free) if fractional else free.count(GPU_UNITS) >= need

    if fits():
        return -math.inf
    for end_s, job_id, held in ends:
        if job_id in skip:
            continue
        for index, units in held:
            free[index] += units
        if fits():
            return end_s
    return None


@dataclass(frozen=True)
class VictimChoice:
    """The victims chosen for one pending job and the nodes they free."""

    victims: tuple[RunningJob, ...]
    nodes: frozenset[int]
    lost_gpu_s: float
