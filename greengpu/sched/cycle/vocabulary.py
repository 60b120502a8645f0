"""What the cycle's parts share: the kind of a waiting job (`alike_key`), the cycle's result, and the memo bounds."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from greengpu.model import (
    Action,
    Job,
)
from greengpu.sched.backfill import Reservation
from greengpu.sched.placement import needs_healthy_gpus
from greengpu.sched.waits import (
    Wait,
    WaitReason,
)

_RESERVED_WAITS_KEPT = 4096
_KIND_WAITS = frozenset({WaitReason.QUOTA, WaitReason.NO_MODEL})
"""Waits that hold for every job of a kind whatever its duration (no backfill changes them)."""
EVERYWHERE = "every free node is owed"
"""A kind's memo read only that every free node is owed to another tenant's claimant (`_CycleState._claims_read`)."""


def alike_key(job: Job) -> tuple[object, ...]:
    """Everything a waiting job's quota verdict and wait depend on but its duration: jobs with the same key
    are decided alike (the duration only decides whether they may backfill). Placement keeps some classes off
    warning GPUs (`needs_healthy_gpus`), so two jobs alike but for that may be placed apart; node constraints
    (`Job.node_rule`, None for nearly every job) decide which nodes it may use."""
    return (job.tenant, job.gpu_types, job.units, job.gpus_per_node, job.interruptible, needs_healthy_gpus(job),
            job.node_rule)


@dataclass(frozen=True)
class CycleResult:
    """What one cycle decided, and why the rest waits (typed: greengpu.sched.waits)."""

    actions: tuple[Action, ...]
    waits: Mapping[str, Wait] = field(default_factory=dict)
    reservations: tuple[Reservation, ...] = ()
    withdrawn: tuple[str, ...] = ()
    """Running jobs asked to checkpoint and stop for a job that no longer waits: they keep running,
    and the body clears their preemption signal (a checkpoint taken meanwhile costs nothing)."""
    unchanged_until_s: float = -math.inf
    """A cycle before this time on the same running jobs, queue and node states, the clock the only change,
    would decide exactly as this one did: nothing, with the same waits (greengpu.sched.steady). -inf: no
    such promise (the cycle acted, or read the clock where it moves at any time)."""

    @property
    def waiting(self) -> dict[str, str]:
        """Why each waiting job waits, in the words of the JSON outputs."""
        return {job_id: wait.text for job_id, wait in self.waits.items()}
