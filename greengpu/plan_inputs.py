"""The capacity plan's vocabulary shared by the settings reader (greengpu.config.plan_settings) and the
planner (greengpu.forecast.plan): the planned projects and efficiency gains beyond history, and the inputs
that carry them. It sits below both, so that config reads a plan file without importing the forecaster."""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd


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
