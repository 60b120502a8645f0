"""Whether work waits for what the energy levers hold back: one typed answer from the core's cycle.

The capping lever lifts caps while jobs wait (`relax_when_queued`) and the sleep lever puts no node to
sleep then (`priority_aware`). Both ask this one question; no body re-derives it from reason strings.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from greengpu.energy.headroom import levers_have_slack
from greengpu.model import Cluster
from greengpu.policy import SleepPolicy
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

    no_slack: bool = False
    """The GPUs not in use no longer cover the warm reserve (greengpu.energy.headroom): every cap lifts,
    whether or not a job waits yet."""

    @property
    def waiting(self) -> bool:
        """True while at least one job waits for capacity."""
        return bool(self.job_ids)

    @property
    def lifts_every_cap(self) -> bool:
        """What a body that cannot tell which jobs are in a waiting job's way does with caps: lift them all
        while work waits for capacity or the cluster has no slack left."""
        return bool(self.job_ids) or self.no_slack


NOTHING_WAITS = WorkWaiting()


def work_waiting(result: CycleResult, cluster: Cluster | None = None) -> WorkWaiting:
    """The jobs of a scheduling cycle that wait for capacity or for sleeping nodes to wake, and (given
    the inventory) the slack rule's verdict from the cycle's typed waits."""
    job_ids = tuple(sorted(job_id for job_id, wait in result.waits.items() if wait.reason in LEVER_BLOCKED_WAITS))
    return WorkWaiting(job_ids, queue_guard(result.waits, cluster) if cluster is not None else NO_WAIT)


def with_slack_verdict(waiting: WorkWaiting, total_gpus: float, busy_gpus: float, policy: SleepPolicy,
                       arrived_gpus: float | None = None) -> WorkWaiting:
    """`waiting` with the headroom rule's verdict (greengpu.energy.headroom) for a cluster of `total_gpus`
    with `busy_gpus` in use (`arrived_gpus`: the day's arrivals, greengpu.energy.arrivals)."""
    no_slack = not levers_have_slack(total_gpus, busy_gpus, policy, arrived_gpus)
    return waiting if no_slack == waiting.no_slack else replace(waiting, no_slack=no_slack)
