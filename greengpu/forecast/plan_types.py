"""The capacity plan's settings and result as typed objects (greengpu.forecast.plan); the projects and efficiency
gains beyond history are in greengpu.plan_inputs, below config and forecast both."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TypedDict

from greengpu.forecast.models import BASELINES, CANDIDATES, ModelSpec
from greengpu.json_types import JsonObject


@dataclass(frozen=True)
class PlanSettings:
    horizon_days: int = 90
    lead_time_days: int = 84
    target_utilisation: float = 0.65
    redundancy_gpus: int = 0
    max_wait_probability: float = 0.10
    origins: int | None = None
    """Backtest origins; None: every day with two weeks of history before it (the last MAX_ORIGINS)."""
    workers: int | None = None
    """Worker processes for the backtests' fits; None: one per CPU this process may use."""
    growth_window_days: int = 28
    allow_decline: bool = False
    models: tuple[ModelSpec, ...] = BASELINES + CANDIDATES
    daily_candidates: bool = True
    """Backtest the statsmodels candidates on daily peaks too (greengpu.forecast.daily)."""


class GatePower(TypedDict):
    level: float
    untied_origins: int
    wins_needed: int | None
    detectable_win_rate: float | None
    text: str


class _GateVerdict(TypedDict):
    max_ratio: float
    alpha: float
    test: str
    interval_level: float
    shipped_candidate: bool
    to_change: str
    can_pass: bool
    power: GatePower


class GateSummary(_GateVerdict, total=False):
    """The gate's verdict (greengpu.forecast.gate.gate_summary); the evidence keys when a candidate ran."""
    candidate: str
    baseline: str
    median_ratio: float | None
    ratio_interval: list[float | None]
    wins: int
    losses: int
    ties: int
    win_share: float | None
    p_value: float | None
    wins_needed: int | None


class DailySummary(TypedDict):
    """The long-horizon (daily peaks) forecast's summary."""
    model: str
    shipped_candidate: bool
    mase: float | None
    baseline: str | None
    baseline_mase: float | None
    origins: int
    gate: GateSummary | None
    models: dict[str, float | None]
    note: str
    can_ship: bool
    origins_needed: int
    history_days_needed: int


class Bands(TypedDict):
    scale: str
    interval_score: float | None
    interval_scores: dict[str, float | None]


class PerOrigin(TypedDict):
    times: list[str]
    mase: dict[str, list[float | None]]


class ForecastSummary(TypedDict):
    """The day-ahead forecast: the shipped model, its backtest, bands and gate, and the long horizon's."""
    model: str
    mase: float | None
    baseline: str
    baseline_mase: float | None
    origins: int
    wins: int
    shipped_candidate: bool
    reason: str
    coverage_80: float | None
    coverage_95: float | None
    bands: Bands
    models: dict[str, float | None]
    fit_s: dict[str, float | None]
    backtest_s: float
    gate: GateSummary | None
    per_origin: PerOrigin
    daily: DailySummary


class Capacity(TypedDict):
    installed_gpus: int | None
    required_gpus: int
    run_out_date: str | None
    order_by_date: str | None
    order_by_lead_time_date: str | None
    arrival_date: str | None
    late_days: int
    already_short: bool
    plan_start_date: str | None
    required_now_gpus: int
    target_utilisation: float
    redundancy_gpus: int
    lead_time_days: int
    horizon_days: int
    max_wait_probability: float


class MonthRow(TypedDict):
    month: str
    peak_gpus: float
    upper_peak_gpus: float
    required_gpus: int


class DayRow(TypedDict):
    day: str | None
    peak_gpus: float
    upper_peak_gpus: float
    required_gpus: int


class DayAheadRow(TypedDict):
    """One hour of the next 24: the point forecast and the calibrated 80% and 95% bands, in GPUs."""
    time: str
    gpus: float
    lower_80: float
    upper_80: float
    lower_95: float
    upper_95: float


class ScenarioRow(TypedDict):
    quantile: float
    target_utilisation: float
    required_gpus: int
    run_out_date: str | None


class ProjectRow(TypedDict):
    name: str
    gpus: float
    start: str | None
    end: str | None


class GainRow(TypedDict):
    name: str
    change: float
    start: str | None


class InputsSummary(TypedDict):
    projects: list[ProjectRow]
    efficiency: list[GainRow]
    buffer_factor: float
    growth_gpus_per_month: float | None
    measured_growth_gpus_per_month: float
    used_growth_gpus_per_month: float


class ModelPoolRow(TypedDict):
    """One GPU model's pool, sized on the demand pinned to it (None: the demand accepting any model)."""
    gpu_model: str
    installed_gpus: int | None
    peak_gpus: float
    growth_gpus_per_day: float
    upper_offset_gpus: float
    required_gpus: int | None
    run_out_date: str | None


@dataclass(frozen=True)
class PlanResult:
    forecast: ForecastSummary
    capacity: Capacity
    months: list[MonthRow]
    growth: dict[str, float]
    inputs: InputsSummary
    flags: list[str] = field(default_factory=list)
    scenarios: list[ScenarioRow] = field(default_factory=list)
    days: list[DayRow] = field(default_factory=list)
    """Per day of the horizon: peak, upper peak and GPUs required."""
    day_ahead: list[DayAheadRow] = field(default_factory=list)
    """The next 24 hours: point forecast and calibrated 80% and 95% bands."""


class SettingsShown(TypedDict, total=False):
    """PlanSettings as the payload shows it (its models left out), and the settings file when one was read."""
    horizon_days: int
    lead_time_days: int
    target_utilisation: float
    redundancy_gpus: int
    max_wait_probability: float
    origins: int | None
    workers: int | None
    growth_window_days: int
    allow_decline: bool
    daily_candidates: bool
    file: str


def settings_shown(settings: PlanSettings) -> SettingsShown:
    return {"horizon_days": settings.horizon_days, "lead_time_days": settings.lead_time_days,
            "target_utilisation": settings.target_utilisation, "redundancy_gpus": settings.redundancy_gpus,
            "max_wait_probability": settings.max_wait_probability, "origins": settings.origins,
            "workers": settings.workers, "growth_window_days": settings.growth_window_days,
            "allow_decline": settings.allow_decline, "daily_candidates": settings.daily_candidates}


class HistoryShown(TypedDict):
    """The demand planned on: where it came from, its span, the last two weeks hourly and every daily peak."""
    source: str
    demand: str
    hours: int
    first: str
    last: str
    recent: list[tuple[str, float]]
    daily_peaks: list[tuple[str, float]]
    credit: str


class Timing(TypedDict, total=False):
    plan_s: float
    backtest_s: float
    savings_wait_s: float


class ReplayFigures(TypedDict, total=False):
    """One savings replay's figures (greengpu plan with a trace and a cluster); finish_s only in the worker."""
    energy_kwh: float
    gpu_energy_kwh: float
    cost: float
    co2_kg: float
    wait_s: JsonObject
    node_sleep_hours: float
    wakes: int
    tenants: dict[str, dict[str, float]]
    finish_s: dict[str, float]


Savings = TypedDict("Savings", {"always-on": ReplayFigures, "default": ReplayFigures, "saved": dict[str, float]})
"""Always-on against the default policy on the same trace and cluster, and what the default saved."""


class _PlanPayload(TypedDict):
    forecast: ForecastSummary
    capacity: Capacity
    months: list[MonthRow]
    growth: dict[str, float]
    flags: list[str]
    inputs: InputsSummary
    scenarios: list[ScenarioRow]
    days: list[DayRow]
    day_ahead: list[DayAheadRow]
    settings: SettingsShown
    history: HistoryShown


class PlanPayload(_PlanPayload, total=False):
    """What `greengpu plan --json` prints (docs/FORECAST.md), and what the text and HTML reports read."""
    gpu_models: list[ModelPoolRow]
    timing: Timing
    savings: Savings
