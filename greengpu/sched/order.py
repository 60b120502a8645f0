"""Queue order: priority (with an age boost), then weighted fair share between tenants, then age.

Fair share is evaluated as the cycle goes, not once at its start: after each admission the
tenant's share grows, so GPUs freed in one cycle are spread over tenants by weight instead of
all going to whichever tenant was lowest when the cycle began.
"""

from __future__ import annotations

import bisect
import heapq
import math
import operator
from collections.abc import Callable, Iterator, Sequence

from greengpu.model import GPU_UNITS, PendingJob
from greengpu.policy import SchedulerPolicy


def age_boost(hours_waited: float, boost_max: float) -> float:
    """Whole age-boost steps earned (`hours_waited` times the steps per hour), capped at `boost_max`; none before
    submission. `queue_order` inlines this expression for speed: the two must stay the same."""
    return 0 if hours_waited <= 0 else steps if (steps := math.floor(hours_waited)) < boost_max else boost_max


def effective_priority(pending: PendingJob, now_s: float, policy: SchedulerPolicy) -> float:
    """Priority plus whole age-boost steps earned by waiting, capped at `age_boost_max`."""
    job = pending.job
    return job.priority + age_boost((now_s - job.submit_time_s) * (policy.age_boost_per_hour / 3600.0),
                                    policy.age_boost_max)


def fair_share(allocated_units: int, usage_gpu_s: float, weight: float, usage_weight: float) -> float:
    """(allocated GPUs + usage_weight x decayed GPU-hours) / weight: lower goes first."""
    return (allocated_units / GPU_UNITS + usage_weight * usage_gpu_s / 3600.0) / weight


def decay_usage(previous_gpu_s: float, allocated_gpus: float, elapsed_s: float, half_life_s: float) -> float:
    """Decayed usage after `elapsed_s` more seconds at `allocated_gpus` (for bodies that keep history)."""
    factor: float = 0.5 ** (elapsed_s / half_life_s)
    return previous_gpu_s * factor + allocated_gpus * elapsed_s


def queue_order(
    pending: Sequence[PendingJob],
    now_s: float,
    policy: SchedulerPolicy,
    share_of: Callable[[str], float],
) -> Iterator[PendingJob]:
    """Yield pending jobs in scheduling order; `share_of(tenant)` is read live between yields.

    The jobs are sorted once (in C) by effective priority, tenant and age, so each priority level and each
    tenant's jobs within it are a run of that list, found by bisection: no Python step per job beyond
    its key and the jobs the caller takes (a saturated cycle often takes few)."""
    # age_boost() inlined, without a call per job: this runs for every pending job, every cycle.
    boost_per_s = policy.age_boost_per_hour / 3600.0
    boost_max = policy.age_boost_max
    floor = math.floor
    keyed = [
        (-(j.priority + (0 if (w := (now_s - j.submit_time_s) * boost_per_s) <= 0
                         else steps if (steps := floor(w)) < boost_max else boost_max)),
         j.tenant, j.submit_time_s, j.job_id, p)
        for p in pending
        for j in (p.job,)
    ]
    keyed.sort()  # job_id is unique, so the PendingJob itself is never compared
    count = len(keyed)
    start = 0
    while start < count:
        level = keyed[start][0]
        level_end = bisect.bisect_right(keyed, level, start, count, key=_LEVEL)
        # Each tenant's jobs at this level, oldest first: [next position, end].
        runs: dict[str, list[int]] = {}
        position = start
        while position < level_end:
            tenant = keyed[position][1]
            run_end = bisect.bisect_right(keyed, (level, tenant), position, level_end, key=_LEVEL_TENANT)
            runs[tenant] = [position, run_end]
            position = run_end
        heap = [(share_of(t), keyed[run[0]][2], t) for t, run in runs.items()]
        heapq.heapify(heap)
        while heap:
            _, _, tenant = heapq.heappop(heap)
            run = runs[tenant]
            yield keyed[run[0]][4]
            run[0] += 1
            if run[0] < run[1]:
                heapq.heappush(heap, (share_of(tenant), keyed[run[0]][2], tenant))
        start = level_end


_LEVEL = operator.itemgetter(0)
_LEVEL_TENANT = operator.itemgetter(0, 1)
