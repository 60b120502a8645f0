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

from greengpu.localtime import UTC_NAME, local_hour_of_day
from greengpu.model import Cluster

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
    timezone: str = UTC_NAME
    """The site's IANA time zone: hours of day are its wall clock's (people's mornings follow it across daylight
    saving; in UTC they would move by an hour twice a year, and the history learnt for an hour with them)."""
    _local_hours: dict[int, int] = field(default_factory=dict)
    """Per hour since the epoch, its hour of day on the site's wall clock (outside UTC: zoneinfo, once each)."""
    _rises: dict[int, deque[float]] = field(default_factory=dict)
    _hour: int | None = None
    _start_gpus: float = 0.0
    """Demand when the current hour began."""
    _max_gpus: float = 0.0
    """Highest demand so far in the current hour."""
    _last_gpus: float = 0.0
    horizon_s: float = HOUR_S
    """The rise counted: within the hour (the default), or, shorter, within any `horizon_s` of it (a boot:
    what may arrive before a sleeping node could be up; `headroom_gpus` is then that rise alone)."""
    _recent: deque[tuple[float, float]] = field(default_factory=deque)
    """(time, demand) over the last `horizon_s`, and the one in force when it began."""
    band_gpus: float = 0.0
    """0: rises learnt per hour of day; above: per band of this many GPUs of demand (bursts come when busy)."""
    _max_window_rise: float = 0.0
    """Highest rise over `horizon_s` so far in the current hour."""

    def hour_of_day(self, hour_index: int) -> int:
        """The hour of day on the site's wall clock that the hour `hour_index` (since the epoch) begins in."""
        return local_hour_of_day(hour_index, self.timezone, self._local_hours)

    def _slot(self, hour_index: int, demand_gpus: float) -> int:
        """Rises are learnt per hour of day or, with `band_gpus`, per band of demand at the hour's start."""
        if self.band_gpus > 0:
            return int(demand_gpus // self.band_gpus)
        return self.hour_of_day(hour_index)

    def _record(self, hour_index: int, rise_gpus: float, demand_gpus: float = 0.0) -> None:
        size = self.window_days * 24 if self.band_gpus > 0 else self.window_days
        self._rises.setdefault(self._slot(hour_index, demand_gpus), deque(maxlen=size)).append(rise_gpus)

    def observe(self, now_s: float, demand_gpus: float) -> None:
        """Demand (running + pending GPUs) at `now_s`; call whenever it changes, in time order."""
        hour = math.floor(now_s / HOUR_S)
        if self._hour is None:
            self._hour, self._start_gpus, self._max_gpus = hour, demand_gpus, demand_gpus
        elif hour != self._hour:
            self._record(self._hour, self._max_window_rise if self.horizon_s < HOUR_S
                         else self._max_gpus - self._start_gpus, self._start_gpus)
            self._max_window_rise = 0.0
            # Hours without a change had no rise; a gap longer than the window leaves only zeros.
            for quiet in range(self._hour + 1, min(hour, self._hour + 24 * self.window_days + 1)):
                self._record(quiet, 0.0, self._last_gpus)
            self._hour, self._start_gpus, self._max_gpus = hour, self._last_gpus, self._last_gpus
        self._max_gpus = max(self._max_gpus, demand_gpus)
        self._last_gpus = demand_gpus
        if self.horizon_s < HOUR_S:
            self._window_rise(now_s, demand_gpus)

    def _window_rise(self, now_s: float, demand_gpus: float) -> None:
        """Demand rises only where it is observed: the rise over the last `horizon_s` ending now."""
        recent = self._recent
        recent.append((now_s, demand_gpus))
        while len(recent) >= 2 and recent[1][0] <= now_s - self.horizon_s:
            recent.popleft()
        rise = demand_gpus - min(gpus for _, gpus in recent)
        self._max_window_rise = max(self._max_window_rise, rise)

    def upper_rise_gpus(self, now_s: float) -> float:
        """How many GPUs above the hour's starting demand demand may reach within it (upper quantile)."""
        rises = self._rises.get(self._slot(math.floor(now_s / HOUR_S), self._last_gpus))
        if rises is None or len(rises) < self.min_samples:
            return 0.0
        return conformal_upper(list(rises), self.level)

    def knows(self, now_s: float) -> bool:
        """Whether this hour of day has `min_samples` days of history (the upper rise is a forecast)."""
        rises = self._rises.get(self._slot(math.floor(now_s / HOUR_S), self._last_gpus))
        return rises is not None and len(rises) >= self.min_samples

    def reserve_gpus(self, now_s: float, demand_gpus: float, known_only: bool = False) -> int | None:
        """`headroom_gpus`; with `known_only`, None where this hour of day has no history yet (the reserve
        then falls back to its other rules: `sleep.warm_reserve_from_forecast`)."""
        if known_only and not self.knows(now_s):
            return None
        return self.headroom_gpus(now_s, demand_gpus)

    def headroom_gpus(self, now_s: float, demand_gpus: float) -> int:
        """Free GPUs to keep awake now: this hour's upper rise less what has already arrived."""
        if self.horizon_s < HOUR_S:
            return max(0, math.ceil(self.upper_rise_gpus(now_s) - 1e-9))
        start = self._start_gpus if self._hour == math.floor(now_s / HOUR_S) else demand_gpus
        return max(0, math.ceil(start + self.upper_rise_gpus(now_s) - demand_gpus - 1e-9))


RESERVE_LEVEL = 0.99
"""The upper quantile a reserve sized by the forecast alone keeps (`warm_reserve_from_forecast`): the
rises are counted per hour, the waits per job, and a burst's hour holds many jobs (at 0.95 the 1,000-GPU
replay's p95 wait went from 0 to 228 s; at 0.99, 39 s: docs/SLEEP.md)."""
RESERVE_BAND_SHARE = 0.1
"""`warm_reserve_from_forecast` learns rises per band of demand one tenth of the cluster's GPUs wide."""


def reserve_forecaster(from_forecast: bool, boot_s: float, total_gpus: float,
                       timezone: str = UTC_NAME) -> DemandRiseForecaster:
    """The forecaster a body keeps for its warm reserve. `use_forecast`: the rise within the hour, per hour of
    day. `warm_reserve_from_forecast`: the rise within a boot (`boot_s`, the slowest node's: what may arrive
    before a sleeping node could be up), learnt per band of demand (bursts come when the cluster is busy, at
    any hour: per hour of day, the 1,000-GPU replay's p95 wait was 256 s), at `RESERVE_LEVEL`. `timezone`: the
    site's, whose wall clock the hours of day are read on."""
    if not from_forecast:
        return DemandRiseForecaster(timezone=timezone)
    return DemandRiseForecaster(level=RESERVE_LEVEL, horizon_s=min(boot_s, HOUR_S),
                                band_gpus=RESERVE_BAND_SHARE * total_gpus)


def cluster_reserve_forecaster(from_forecast: bool, cluster: Cluster) -> DemandRiseForecaster:
    """`reserve_forecaster` for the on-premises nodes of `cluster` (a body that has the inventory: the daemon)."""
    return reserve_forecaster(from_forecast, max((cluster.node_type(n).boot_s for n in cluster.nodes), default=HOUR_S),
                              sum(cluster.node_type(n).gpus for n in cluster.nodes), cluster.site.timezone)

