"""The tick's short-horizon demand forecast: how many GPUs (running + pending) may be asked for over the
next hours, with a calibrated upper bound. Pure and online, the same in every body: a body feeds it the
demand it observes (`observe`) and reads the upper bound ahead (`peak_ahead`).

Demand has a daily shape, so the forecast is per hour of day on the site's wall clock (`timezone`: people's
working hours follow it across daylight saving), like the sleep planner's rise forecast
(greengpu.forecast.reserve), but of the level rather than the rise: for each past hour, the highest demand
seen in it. The upper bound for an hour of day is the split-conformal upper quantile of those peaks over the
last `window_days` days. An hour with fewer than `min_samples` days of history is not known (None): the
forecast says nothing of it, and the other rules (the slack rule of greengpu.sched.slack, the headroom rule
of greengpu.sleep.headroom) hold alone, as with the sleep planner's forecast.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field

from greengpu.forecast.reserve import HOUR_S, conformal_upper
from greengpu.localtime import UTC_NAME, local_hour_of_day

DAY_HOURS = 24


@dataclass
class DemandPeakForecaster:
    level: float = 0.95
    window_days: int = 14
    min_samples: int = 3
    timezone: str = UTC_NAME
    """The site's IANA time zone, whose wall clock the hours of day are read on. In UTC a site's busy morning
    moves by an hour twice a year, and for the `window_days` after each change the forecast would look for it
    an hour away from where it comes."""
    _local_hours: dict[int, int] = field(default_factory=dict)
    """Per hour since the epoch, its hour of day on the site's wall clock (outside UTC: zoneinfo, once each)."""
    _peaks: dict[int, deque[float]] = field(default_factory=dict)
    _upper: dict[int, float] = field(default_factory=dict)
    """The upper bound per hour of day, kept up to date as each hour closes."""
    _hour: int | None = None
    _max_gpus: float = 0.0
    _last_gpus: float = 0.0

    def hour_of_day(self, hour_index: int) -> int:
        """The hour of day on the site's wall clock that the hour `hour_index` (since the epoch) begins in."""
        return local_hour_of_day(hour_index, self.timezone, self._local_hours)

    def _record(self, hour_index: int, peak_gpus: float) -> None:
        slot = self.hour_of_day(hour_index)
        peaks = self._peaks.setdefault(slot, deque(maxlen=self.window_days))
        peaks.append(peak_gpus)
        if len(peaks) >= self.min_samples:
            self._upper[slot] = conformal_upper(list(peaks), self.level)

    def observe(self, now_s: float, demand_gpus: float) -> None:
        """Demand (running + pending GPUs) at `now_s`; call whenever it changes, in time order."""
        hour = math.floor(now_s / HOUR_S)
        if self._hour is None:
            self._hour, self._max_gpus = hour, demand_gpus
        elif hour != self._hour:
            self._record(self._hour, self._max_gpus)
            # Hours without a change stayed at the last demand; a gap longer than the window is cut short.
            for quiet in range(self._hour + 1, min(hour, self._hour + DAY_HOURS * self.window_days + 1)):
                self._record(quiet, self._last_gpus)
            self._hour, self._max_gpus = hour, self._last_gpus
        self._max_gpus = max(self._max_gpus, demand_gpus)
        self._last_gpus = demand_gpus

    def upper_gpus(self, hour_index: int) -> float | None:
        """The upper bound of demand in the hour `hour_index` (hours since the epoch); None: not known yet."""
        return self._upper.get(self.hour_of_day(hour_index))

    def upper_at(self, hour_index: int, now_s: float, demand_gpus: float) -> float | None:
        """The upper bound of demand in the hour `hour_index`, asked at `now_s` with `demand_gpus` asked now:
        the current hour is never below the demand now. None: that hour of day is not known yet."""
        upper = self.upper_gpus(hour_index)
        if upper is not None and hour_index == math.floor(now_s / HOUR_S):
            return max(upper, demand_gpus)
        return upper
