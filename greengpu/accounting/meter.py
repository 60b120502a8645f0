"""Energy, cost and CO2 metering: integrate power over time against a tariff and a carbon series.

Facility energy = (GPU + host energy) x PUE. Cost and CO2 use the price and intensity in force
in each interval: an interval that crosses a point of the hourly series is split there, so an
hourly tariff is charged exactly, not at the rate of whichever hour the interval began in.
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass

from greengpu.model import Site, TimeSeries

J_PER_KWH = 3_600_000.0


def _breaks(series: TimeSeries | None) -> tuple[float, ...]:
    return series.times_s if series is not None else ()


@dataclass
class EnergyMeter:
    """Running totals of energy (J), cost and CO2 (g) for one simulation or one ledger period."""

    site: Site
    gpu_energy_j: float = 0.0
    host_energy_j: float = 0.0
    cost: float = 0.0
    co2_g: float = 0.0

    def __post_init__(self) -> None:
        merged = sorted(set(_breaks(self.site.tariff)) | set(_breaks(self.site.carbon)))
        self._breakpoints = merged

    def next_break_after(self, time_s: float) -> float:
        """The first time after `time_s` at which the price or the carbon intensity may change (inf: none)."""
        index = bisect.bisect_right(self._breakpoints, time_s)
        return self._breakpoints[index] if index < len(self._breakpoints) else math.inf

    def price_per_kwh(self, time_s: float) -> float:
        """Electricity price in force at `time_s`."""
        if self.site.tariff is not None:
            return self.site.tariff.value_at(time_s)
        return self.site.price_per_kwh or 0.0

    def carbon_g_per_kwh(self, time_s: float) -> float:
        """Grid carbon intensity in force at `time_s`."""
        if self.site.carbon is not None:
            return self.site.carbon.value_at(time_s)
        return self.site.carbon_g_per_kwh or 0.0

    def add(self, start_s: float, end_s: float, gpu_power_w: float, host_power_w: float) -> None:
        """Account a constant draw of GPUs and hosts from `start_s` to `end_s`."""
        if end_s <= start_s:
            return
        self.gpu_energy_j += gpu_power_w * (end_s - start_s)
        self.host_energy_j += host_power_w * (end_s - start_s)
        facility_w = (gpu_power_w + host_power_w) * self.site.pue
        breaks = self._breakpoints
        t = start_s
        index = bisect.bisect_right(breaks, t)
        while t < end_s:
            segment_end = min(end_s, breaks[index]) if index < len(breaks) else end_s
            kwh = facility_w * (segment_end - t) / J_PER_KWH
            self.cost += kwh * self.price_per_kwh(t)
            self.co2_g += kwh * self.carbon_g_per_kwh(t)
            t = segment_end
            index += 1

    @property
    def facility_energy_kwh(self) -> float:
        """(GPU + host energy) x PUE, in kWh."""
        return (self.gpu_energy_j + self.host_energy_j) * self.site.pue / J_PER_KWH

    @property
    def gpu_energy_kwh(self) -> float:
        """GPU energy alone, before PUE, in kWh."""
        return self.gpu_energy_j / J_PER_KWH
