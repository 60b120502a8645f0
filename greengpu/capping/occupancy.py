"""Occupancy-aware capping: a cap is priced in the GPU-time it adds, and spent only from forecast slack.

A cap saves energy per unit of work but slows the job: a job of `gpus` GPUs with `remaining_s` of run left
at its uncapped pace, capped at a slowdown `s` (0.05: 5% slower), ends `remaining_s x s` later, and holds its
GPUs through that tail: `gpus x remaining_s x s` GPU-seconds that no other job can use. Through the rest of
its run it holds the same GPUs capped or not. While the cluster has room when the tail comes, the tail costs
nothing; if demand has reached capacity by then, the tail is queue time, and lifting the cap then does not
give back what it already added. So a cap is worth keeping only while the free capacity the demand forecast
expects over the hours of its tail (capacity less the forecast upper demand, less the warm reserve) covers
the job's GPUs through the tail.

The rule (`jobs_to_cap`) spends the forecast slack as a budget of GPU-seconds per hour, granted to the
running jobs shortest-remaining first. A long job capped just before a busy period is the expensive case:
its tail lands in the busy hours, where the forecast leaves no slack, and the rule refuses it, while a short
job whose tail ends before the rise may still be capped. The rule is re-asked every tick, so a cap lifts as
soon as the forecast says the slack of its tail is gone (a forecast rise), before the queue forms, and
returns when a quieter forecast gives the slack back. An hour the forecast does not know yet (None) is not
limited: then the present's rules (greengpu.sched.slack, greengpu.sleep.headroom) hold alone.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass

HOUR_S = 3600.0

FreeGpus = Callable[[int], float | None]
"""Hour index (hours since the epoch) -> GPUs the forecast leaves free then, beyond the warm reserve
(None: not known)."""


@dataclass(frozen=True)
class CapCandidate:
    """A running job the policy would cap, and what the cap costs it."""

    job_id: str
    gpus: float
    remaining_s: float
    """Run time left at its uncapped pace."""
    slowdown: float
    """The cap's run-time increase as a fraction (0.05: 5% slower; 0: a cap that costs no time)."""

    @property
    def added_gpu_s(self) -> float:
        """The occupancy the cap adds: its GPUs through the tail, in GPU-seconds."""
        return self.gpus * self.remaining_s * self.slowdown

    def tail_s(self, now_s: float) -> tuple[float, float]:
        """When the cap's extra occupancy comes: from the uncapped end to the capped end."""
        return now_s + self.remaining_s, now_s + self.remaining_s * (1.0 + self.slowdown)


def free_gpus(total_gpus: float, upper_demand_gpus: float | None, reserve_of: Callable[[float], float]) -> float | None:
    """The GPUs free beyond the warm reserve (`reserve_of` the demand in use) at a forecast upper demand."""
    if upper_demand_gpus is None:
        return None
    busy = min(upper_demand_gpus, total_gpus)
    return total_gpus - upper_demand_gpus - reserve_of(busy)


class SlackBudget:
    """The forecast slack as GPU-seconds per hour, spent by the caps granted so far."""

    def __init__(self, free_of: FreeGpus) -> None:
        self.free_of = functools.cache(free_of)
        self.left_gpu_s: dict[int, float | None] = {}

    def _left(self, hour: int) -> float | None:
        if hour not in self.left_gpu_s:
            free = self.free_of(hour)
            self.left_gpu_s[hour] = None if free is None else max(0.0, free) * HOUR_S
        return self.left_gpu_s[hour]

    def take(self, start_s: float, end_s: float, gpus: float) -> bool:
        """Spend `gpus` GPUs from `start_s` to `end_s` if every hour between has them free and their GPU-seconds
        left; False: not spent."""
        if end_s <= start_s or gpus <= 0.0:
            return True
        needs: list[tuple[int, float]] = []
        for hour in range(math.floor(start_s / HOUR_S), math.floor((end_s - 1e-9) / HOUR_S) + 1):
            overlap_s = min(end_s, (hour + 1) * HOUR_S) - max(start_s, hour * HOUR_S)
            left = self._left(hour)
            need = gpus * overlap_s
            if left is not None:
                if need > left + 1e-6 or gpus > (self.free_of(hour) or 0.0) + 1e-9:
                    return False
                needs.append((hour, need))
        for hour, need in needs:
            left = self.left_gpu_s[hour]
            assert left is not None
            self.left_gpu_s[hour] = left - need
        return True


def jobs_to_cap(candidates: Iterable[CapCandidate], now_s: float, free_of: FreeGpus) -> frozenset[str]:
    """The candidates whose caps the forecast slack covers (`free_of`: the GPUs free beyond the reserve per
    hour); the rest run uncapped. Shortest remaining run first, each cap is kept while every hour of its
    tail still has its GPUs free after the caps kept before it."""
    budget = SlackBudget(free_of)
    capped = [c.job_id for c in sorted(candidates, key=lambda c: (c.remaining_s, c.job_id))
              if c.slowdown <= 0.0 or budget.take(*c.tail_s(now_s), c.gpus)]
    return frozenset(capped)
