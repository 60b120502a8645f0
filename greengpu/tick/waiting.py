"""Whether work waits for what the energy levers hold back: one typed answer from the core's cycle.

The capping lever lifts caps while jobs wait (`relax_when_queued`) and the sleep lever puts no node to
sleep then (`priority_aware`). Both ask this one question; no body re-derives it from reason strings.
"""

from __future__ import annotations

from dataclasses import dataclass

from greengpu.sched.core import WAIT_CAPACITY, WAIT_WAKE, CycleResult

LEVER_BLOCKED_REASONS = frozenset({WAIT_CAPACITY, WAIT_WAKE})
"""Wait reasons a faster running job or an extra awake node could shorten."""


@dataclass(frozen=True)
class WorkWaiting:
    """The jobs that wait for capacity the levers hold back (empty: the cluster has slack)."""

    job_ids: tuple[str, ...] = ()

    @property
    def waiting(self) -> bool:
        """True while at least one job waits for capacity."""
        return bool(self.job_ids)


NOTHING_WAITS = WorkWaiting()


def work_waiting(result: CycleResult) -> WorkWaiting:
    """The jobs of a scheduling cycle that wait for capacity or for sleeping nodes to wake."""
    return WorkWaiting(tuple(sorted(job_id for job_id, reason in result.waiting.items()
                                    if reason in LEVER_BLOCKED_REASONS)))
