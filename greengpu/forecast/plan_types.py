"""The capacity plan's inputs and result as typed objects (greengpu.forecast.plan): the settings, the planned
projects and efficiency gains beyond history, and what the plan found."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pandas as pd

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
class Project:
    """A planned project: `gpus` more busy GPUs at peak from `start` (inclusive) to `end` (exclusive)."""
    name: str
    gpus: float
    start: pd.Timestamp
    end: pd.Timestamp | None = None


@dataclass(frozen=True)
class EfficiencyGain:
    """An expected change in the organic workload's GPU-hours from `start`: -0.15 is 15% fewer."""
    name: str
    change: float
    start: pd.Timestamp


@dataclass(frozen=True)
class PlanInputs:
    projects: tuple[Project, ...] = ()
    efficiency: tuple[EfficiencyGain, ...] = ()
    buffer_factor: float = 1.0
    growth_gpus_per_month: float | None = None
    """Expected growth of daily peaks; None uses the measured Theil-Sen growth."""


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
