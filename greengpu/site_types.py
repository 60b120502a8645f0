"""Inventory vocabulary without dependencies: what NVML allows a GPU, cloud pools, the site's figures and its
hourly series (re-exported by greengpu.model, where every caller finds them)."""

from __future__ import annotations

import bisect
from dataclasses import dataclass


@dataclass(frozen=True)
class LimitConstraints:
    """What NVML allows for one GPU, in watts (nvmlDeviceGetPowerManagementLimitConstraints, default limit).

    Vocabulary shared by the capping decision and the NVML backend (neither imports the other)."""

    min_w: float
    max_w: float
    default_w: float

    def clamp(self, limit_w: float) -> float:
        """`limit_w` brought inside [min_w, max_w]."""
        return min(max(limit_w, self.min_w), self.max_w)


@dataclass(frozen=True)
class Pool:
    """A pool of cloud capacity (spot or on-demand)."""

    name: str
    type_name: str
    spot: bool
    price_per_hour: float
    interruptions_per_hour: float = 0.0
    max_nodes: int = 0


@dataclass(frozen=True)
class TimeSeries:
    """An hourly (or irregular) series: values hold from each time until the next."""

    times_s: tuple[float, ...]
    values: tuple[float, ...]
    source: str = ""

    def value_at(self, time_s: float) -> float:
        """The value in force at `time_s` (the last point at or before it; the first before the start)."""
        index = bisect.bisect_right(self.times_s, time_s) - 1
        return self.values[max(index, 0)]


@dataclass(frozen=True)
class Site:
    """Facility-wide figures: PUE, tariff and grid carbon intensity."""

    pue: float = 1.0
    currency: str = "USD"
    price_per_kwh: float | None = None
    tariff: TimeSeries | None = None
    carbon_g_per_kwh: float | None = None
    carbon: TimeSeries | None = None
    timezone: str = "UTC"
    """The site's IANA time zone (e.g. Europe/Berlin): sleep windows are read on its wall clock, DST included."""
