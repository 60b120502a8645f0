"""The pending queue kept between cycles, updated by differences: a memo of the snapshot's pending tuple.

A saturated queue holds hundreds of jobs, and a cycle on a full cluster decides only a few of them;
sorting and walking the whole queue again every cycle was most of a saturated replay's time. This
index keeps, for the pending jobs it was last brought up to date with (by object identity, like the
books' running jobs):

- per (priority, tenant), the jobs in (submit time, job id) order. A job's age boost grows with its
  age, so within one base priority that order is also the order of effective priority: the queue
  order (greengpu.sched.order) is a merge of these lists, taken lazily, one priority level at a time;
- per kind of job (`alike_key`: everything a waiting job's decision reads but its duration), the jobs
  in (duration, job id) order: the jobs short enough to backfill are a prefix of each;
- each job's id and capacity wait, so the waits of the jobs a full cycle skips are built in C.

Nothing is decided here: the cycle reads the index instead of re-walking the snapshot, and
`schedule_cycle(incremental=False)` (which never reads it) cross-checks the results.
"""

from __future__ import annotations

import math
from bisect import bisect_left, insort
from collections.abc import Callable, Collection, Hashable, Iterator, Mapping, Sequence
from typing import Any

from greengpu.model import Job, PendingJob
from greengpu.policy import SchedulerPolicy
from greengpu.sched.index_order import IndexOrder
from greengpu.sched.waits import Wait

_SubmitEntry = tuple[float, str, PendingJob]
_DurationEntry = tuple[float, str, PendingJob]


class PendingIndex:
    """The pending jobs of the last snapshot seen, ordered for the cycle (see the module docstring)."""

    def __init__(self, alike_key: Callable[[Job], Hashable]) -> None:
        self._alike_key = alike_key
        self._clear()

    def _clear(self) -> None:
        self.by_obj: dict[int, PendingJob] = {}
        """The PendingJob objects held, by id() (kept alive, so ids stay unique while held)."""
        self.capacity_wait: dict[int, Wait] = {}
        self.by_job_id: dict[str, PendingJob] = {}
        self.kind_of: dict[str, Hashable] = {}
        """Each job's kind (`alike_key`), by job id."""
        self.by_priority: dict[tuple[float, str], list[_SubmitEntry]] = {}
        """(priority, tenant) -> jobs in (submit time, job id) order."""
        self.by_kind: dict[Hashable, list[_DurationEntry]] = {}
        """alike_key -> jobs in (duration, job id) order."""
        self.kinds_of_tenant: dict[str, dict[Hashable, None]] = {}
        """Per tenant, the kinds of its jobs in `by_kind` (an ordered set)."""
        self.levels_of_tenant: dict[str, dict[float, None]] = {}
        """Per tenant, the priorities of its jobs in `by_priority` (an ordered set)."""
        self.smallest_of: dict[str, tuple[int, float, str, Job]] = {}
        """Per tenant, (units, duration, job id, job) of its smallest waiting job, when known: a smaller one arriving
        replaces it, its leaving forgets it (found again when asked: `smallest_waiting`)."""
        self.oldest_of: dict[str, float] = {}
        """Per tenant, the submit time of its oldest waiting job, when known (kept as `smallest_of` is)."""
        self.last: tuple[PendingJob, ...] | None = None
        """The tuple last synced (kept, so that the ids in `last_ids` stay those of live objects)."""
        self.last_ids: tuple[int, ...] = ()

    # -------------------------------------------------------------- upkeep

    def sync(self, pending: tuple[PendingJob, ...], capacity_wait: Callable[[Job], Wait]) -> bool:
        """Bring the index to `pending` (by object identity); False when it cannot stand for it (the same
        object twice): then it is emptied, and rebuilt at the next call.

        A queue changes between cycles by jobs leaving (anywhere) and arriving (mostly at the end), so
        the objects' ids are walked against the last tuple's in runs compared in C (`_common_run`):
        Python work per change, not per job. Any other change is still found: an object the walk passes
        in the old tuple is dropped, one it meets in the new tuple that is not held is added."""
        if pending is self.last:
            return True
        ids = tuple(map(id, pending))
        last = self.last_ids
        held = self.by_obj
        i = j = 0
        while i < len(ids):
            run = _common_run(ids, i, last, j)
            i += run
            j += run
            if i >= len(ids):
                break
            if ids[i] in held and j < len(last):
                if last[j] in held:
                    self._remove(last[j])  # the old tuple's job here is gone (or comes back later: re-added)
                j += 1
            else:
                if ids[i] not in held:
                    self._add(ids[i], pending[i], capacity_wait)
                i += 1
        for gone in last[j:]:
            if gone in held:
                self._remove(gone)
        if len(held) != len(ids):
            self._clear()
            return False
        self.last, self.last_ids = pending, ids
        return True

    def _add(self, obj_id: int, item: PendingJob, capacity_wait: Callable[[Job], Wait]) -> None:
        job = item.job
        replaced = self.by_job_id.get(job.job_id)
        if replaced is not None:  # a new object for a held job (e.g. requeued): the old one is gone
            self._remove(id(replaced))
        self.by_obj[obj_id] = item
        self.capacity_wait[obj_id] = capacity_wait(job)
        self.by_job_id[job.job_id] = item
        kind = self.kind_of[job.job_id] = self._alike_key(job)
        insort(self.by_priority.setdefault((job.priority, job.tenant), []), (job.submit_time_s, job.job_id, item))
        insort(self.by_kind.setdefault(kind, []), (job.duration_s, job.job_id, item))
        self.kinds_of_tenant.setdefault(job.tenant, {})[kind] = None
        self.levels_of_tenant.setdefault(job.tenant, {})[job.priority] = None
        smallest = self.smallest_of.get(job.tenant)
        if smallest is not None and (job.units, job.duration_s, job.job_id) < smallest[:3]:
            self.smallest_of[job.tenant] = (job.units, job.duration_s, job.job_id, job)
        oldest_s = self.oldest_of.get(job.tenant)
        if oldest_s is not None and job.submit_time_s < oldest_s:
            self.oldest_of[job.tenant] = job.submit_time_s

    def _remove(self, obj_id: int) -> None:
        item = self.by_obj.pop(obj_id)
        job = item.job
        del self.capacity_wait[obj_id]
        if self.by_job_id.get(job.job_id) is item:
            del self.by_job_id[job.job_id]
            del self.kind_of[job.job_id]
        tenant = job.tenant
        if _discard(self.by_priority, (job.priority, tenant), (job.submit_time_s, job.job_id)):
            _forget(self.levels_of_tenant, tenant, job.priority)
        kind = self._alike_key(job)
        if _discard(self.by_kind, kind, (job.duration_s, job.job_id)):
            _forget(self.kinds_of_tenant, tenant, kind)
        smallest = self.smallest_of.get(tenant)
        if smallest is not None and smallest[2] == job.job_id:
            del self.smallest_of[tenant]
        if self.oldest_of.get(tenant) == job.submit_time_s:
            del self.oldest_of[tenant]

    # -------------------------------------------------------------- reads

    def smallest_waiting(self, tenant: str) -> Job | None:
        """The tenant's smallest waiting job by (units, duration, job id), as greengpu.sched.claims.claimants_of
        picks a claimant: each kind's first job (its shortest) is a candidate. Kept between changes."""
        found = self.smallest_of.get(tenant)
        if found is None:
            for kind in self.kinds_of_tenant.get(tenant, ()):
                job = self.by_kind[kind][0][2].job
                if found is None or (job.units, job.duration_s, job.job_id) < found[:3]:
                    found = (job.units, job.duration_s, job.job_id, job)
            if found is None:
                return None
            self.smallest_of[tenant] = found
        return found[3]

    def oldest_submit_s(self, tenant: str) -> float:
        """When the tenant's oldest waiting job came (inf: none waits). Kept between changes."""
        found = self.oldest_of.get(tenant)
        if found is None:
            found = min((self.by_priority[(priority, tenant)][0][0]
                         for priority in self.levels_of_tenant.get(tenant, ())), default=math.inf)
            self.oldest_of[tenant] = found
        return found

    def kind_waits(self, skip: Callable[[str], bool], covered: Mapping[Hashable, int] | None = None) -> list[Wait]:
        """The capacity waits of the kinds of job with at least one job for which `skip(job_id)` is False,
        leaving out each kind's first `covered[kind]` jobs (shortest first) as well. A kind's longest
        jobs are looked at first: those a cycle decided are few, and among its shortest."""
        found: list[Wait] = []
        for kind, entries in self.by_kind.items():
            first = covered.get(kind, 0) if covered else 0
            for position in range(len(entries) - 1, first - 1, -1):
                entry = entries[position]
                if not skip(entry[1]):
                    found.append(self.capacity_wait[id(entry[2])])
                    break
        return found

    def short_enough(self, now_s: float, latest_s: float) -> Iterator[tuple[Hashable, list[_DurationEntry], int]]:
        """Per kind of job, its jobs (shortest first) and how many of them have `now_s + duration_s <= latest_s`
        (a prefix; kinds with none are left out)."""
        for kind, entries in self.by_kind.items():
            count = bisect_left(entries, True, key=lambda e: now_s + e[0] > latest_s)
            if count:
                yield kind, entries, count

    def ordered(self, now_s: float, policy: SchedulerPolicy, share_of: Callable[[str], float],
                among: Collection[str] | None = None) -> IndexOrder:
        """The pending jobs (those of `among` only, when given) in `greengpu.sched.order.queue_order`'s order,
        taken lazily: work in proportion to the jobs taken (and the priority levels and tenants met), not to
        the queue; a run of jobs at a time if asked (greengpu.sched.index_order)."""
        # Copies: a cycle that stops early hands the rest of this walk to its waits (AlikeRestWaits), which may be
        # read after the next cycle has synced the index.
        if among is None:
            groups = [(priority, tenant, entries[:]) for (priority, tenant), entries in self.by_priority.items()
                      if entries]
        else:
            kept = ((priority, tenant, [e for e in entries if e[1] in among])
                    for (priority, tenant), entries in self.by_priority.items())
            groups = [group for group in kept if group[2]]
        return IndexOrder(groups, now_s, policy.age_boost_per_hour / 3600.0, policy.age_boost_max, share_of)


def _common_run(new: tuple[int, ...], i: int, old: tuple[int, ...], j: int) -> int:
    """How many ids from new[i] on equal old[j], old[j+1], ...: galloping, then halving; each probe a
    slice comparison in C."""
    limit = min(len(new) - i, len(old) - j)
    if limit <= 0 or new[i] != old[j]:
        return 0
    low, step = 1, 1  # new[i:i+low] == old[j:j+low]
    high = limit + 1
    while low < limit:
        probe = min(low + step, limit)
        if new[i + low:i + probe] != old[j + low:j + probe]:
            high = probe  # the run ends before probe
            break
        low = probe
        step *= 2
    while high - low > 1:
        middle = (low + high) // 2
        if new[i + low:i + middle] == old[j + low:j + middle]:
            low = middle
        else:
            high = middle
    return low


def _discard(groups: dict[Any, list[tuple[float, str, PendingJob]]], key: Hashable,
             at: tuple[float, str]) -> bool:
    """Remove the entry `at` from `groups[key]`; True when that emptied the group (then removed too)."""
    entries = groups[key]
    position = bisect_left(entries, at)  # (value, job id) < (value, job id, item): lands on the entry
    assert entries[position][1] == at[1]
    del entries[position]
    if not entries:
        del groups[key]
        return True
    return False


def _forget(sets: dict[str, dict[Any, None]], tenant: str, member: Hashable) -> None:
    members = sets[tenant]
    del members[member]
    if not members:
        del sets[tenant]


class _LazyWaits(Mapping[str, Wait]):
    """A cycle's waits as a mapping built only when read whole (`_build`, once); its distinct waits are known
    without building it (`distinct_waits`: the simulator reads only those)."""

    __slots__ = ("_built", "distinct_waits")

    def __init__(self, distinct_waits: Collection[Wait]) -> None:
        self._built: dict[str, Wait] | None = None
        self.distinct_waits = tuple(distinct_waits)

    def _build(self) -> dict[str, Wait]:
        raise NotImplementedError

    def _dict(self) -> dict[str, Wait]:
        if self._built is None:
            self._built = self._build()
        return self._built

    def __getitem__(self, job_id: str) -> Wait:
        return self._dict()[job_id]

    def __iter__(self) -> Iterator[str]:
        return iter(self._dict())

    def __len__(self) -> int:
        return len(self._dict())

    def __contains__(self, job_id: object) -> bool:
        return job_id in self._dict()

    def __bool__(self) -> bool:
        return bool(self.distinct_waits)


class QueueWaits(_LazyWaits):
    """A full cycle's waits, built only when read whole: the jobs the cycle decided as decided, every
    other pending job waiting for capacity (its kind's wait), in the order a plain dict would have them
    (the snapshot's order, then the jobs decided before the queue was skipped, in decision order).

    The simulator reads only the distinct waits (`distinct_waits`, found without walking the queue);
    bodies that list every waiting job build the dict once."""

    __slots__ = ("_pending", "_capacity_wait", "_before", "_decided", "_placed", "_kinds")

    def __init__(self, pending: tuple[PendingJob, ...], capacity_wait: Callable[[Job], Wait],
                 before: Collection[str], decided: Mapping[str, Wait], placed: Collection[str],
                 distinct_waits: Collection[Wait],
                 kinds: Sequence[tuple[Sequence[_DurationEntry], Wait]] = ()) -> None:
        """`before`: the jobs decided before the queue was skipped (their waits in `decided`, in order);
        `kinds`: jobs not decided one by one that wait alike (entries of the kept queue, and their wait);
        `placed`: jobs that started."""
        self._kinds = kinds
        self._pending = pending
        self._capacity_wait = capacity_wait
        self._before = tuple(before)
        self._decided = decided  # the cycle's own dict, not changed after the cycle
        self._placed = tuple(placed)
        super().__init__(distinct_waits)

    def _build(self) -> dict[str, Wait]:
        capacity_wait = self._capacity_wait
        built = {p.job.job_id: capacity_wait(p.job) for p in self._pending}
        before = set(self._before)
        for job_id in before:
            built.pop(job_id, None)
        for entries, wait in self._kinds:
            for entry in entries:
                if entry[1] not in before:
                    built[entry[1]] = wait
        built.update(self._decided)
        for job_id in self._placed:
            built.pop(job_id, None)
        return built

class AlikeRestWaits(_LazyWaits):
    """The waits of a cycle that stopped walking the queue once every job left waits as the first of its kind
    did (greengpu.sched.core): the jobs decided, in decision order, then the rest of the walk in queue order,
    each with its kind's wait. Built only when read whole, from the rest of the walk itself (`rest`), so the
    order is the one a full walk gives."""

    __slots__ = ("_decided", "_rest", "_kind_of", "_kind_waits")

    def __init__(self, decided: Mapping[str, Wait], rest: RestOfWalk, kind_of: Callable[[Job], Hashable],
                 kind_waits: Mapping[Hashable, Wait], distinct_waits: Collection[Wait]) -> None:
        self._decided = decided  # the cycle's own dict, not changed after the cycle
        self._rest = rest
        self._kind_of = kind_of
        self._kind_waits = kind_waits
        super().__init__(distinct_waits)

    def _build(self) -> dict[str, Wait]:
        built = dict(self._decided)
        kind_of, kind_waits = self._kind_of, self._kind_waits
        for item in self._rest.jobs():
            built[item.job.job_id] = kind_waits[kind_of(item.job)]
        return built

class RestOfWalk:
    """The jobs a walk of the queue did not reach, in its order: taken from the walk's own iterator once,
    when first asked for (nothing the order reads changes after the walk stops)."""

    __slots__ = ("_iterator", "_jobs")

    def __init__(self, iterator: Iterator[PendingJob]) -> None:
        self._iterator: Iterator[PendingJob] | None = iterator
        self._jobs: list[PendingJob] = []

    def jobs(self) -> list[PendingJob]:
        if self._iterator is not None:
            self._jobs = list(self._iterator)
            self._iterator = None
        return self._jobs
