"""The kept queue's order (greengpu.sched.pending_index), taken one job at a time or while jobs only wait.

The order is greengpu.sched.order's: priority levels (base priority plus age boost) from the highest,
and within a level the tenants' jobs merged by (fair share, submit time, tenant), the share read live
after each job is decided (a start raises its tenant's share). Between starts the shares do not move, so
`take_while` takes the jobs that only wait (the core gives them their kind's wait) one merge step each,
with no share read again but the one the tenant rejoins with: a saturated cycle with a thousand tenants
walks thousands of such jobs.
"""

from __future__ import annotations

import heapq
import math
from bisect import bisect_left
from collections.abc import Callable, Collection, Iterator, Mapping
from dataclasses import dataclass

from greengpu.model import PendingJob
from greengpu.sched.order import age_boost

_Entry = tuple[float, str, PendingJob]
"""(submit time, job id, the job): the kept queue's entries."""


@dataclass
class KnownWaits:
    """Waits a walk's caller vouches for (`IndexOrder.take_while`): per key of job (`key_of`, by job id), the stamp
    it holds at (its tenant's, in `stamps`) and the wait. The caller keeps every entry true for the walk's state."""

    waits: dict[object, tuple[int, object]]
    key_of: Mapping[str, object]
    stamps: Mapping[str, int]
    apart: Collection[str]
    """Job ids never given a vouched wait (the caller asks them)."""


class IndexOrder(Iterator[PendingJob]):
    """One walk of the kept queue in queue order (see the module docstring).

    `groups`: per (base priority, tenant), its jobs in (submit time, job id) order (copies: the walk may be
    read after the queue has changed); the age boost's clock, steps per second and cap as greengpu.sched.order
    applies them."""

    __slots__ = ("_groups", "_taken", "_now_s", "_boost_per_s", "_boost_max", "_share_of", "_queues", "_heads",
                 "_heap", "_returning", "_levels")

    def __init__(self, groups: list[tuple[float, str, list[_Entry]]], now_s: float, boost_per_s: float,
                 boost_max: float, share_of: Callable[[str], float]) -> None:
        self._groups = groups
        self._taken = [0] * len(groups)
        self._now_s, self._boost_per_s, self._boost_max = now_s, boost_per_s, boost_max
        self._share_of = share_of
        self._queues: dict[str, list[_Entry]] = {}
        self._heads: dict[str, int] = {}
        self._heap: list[tuple[float, float, str]] = []
        self._levels: dict[float, list[int]] | None = None
        """The groups with jobs left, by the effective priority of their next job (built when first read): the next
        level's groups are the highest key's, so a level costs its own groups, not every tenant's; a priority
        level's few values make a dict cheaper than a heap of thousands of groups."""
        self._returning: str | None = None
        """The tenant whose job was taken last: it rejoins the merge with its share read when the next job
        is asked for (after the caller has decided the last one, as a generator resumed would)."""

    def __iter__(self) -> IndexOrder:
        return self

    def __next__(self) -> PendingJob:
        if not self._ready():
            raise StopIteration
        tenant = heapq.heappop(self._heap)[2]
        head = self._heads[tenant]
        self._heads[tenant] = head + 1
        self._returning = tenant
        return self._queues[tenant][head][2]

    def take_while(self, wait_of: Callable[[_Entry], object | None], waits: dict[str, object],
                   taken: list[PendingJob], known: KnownWaits | None = None) -> None:
        """Take jobs in order while `wait_of` gives each one its wait: recorded in `waits`, the job appended to
        `taken`. The first job it gives None is left to come next. Only waiting jobs are taken, so no share
        moves: each job costs one step of the merge, not a `run` (a thousand tenants' runs are a job long).

        `known`: waits the caller vouches for, given without a call to `wait_of` (most of the jobs a walk with a
        thousand tenants meets: each kind is asked once, the rest of it takes the vouched wait)."""
        share_of = self._share_of
        if not self._ready():
            return
        heap, queues, heads = self._heap, self._queues, self._heads
        heapreplace, heappop = heapq.heapreplace, heapq.heappop
        quick: dict[object, tuple[int, object]] = {}
        key_of: Mapping[str, object] = {}
        stamps: Mapping[str, int] = {}
        apart: Collection[str] = ()
        if known is not None:
            quick, key_of, stamps, apart = known.waits, known.key_of, known.stamps, known.apart
        while True:
            tenant = heap[0][2]
            queue, head = queues[tenant], heads[tenant]
            entry = queue[head]
            vouched = quick.get(key_of[entry[1]]) if quick else None
            if vouched is not None and vouched[0] == stamps.get(tenant, 0) and not (apart and entry[1] in apart):
                wait = vouched[1]
            else:
                wait = wait_of(entry)
                if wait is None:
                    return
            waits[entry[1]] = wait
            taken.append(entry[2])
            head += 1
            heads[tenant] = head
            if head < len(queue):  # it rejoins the merge as `_ready` would rejoin it
                heapreplace(heap, (share_of(tenant), queue[head][0], tenant))
            else:
                heappop(heap)
                if not heap:  # the level is done: on to the next one, as `_ready` would go
                    if not self._next_level():
                        return
                    heap, queues, heads = self._heap, self._queues, self._heads

    def _ready(self) -> bool:
        """Bring the merge to the next job: the last tenant rejoins it, or the next level starts. False at the end."""
        tenant = self._returning
        if tenant is not None:
            self._returning = None
            queue, head = self._queues[tenant], self._heads[tenant]
            if head < len(queue):
                heapq.heappush(self._heap, (self._share_of(tenant), queue[head][0], tenant))
        return bool(self._heap) or self._next_level()

    def _below(self, priority: float, level: float) -> Callable[[_Entry], bool]:
        """bisect key: whether an entry of base `priority` is below `level` (False for a prefix, then True).
        `effective` inlined (this is asked about ten times per group and level): the two must stay the same."""
        now_s, boost_per_s, boost_max = self._now_s, self._boost_per_s, self._boost_max
        floor = math.floor
        return lambda entry: priority + (0 if (w := (now_s - entry[0]) * boost_per_s) <= 0
                                         else steps if (steps := floor(w)) < boost_max else boost_max) != level

    def _next_level(self) -> bool:
        groups, taken = self._groups, self._taken
        now_s, boost_per_s, boost_max = self._now_s, self._boost_per_s, self._boost_max

        def effective(priority: float, submit_s: float) -> float:  # queue_order's expression
            return priority + age_boost((now_s - submit_s) * boost_per_s, boost_max)

        levels = self._levels
        if levels is None:  # each group's oldest job left has its highest effective priority
            levels = self._levels = {}
            for g, (priority, _, entries) in enumerate(groups):
                if taken[g] < len(entries):
                    levels.setdefault(effective(priority, entries[taken[g]][0]), []).append(g)
        if not levels:
            return False
        level = max(levels)
        queues: dict[str, list[_Entry]] = {}
        merged: dict[str, list[list[_Entry]]] = {}  # tenants with jobs of two base priorities at this level
        for g in sorted(levels.pop(level)):  # in group order, as a heap of (level, group) would give them
            priority, tenant, entries = groups[g]
            start, size = taken[g], len(entries)
            # Effective priority falls along the list (older first): this level is a prefix of what is left, and
            # all of it when its newest job is at the level too.
            if effective(priority, entries[-1][0]) == level:
                end = size
            else:
                end = bisect_left(entries, True, start, key=self._below(priority, level))
                levels.setdefault(effective(priority, entries[end][0]), []).append(g)  # a lower level: later
            taken[g] = end
            part = entries if start == 0 and end == size else entries[start:end]
            if tenant in queues:
                merged.setdefault(tenant, [queues[tenant]]).append(part)
            else:
                queues[tenant] = part
        for tenant, lists in merged.items():
            queues[tenant] = sorted(e for part in lists for e in part)
        self._queues = queues
        self._heads = dict.fromkeys(queues, 0)
        self._heap = [(self._share_of(t), q[0][0], t) for t, q in queues.items()]
        heapq.heapify(self._heap)
        return True
