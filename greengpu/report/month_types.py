"""A monthly report (greengpu.report.monthly_main.build_report) as typed dicts: the JSON is the dicts
themselves, in the order they are built (docs/REPORT.md). The bill's rows, idle and totals carry figures
whose keys vary with the settings and the aggregate, so they are `Figures`, read with `number()`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeAlias, TypedDict

from greengpu.accounting.ledger_url import Ledger
from greengpu.report.settings import ReportSettings

FigureValue: TypeAlias = "float | int | str | None | dict[str, int] | list[str]"
Figures: TypeAlias = "dict[str, FigureValue]"
"""A row of the bill (its name, figures, basis, jobs...), idle or the totals."""
DayFigures: TypeAlias = "dict[str, float | str]"
"""The site on one day: `day` (ISO date) and its energy, cost, CO2 and idle share."""
MonthFigures: TypeAlias = "dict[str, object]"
"""The site in one month of the trend (greengpu.accounting.bill.month_site_totals)."""


def number(figures: Figures | DayFigures | MonthFigures, key: str) -> float:
    """A figure that is a number (absent or null: 0)."""
    value = figures.get(key)
    if value is None:
        return 0.0
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"report figure {key!r} is not a number: {value!r}")
    return value


def maybe_number(figures: Figures, key: str) -> float | None:
    """A figure that is a number or null."""
    return None if figures.get(key) is None else number(figures, key)


class QueueFigures(TypedDict):
    jobs_started: int
    jobs_ended: int
    wait_p50_s: float | None
    wait_p95_s: float | None
    failure_rate: float | None
    checkpoint_mean_s: float | None


class TenantQueue(QueueFigures):
    tenant: str


class Queue(TypedDict):
    """Per tenant and in total, over the jobs that first started in the month."""
    tenants: list[TenantQueue]
    total: QueueFigures


class CloudCarbon(TypedDict):
    source: str | None
    g_per_kwh_by_region: dict[str, float]
    at_site_intensity: list[str]


class Tariff(TypedDict, total=False):
    kind: str
    source: str
    timezone: str
    period_rates_per_kwh: list[float]
    holidays: list[str]
    fixed_charge_per_month: float


class CarbonSource(TypedDict):
    method: str
    source: str


class MarketPart(TypedDict):
    instrument: str
    energy_kwh: float
    g_per_kwh: float
    co2_kg: float


class MarketCarbon(CarbonSource):
    factor_g_per_kwh: float | None
    parts: list[MarketPart]


class PueShown(TypedDict):
    value: float | None
    source: str


class Embodied(TypedDict):
    method: str
    kg_per_gpu: float
    lifetime_years: float
    source: str


class _Pricing(TypedDict):
    tariff: Tariff
    carbon_location: CarbonSource
    carbon_market: MarketCarbon | None
    pue: PueShown
    embodied: Embodied | None


class PricingShown(_Pricing, total=False):
    """How the month was priced: tariff, location- and market-based carbon, PUE, embodied, the cloud's carbon."""
    carbon_cloud: CloudCarbon


class Savings(TypedDict):
    """The baseline run less this run, per row and in total (`--baseline`)."""
    run_id: object
    policy: object
    method: str
    headline: str
    totals: dict[str, float]
    baseline_totals: dict[str, float]
    rows: list[dict[str, float | str]]


class _MonthReport(TypedDict):
    period: str
    run_id: int | None
    policy: str
    kind: str
    source: str
    basis: str
    measured_share: float | None
    currency: str
    aggregate: str
    share_idle: str
    country_iso_code: str | None
    region: str | None
    totals: Figures
    idle: Figures
    tenants: list[Figures]
    rows: list[Figures]
    jobs: dict[str, int]
    node_sleep_hours: float
    pricing: PricingShown
    days: list[DayFigures]
    baseline: Savings | None
    queue: Queue | None


class MonthReport(_MonthReport, total=False):
    """What `greengpu report --json` prints; a fleet's report says its runs and clusters."""
    trend: list[MonthFigures]
    runs: list[int]
    clusters: list[str]


@dataclass(frozen=True)
class ReportRequest:
    """What one monthly report is asked for: the ledger, the month, which run (or the fleet) and how to share."""

    ledger: Ledger
    month: str
    run_id: int | None = None
    aggregate: str = "tenant"
    share_idle: str = "none"
    baseline_run: int | None = None
    settings: ReportSettings = ReportSettings()
