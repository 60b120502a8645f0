"""The forecast behind the sleep planner's warm reserve (`sleep.use_forecast`), pure and online.

What a warm reserve must cover is how far demand (running + pending GPUs) can rise above where it is
now before a sleeping node could boot. Demand has a daily shape (the morning ramp), so the forecast
is per hour of day: for each past hour, the rise is the hour's highest demand minus the demand at its
start. The upper quantile of the rises seen at this hour of day over the last `window_days` days,
taken with the split-conformal correction (as the plan's bands), is how many GPUs may be asked for
within the hour; the reserve keeps that many free and awake, less what has already arrived this
hour. Before `min_samples` days of history the forecast says nothing (0), and the other reserve
rules hold alone.

Its hour is the forecaster's resolution: for boot times under an hour the reserve covers more than
the boot time, which errs on the side of waits, not energy.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field

HOUR_S = 3600.0


def conformal_upper(samples: list[float], level: float) -> float:
    """The split-conformal upper quantile, as greengpu.forecast.backtest's, in plain Python: the daemon's
    slim install has no numpy, and this is the only forecast code it runs."""
    values = sorted(float(v) for v in samples)
    if not values:
        return 0.0
    return values[min(len(values), math.ceil((len(values) + 1) * level)) - 1]


@dataclass
class DemandRiseForecaster:
    level: float = 0.95
    window_days: int = 14
    min_samples: int = 3
    utc_offset_s: float = 0.0
    _rises: dict[int, deque[float]] = field(default_factory=dict)
    _hour: int | None = None
    _start_gpus: float = 0.0
    """Demand when the current hour began."""
    _max_gpus: float = 0.0
    """Highest demand so far in the current hour."""
    _last_gpus: float = 0.0

    def hour_of_day(self, hour_index: int) -> int:
        return int((hour_index + self.utc_offset_s / HOUR_S) % 24)

    def _record(self, hour_index: int, rise_gpus: float) -> None:
        self._rises.setdefault(self.hour_of_day(hour_index), deque(maxlen=self.window_days)).append(rise_gpus)

    def observe(self, now_s: float, demand_gpus: float) -> None:
        """Demand (running + pending GPUs) at `now_s`; call whenever it changes, in time order."""
        hour = math.floor(now_s / HOUR_S)
        if self._hour is None:
            self._hour, self._start_gpus, self._max_gpus = hour, demand_gpus, demand_gpus
        elif hour != self._hour:
            self._record(self._hour, self._max_gpus - self._start_gpus)
            # Hours without a change had no rise; a gap longer than the window leaves only zeros.
            for quiet in range(self._hour + 1, min(hour, self._hour + 24 * self.window_days + 1)):
                self._record(quiet, 0.0)
            self._hour, self._start_gpus, self._max_gpus = hour, self._last_gpus, self._last_gpus
        self._max_gpus = max(self._max_gpus, demand_gpus)
        self._last_gpus = demand_gpus

    def upper_rise_gpus(self, now_s: float) -> float:
        """How many GPUs above the hour's starting demand demand may reach within it (upper quantile)."""
        rises = self._rises.get(self.hour_of_day(math.floor(now_s / HOUR_S)))
        if rises is None or len(rises) < self.min_samples:
            return 0.0
        return conformal_upper(list(rises), self.level)

    def headroom_gpus(self, now_s: float, demand_gpus: float) -> int:
        """Free GPUs to keep awake now: this hour's upper rise less what has already arrived."""
        start = self._start_gpus if self._hour == math.floor(now_s / HOUR_S) else demand_gpus
        return max(0, math.ceil(start + self.upper_rise_gpus(now_s) - demand_gpus - 1e-9))
