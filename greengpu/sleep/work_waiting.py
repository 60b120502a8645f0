"""Whether work waits for what the energy levers hold back: one typed answer from the core's cycle.

The capping lever lifts caps while jobs wait (`relax_when_queued`) and the sleep lever puts no node to
sleep then (`priority_aware`). Both ask this one question; no body re-derives it from reason strings.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from greengpu.model import Cluster, PlaceJob, RunningJob
from greengpu.policy import SleepPolicy
from greengpu.sched.core import WAIT_CAPACITY, WAIT_WAKE, CycleResult
from greengpu.sched.slack import NO_WAIT, QueueGuard, model_of_nodes, queue_guard
from greengpu.sched.waits import Wait, WaitReason, distinct_of
from greengpu.sleep.headroom import levers_have_slack

LEVER_BLOCKED_REASONS = frozenset({WAIT_CAPACITY, WAIT_WAKE})
"""Wait reasons a faster running job or an extra awake node could shorten."""
LEVER_BLOCKED_WAITS = frozenset(set(WaitReason) - {WaitReason.QUOTA, WaitReason.PREEMPTING, WaitReason.NO_MODEL})
"""The same, as the core's typed reasons (every reason whose text is one of LEVER_BLOCKED_REASONS)."""


class WorkWaiting:
    """The jobs that wait for capacity the levers hold back (empty: the cluster has slack).

    From a cycle (`work_waiting`) the ids are sorted only when asked for: the simulator reads
    `waiting` and `guard` at every cycle of a queue thousands deep, the daemon's JSON the ids."""

    __slots__ = ("_job_ids", "_waits", "_waiting", "guard", "judged", "no_slack", "uncapped")

    def __init__(self, job_ids: tuple[str, ...] = (), guard: QueueGuard = NO_WAIT, no_slack: bool = False,
                 uncapped: frozenset[str] | None = None, judged: frozenset[str] | None = None) -> None:
        self._job_ids: tuple[str, ...] | None = tuple(job_ids)
        self._waits: Mapping[str, Wait] | None = None
        self._waiting = bool(self._job_ids)
        self.guard = guard
        """Per job and node, what the levers must leave alone (greengpu.sched.slack: a lever may spend
        slack, never queue time). A body that only knows `job_ids` leaves it empty: then every cap lifts
        and no node sleeps while anything waits (the fail-safe form)."""
        self.no_slack = no_slack
        """The GPUs not in use no longer cover the warm reserve (greengpu.sleep.headroom): every cap lifts,
        whether or not a job waits yet."""
        self.uncapped = uncapped
        """The running jobs whose caps lift (the guard's per-job verdict, `uncapped_jobs`); None: not known
        (a body that knows only `job_ids`, an old daemon): then every cap lifts while work waits."""
        self.judged = judged
        """The jobs the per-job verdict covers (the running jobs the tick saw; None: every job). A job outside
        it (a GPU running something the daemon does not know of) is not known: its cap lifts while work waits."""

    @classmethod
    def of_waits(cls, waits: Mapping[str, Wait], waiting: bool, guard: QueueGuard) -> WorkWaiting:
        """From a cycle's typed waits; `waiting`: whether any of them is lever-blocked."""
        made = cls((), guard)
        made._job_ids = None if waiting else ()
        made._waits = waits if waiting else None
        made._waiting = waiting
        return made

    @property
    def job_ids(self) -> tuple[str, ...]:
        """The waiting jobs' ids, sorted."""
        if self._job_ids is None:
            waits = self._waits or {}
            self._job_ids = tuple(sorted(job_id for job_id, wait in waits.items()
                                         if wait.reason in LEVER_BLOCKED_WAITS))
        return self._job_ids

    @property
    def waiting(self) -> bool:
        """True while at least one job waits for capacity."""
        return self._waiting

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, WorkWaiting):
            return NotImplemented
        return (self.job_ids == other.job_ids and self.guard == other.guard and self.no_slack == other.no_slack
                and self.uncapped == other.uncapped and self.judged == other.judged)

    def __hash__(self) -> int:
        return hash((self.job_ids, self.guard, self.no_slack, self.uncapped, self.judged))

    def __repr__(self) -> str:
        return (f"WorkWaiting(job_ids={self.job_ids!r}, guard={self.guard!r}, no_slack={self.no_slack!r}, "
                f"uncapped={self.uncapped!r})")

    def _copy(self, no_slack: bool, uncapped: frozenset[str] | None, judged: frozenset[str] | None) -> WorkWaiting:
        made = WorkWaiting((), self.guard, no_slack, uncapped, judged)
        made._job_ids, made._waits, made._waiting = self._job_ids, self._waits, self._waiting
        return made

    def with_no_slack(self, no_slack: bool) -> WorkWaiting:
        """The same waiting work with the headroom rule's verdict `no_slack`."""
        if no_slack == self.no_slack:
            return self
        return self._copy(no_slack, self.uncapped, self.judged)

    def with_uncapped(self, uncapped: frozenset[str] | None, judged: frozenset[str] | None = None) -> WorkWaiting:
        """The same waiting work, knowing which of the `judged` jobs' caps lift (`uncapped_jobs`)."""
        return self._copy(self.no_slack, uncapped, judged)

    @property
    def capped(self) -> frozenset[str] | None:
        """The judged jobs whose caps stay on (None: not known)."""
        if self.uncapped is None or self.judged is None:
            return None
        return self.judged - self.uncapped

    def lifts_cap(self, job_id: str | None) -> bool:
        """Whether the job `job_id` runs uncapped: the cluster has no slack, or the job is in a waiting job's
        way. Where the per-job verdict is not known (`uncapped` None, or a GPU whose job has no id), every
        cap lifts while work waits (the fail-safe form, `lifts_every_cap`); so does a job the verdict does
        not cover (`judged`)."""
        if self.no_slack:
            return True
        if self.uncapped is None or job_id is None or (self.judged is not None and job_id not in self.judged):
            return self._waiting
        return job_id in self.uncapped

    @property
    def lifts_every_cap(self) -> bool:
        """What a body that cannot tell which jobs are in a waiting job's way does with caps: lift them all
        while work waits for capacity or the cluster has no slack left."""
        return self._waiting or self.no_slack


NOTHING_WAITS = WorkWaiting()


def uncapped_jobs(guard: QueueGuard, cluster: Cluster, running: Iterable[RunningJob],
                  placed: Iterable[PlaceJob] = (), tenant_of: Mapping[str, str] | None = None) -> frozenset[str]:
    """The ids of the jobs whose caps lift by the slack rule (`QueueGuard.lifts`): the running ones and those
    a cycle just `placed` (`tenant_of`: the placed jobs' tenants), as the simulator lifts them after the
    cycle. The headroom rule's `no_slack` comes on top (`WorkWaiting.lifts_cap`)."""
    if not guard.queue_waits:
        return frozenset()
    model_of = model_of_nodes(cluster)
    found = set(guard.uncapped_jobs(running, cluster))
    tenants = tenant_of or {}
    for action in placed:
        tenant = tenants.get(action.job_id)
        if tenant is not None and guard.lifts(tenant, dict.fromkeys(s.node for s in action.slots), model_of):
            found.add(action.job_id)
    return frozenset(found)


def with_job_verdict(waiting: WorkWaiting, cluster: Cluster, running: Sequence[RunningJob],
                     placed: Sequence[PlaceJob] = (), tenant_of: Mapping[str, str] | None = None) -> WorkWaiting:
    """`waiting` with the slack rule's per-job verdict on the `running` jobs and those just `placed`: which
    run uncapped (`uncapped_jobs`) and which were judged at all."""
    judged = frozenset([*(r.job.job_id for r in running), *(a.job_id for a in placed)])
    return waiting.with_uncapped(uncapped_jobs(waiting.guard, cluster, running, placed, tenant_of), judged)


def work_waiting(result: CycleResult, cluster: Cluster | None = None) -> WorkWaiting:
    """The jobs of a scheduling cycle that wait for capacity or for sleeping nodes to wake, and (given
    the inventory) the slack rule's verdict from the cycle's typed waits."""
    # Jobs alike share one Wait: whether any job is lever-blocked is asked once per distinct wait.
    waiting = any(wait.reason in LEVER_BLOCKED_WAITS for wait in distinct_of(result.waits))
    guard = queue_guard(result.waits, cluster) if cluster is not None else NO_WAIT
    return WorkWaiting.of_waits(result.waits, waiting, guard)


def with_slack_verdict(waiting: WorkWaiting, total_gpus: float, busy_gpus: float, policy: SleepPolicy,
                       arrived_gpus: float | None = None) -> WorkWaiting:
    """`waiting` with the headroom rule's verdict (greengpu.sleep.headroom) for a cluster of `total_gpus`
    with `busy_gpus` in use (`arrived_gpus`: the day's arrivals, greengpu.sleep.arrivals)."""
    return waiting.with_no_slack(no_slack_left(total_gpus, busy_gpus, policy, arrived_gpus))


def no_slack_left(total_gpus: float, busy_gpus: float, policy: SleepPolicy, arrived_gpus: float | None = None) -> bool:
    """The one slack verdict every body asks (the simulator after a cycle or a finish, the daemon's tick, the
    agent's tick source): the GPUs not in use no longer cover the warm reserve (greengpu.sleep.headroom),
    so every cap lifts. `busy_gpus`: `gpus_in_use` of the running jobs."""
    return not levers_have_slack(total_gpus, busy_gpus, policy, arrived_gpus)


def gpus_in_use(running: Iterable[RunningJob]) -> float:
    """The GPUs the running jobs hold, as every body counts them for the slack verdict (a job's whole share)."""
    return float(sum(r.job.gpus for r in running))
