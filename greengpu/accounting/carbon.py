"""Emissions of a bill, both ways the GHG Protocol's Scope 2 guidance asks for, never mixed.

- Location-based: the grid's average intensity where and when the energy was used (flat, or an hourly
  series), hour by hour.
- Market-based: the site's contractual instruments for the month, in the order the guidance gives
  them: contracts with their own factor (a power purchase agreement, a supplier's product) cover
  their energy first, then energy attribute certificates (RECs, guarantees of origin) at zero, and
  the rest at the residual mix factor.

Also the embodied emissions of the GPUs by the Green Software Foundation's SCI amortisation:
M = TE x (TiR / EL) x (RR / ToR), here per GPU-hour: the embodied kg of a GPU (with its share of the
server) spread over the GPU-hours of its expected life.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from greengpu.model import TimeSeries

HOURS_PER_YEAR = 8760.0


class IntensitySource(Protocol):
    """Grid carbon intensity (g CO2e per kWh) in force during the UTC hour starting at `hour_start_s`."""

    @property
    def source(self) -> str: ...

    def g_per_kwh(self, hour_start_s: float) -> float: ...


@dataclass(frozen=True)
class FlatIntensity:
    value_g_per_kwh: float
    source: str

    def g_per_kwh(self, hour_start_s: float) -> float:
        return self.value_g_per_kwh


@dataclass(frozen=True)
class HourlyIntensity:
    series: TimeSeries
    source: str

    def g_per_kwh(self, hour_start_s: float) -> float:
        return self.series.value_at(hour_start_s)


@dataclass(frozen=True)
class Contract:
    """A contractual instrument with its own emission factor, covering a fixed energy per month or a share
    of the month's consumption."""

    name: str
    g_per_kwh: float
    kwh_per_month: float | None = None
    share: float | None = None


@dataclass(frozen=True)
class MarketInstruments:
    residual_g_per_kwh: float
    source: str
    contracts: tuple[Contract, ...] = ()
    certificates_kwh_per_month: float = 0.0


@dataclass(frozen=True)
class MarketPart:
    """One instrument's part of a month's market-based emissions."""

    instrument: str
    energy_kwh: float
    g_per_kwh: float

    @property
    def co2_kg(self) -> float:
        return self.energy_kwh * self.g_per_kwh / 1000.0


def market_parts(energy_kwh: float, instruments: MarketInstruments) -> list[MarketPart]:
    """How a month's facility energy is covered: contracts in order, then certificates, then residual mix.

    The parts add up to `energy_kwh`; an instrument never covers more than is left."""
    left = max(energy_kwh, 0.0)
    parts = []
    for contract in instruments.contracts:
        # A share is of the whole month's consumption; a fixed amount is what the contract delivers.
        offered = contract.kwh_per_month if contract.kwh_per_month is not None else \
            (contract.share or 0.0) * max(energy_kwh, 0.0)
        covered = min(left, offered)
        parts.append(MarketPart(contract.name, covered, contract.g_per_kwh))
        left -= covered
    certified = min(left, instruments.certificates_kwh_per_month)
    parts.append(MarketPart("energy attribute certificates", certified, 0.0))
    left -= certified
    parts.append(MarketPart("residual mix", left, instruments.residual_g_per_kwh))
    return parts


def market_co2_kg(energy_kwh: float, instruments: MarketInstruments) -> float:
    """A month's market-based emissions for `energy_kwh` of facility energy."""
    return sum(part.co2_kg for part in market_parts(energy_kwh, instruments))


@dataclass(frozen=True)
class Embodied:
    """Embodied emissions of one GPU (with its share of the server) over its expected life."""

    kg_per_gpu: float
    lifetime_years: float
    source: str

    @property
    def kg_per_gpu_hour(self) -> float:
        """SCI's TE x TiR / EL for one GPU-hour (RR / ToR = one GPU of one)."""
        return self.kg_per_gpu / (self.lifetime_years * HOURS_PER_YEAR)
