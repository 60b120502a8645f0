"""The capacity plan's settings and result as typed objects (greengpu.forecast.plan); the projects and efficiency
gains beyond history are in greengpu.plan_inputs, below config and forecast both."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from greengpu.forecast.models import BASELINES, CANDIDATES, ModelSpec


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


@dataclass(frozen=True)
class PlanResult:
    forecast: dict[str, Any]
    capacity: dict[str, Any]
    months: list[dict[str, Any]]
    growth: dict[str, float]
    flags: list[str] = field(default_factory=list)
    inputs: dict[str, Any] = field(default_factory=dict)
    scenarios: list[dict[str, Any]] = field(default_factory=list)
    days: list[dict[str, Any]] = field(default_factory=list)
    """Per day of the horizon: peak, upper peak and GPUs required."""
    day_ahead: list[dict[str, Any]] = field(default_factory=list)
    """The next 24 hours: point forecast and calibrated 80% and 95% bands."""
