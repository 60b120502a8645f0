"""How long a cycle's result stands while nothing changes but the clock. Pure.

A saturated cluster's periodic cycle (every `interval_s` while jobs wait) mostly meets the same running
jobs, the same queue and the same nodes as the cycle before, and decides the same: nothing starts or
stops and every job waits as it did. What a cycle reads of the clock is known and each piece moves
only at known times, so a cycle that decided nothing can say until when another cycle on the same
inputs would decide exactly as it did (`CycleResult.unchanged_until_s`):

- the queue order moves with the age boost, a whole step per hour waited. Only the jobs taken while
  preemption attempts or reservations are left (the walk's head) are decided in an order that matters:
  after them every job waits for its own kind's reason, in any order. So the order stands until a job
  of the head takes its next step, or a job behind the head reaches a level (and place in it) ahead of
  the head's last job (`order_unchanged_until_s`);
- a reservation's start is the time its nodes come free, no sooner than the next cycle: each node's
  time is its running jobs' expected end, or now plus `interval_s` once that end is that close. The
  nodes a reservation picks stand until the clock brings that floor up to a node's own time
  (greengpu.sched.backfill.reservation_unchanged_until_s);
- a backfill that failed fails later too: a job ending later fits before fewer reservations, whose
  starts move with the clock at most as fast as the job's end does;
- everything else a cycle decides on a full cluster reads no clock, except what gives no promise at
  all: a victim search past its cheap checks (victims age past `min_runtime_s` and their lost work
  grows), a job above one of its own tenant's jobs (the same), a job asked to stop (its grace runs out),
  a fair share read from decayed past usage, and a wake planned for a job (which jobs get the room
  follows the order).
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable, Sequence

from greengpu.model import PendingJob
from greengpu.policy import SchedulerPolicy
from greengpu.sched.order import age_boost
from greengpu.sched.pending_index import PendingIndex

MARGIN_S = 1.0
"""Promises end this much early: a boost step due exactly at a cycle's time may round either way."""


def order_unchanged_until_s(index: PendingIndex, head: Sequence[PendingJob], now_s: float,
                            policy: SchedulerPolicy, share_of: Callable[[str], float]) -> float:
    """Until when the first `len(head)` jobs of the queue order stay `head`, in that order, while no job
    starts, ends or arrives (shares then stand still: `usage_weight` 0). `index` holds the whole queue."""
    rate_per_s = policy.age_boost_per_hour / 3600.0
    boost_max = policy.age_boost_max
    if not head or rate_per_s <= 0 or boost_max <= 0:
        return math.inf

    def steps_at_now(submit_s: float) -> float:
        return age_boost((now_s - submit_s) * rate_per_s, boost_max)

    until = math.inf
    for item in head:  # a job of the head that steps up may pass another job of it
        submit_s = item.job.submit_time_s
        steps = steps_at_now(submit_s)
        if steps < boost_max:
            until = min(until, submit_s + (steps + 1) / rate_per_s)
    last = head[-1].job
    level = last.priority + steps_at_now(last.submit_time_s)
    last_share = share_of(last.tenant)
    for (priority, tenant), entries in index.by_priority.items():
        share = share_of(tenant)
        # A job behind the last one of the head passes it by reaching a higher level, or the same level
        # with a place in it before it (within a level: the lower share first, then the older job).
        for target, same_level in ((level + 1, False), (level, True)):
            steps = target - priority
            if steps < 1 or steps > boost_max or (same_level and share > last_share):
                continue
            first = _first_below(entries, steps, steps_at_now)
            if first is None:
                continue
            submit_s = first[0]
            if same_level and share == last_share and submit_s > last.submit_time_s:
                continue  # it and every job after it in its list come after the last one of the head
            until = min(until, submit_s + steps / rate_per_s)
    return until


def _first_below(entries: list[tuple[float, str, PendingJob]], steps: float,
                 steps_at_now: Callable[[float], float]) -> tuple[float, str, PendingJob] | None:
    """The oldest entry (entries are by submit time) with fewer than `steps` boost steps now: the first of
    its list to reach `steps`. Found by bisection with the boost itself as the key (no rounding to disagree)."""
    position = bisect.bisect_left(entries, True, key=lambda e: steps_at_now(e[0]) < steps)
    return entries[position] if position < len(entries) else None
