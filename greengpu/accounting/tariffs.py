"""Electricity price per kWh for each hour of a bill: flat, hourly series, or time-of-use.

Pure arithmetic on data already read (greengpu/report/settings.py reads the files). A ledger keeps
energy per UTC hour, so a price source answers for the hour that starts at `hour_start_s`. A
time-of-use tariff is defined in the site's local time (periods by month, hour of day, weekday or
weekend, holidays priced as weekends): each UTC hour is mapped to the local hour it starts in, so a
daylight-saving change moves the periods by an hour in UTC, as the utility's meter does. (A zone
whose offset is not a whole number of hours would need a finer ledger; the hour's start decides.)
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol
from zoneinfo import ZoneInfo

from greengpu.json_types import JsonObject, JsonValue
from greengpu.model import TimeSeries


class PriceSource(Protocol):
    """Price per kWh in force during the UTC hour starting at `hour_start_s`."""

    @property
    def source(self) -> str: ...

    def price_per_kwh(self, hour_start_s: float) -> float: ...


@dataclass(frozen=True)
class FlatRate:
    """One price for every hour."""

    rate_per_kwh: float
    source: str

    def price_per_kwh(self, hour_start_s: float) -> float:
        return self.rate_per_kwh


@dataclass(frozen=True)
class HourlyRate:
    """A price series (e.g. a wholesale market's hourly prices): the value in force at the hour's start."""

    series: TimeSeries
    source: str

    def price_per_kwh(self, hour_start_s: float) -> float:
        return self.series.value_at(hour_start_s)


@dataclass(frozen=True)
class TimeOfUse:
    """Periods by local month, hour and day type (a 12 x 24 schedule of period indices for weekdays and one
    for weekends), each period with its price per kWh; holidays take the weekend schedule."""

    timezone: str
    weekday_schedule: tuple[tuple[int, ...], ...]
    weekend_schedule: tuple[tuple[int, ...], ...]
    period_rates: tuple[float, ...]
    source: str
    holidays: frozenset[dt.date] = field(default_factory=frozenset)
    fixed_charge_per_month: float = 0.0

    def period_at(self, hour_start_s: float) -> int:
        """The period index in force in the local hour that contains `hour_start_s`."""
        local = dt.datetime.fromtimestamp(hour_start_s, ZoneInfo(self.timezone))
        weekend = local.weekday() >= 5 or local.date() in self.holidays
        schedule = self.weekend_schedule if weekend else self.weekday_schedule
        return schedule[local.month - 1][local.hour]

    def price_per_kwh(self, hour_start_s: float) -> float:
        return self.period_rates[self.period_at(hour_start_s)]


class TariffDocumentError(ValueError):
    """An OpenEI document this reader cannot use; `key` is the path of the offending field."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(message)
        self.key = key


def _schedule(item: JsonObject, key: str, periods: int) -> tuple[tuple[int, ...], ...]:
    rows = item.get(key)
    if not isinstance(rows, list) or len(rows) != 12:
        raise TariffDocumentError(key, "expected 12 months of 24 period indices")
    out = []
    for month, row in enumerate(rows):
        if not isinstance(row, list) or len(row) != 24:
            raise TariffDocumentError(f"{key}[{month}]", "expected 24 period indices, one per hour")
        indices: list[int] = []
        for hour, period in enumerate(row):
            if isinstance(period, bool) or not isinstance(period, int) or not 0 <= period < periods:
                raise TariffDocumentError(f"{key}[{month}][{hour}]",
                                          f"period {str(period)[:20]!r} is not one of the {periods} rate periods")
            indices.append(period)
        out.append(tuple(indices))
    return tuple(out)


def _number(value: JsonValue, key: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value or abs(value) > 1e6:
        raise TariffDocumentError(key, f"expected a price per kWh, got {str(value)[:30]!r}")
    return float(value)


def openei_item(document: JsonValue) -> JsonObject:
    """The rate of an OpenEI Utility Rate Database answer: its `items[0]`, or a bare rate object."""
    if isinstance(document, dict) and "items" in document:
        items = document["items"]
        if not isinstance(items, list) or not items:
            raise TariffDocumentError("items", "no rate in the document")
        if len(items) > 1:
            raise TariffDocumentError("items", f"{len(items)} rates in the document; keep the one that applies")
        document = items[0]
    if not isinstance(document, dict):
        raise TariffDocumentError("items[0]", "expected a rate object")
    return document


def parse_openei(document: JsonValue, *, timezone: str, source: str,
                 holidays: Sequence[dt.date] = ()) -> TimeOfUse:
    """A TimeOfUse from an OpenEI URDB rate (energyratestructure, energyweekdayschedule,
    energyweekendschedule, fixedchargefirstmeter): each period's price is its `rate` plus `adj`. Tiered
    periods (prices that change with the month's consumption) and units other than kWh are refused."""
    item = openei_item(document)
    structure = item.get("energyratestructure")
    if not isinstance(structure, list) or not structure:
        raise TariffDocumentError("energyratestructure", "missing: this rate has no energy charges")
    rates = []
    for index, tiers in enumerate(structure):
        key = f"energyratestructure[{index}]"
        if not isinstance(tiers, list) or not tiers or not isinstance(tiers[0], dict):
            raise TariffDocumentError(key, "expected a list of tiers")
        if len(tiers) > 1:
            raise TariffDocumentError(key, f"{len(tiers)} consumption tiers; tiered rates are not supported")
        tier = tiers[0]
        unit = tier.get("unit", "kWh")
        if unit != "kWh":
            raise TariffDocumentError(f"{key}[0].unit", f"unit {str(unit)[:20]!r}; only kWh rates are supported")
        rate = _number(tier.get("rate"), f"{key}[0].rate")
        adjustment = _number(tier.get("adj", 0.0), f"{key}[0].adj")
        rates.append(rate + adjustment)
    weekday = _schedule(item, "energyweekdayschedule", len(rates))
    weekend = _schedule(item, "energyweekendschedule", len(rates))
    fixed = 0.0
    if item.get("fixedchargefirstmeter") is not None:
        units = item.get("fixedchargeunits", "$/month")
        if units != "$/month":
            raise TariffDocumentError("fixedchargeunits", f"{str(units)[:20]!r}; only $/month is supported")
        fixed = _number(item["fixedchargefirstmeter"], "fixedchargefirstmeter")
    name = " ".join(str(item.get(k, "")) for k in ("utility", "name")).strip()
    label = f"{source}: {name}" if name else source
    try:
        ZoneInfo(timezone)
    except (ValueError, KeyError, OSError):
        raise TariffDocumentError("timezone", f"unknown time zone {timezone[:40]!r}") from None
    return TimeOfUse(timezone=timezone, weekday_schedule=weekday, weekend_schedule=weekend,
                     period_rates=tuple(rates), source=label, holidays=frozenset(holidays),
                     fixed_charge_per_month=fixed)
