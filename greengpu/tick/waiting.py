"""Whether work waits for what the energy levers hold back: one typed answer from the core's cycle.

The capping lever lifts caps while jobs wait (`relax_when_queued`) and the sleep lever puts no node to
sleep then (`priority_aware`). Both ask this one question; no body re-derives it from reason strings.
"""

from __future__ import annotations

from dataclasses import dataclass

from greengpu.model import Cluster
from greengpu.sched.core import WAIT_CAPACITY, WAIT_WAKE, CycleResult
from greengpu.sched.slack import NO_WAIT, QueueGuard, queue_guard
from greengpu.sched.waits import WaitReason

LEVER_BLOCKED_REASONS = frozenset({WAIT_CAPACITY, WAIT_WAKE})
"""Wait reasons a faster running job or an extra awake node could shorten."""
LEVER_BLOCKED_WAITS = frozenset(set(WaitReason) - {WaitReason.QUOTA, WaitReason.PREEMPTING, WaitReason.NO_MODEL})
"""The same, as the core's typed reasons (every reason whose text is one of LEVER_BLOCKED_REASONS)."""


@dataclass(frozen=True)
class WorkWaiting:
    """The jobs that wait for capacity the levers hold back (empty: the cluster has slack)."""

    job_ids: tuple[str, ...] = ()
    guard: QueueGuard = NO_WAIT
    """Per job and node, what the levers must leave alone (greengpu.sched.slack: a lever may spend
    slack, never queue time). A body that only knows `job_ids` leaves it empty: then every cap lifts
    and no node sleeps while anything waits (the fail-safe form)."""

    @property
    def waiting(self) -> bool:
        """True while at least one job waits for capacity."""
        return bool(self.job_ids)


NOTHING_WAITS = WorkWaiting()


def work_waiting(result: CycleResult, cluster: Cluster | None = None) -> WorkWaiting:
    """The jobs of a scheduling cycle that wait for capacity or for sleeping nodes to wake, and (given
    the inventory) the slack rule's verdict from the cycle's typed waits."""
    job_ids = tuple(sorted(job_id for job_id, wait in result.waits.items() if wait.reason in LEVER_BLOCKED_WAITS))
    return WorkWaiting(job_ids, queue_guard(result.waits, cluster) if cluster is not None else NO_WAIT)
