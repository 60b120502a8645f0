"""Parts of the capacity plan as the report shows them (greengpu.forecast.plan): the daily-peak forecast's summary,
the shipped model's next 24 hours with its calibrated bands, dates and rounded figures."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from greengpu.forecast.backtest import CANDIDATE_WINDOW_H
from greengpu.forecast.calibration import Calibration
from greengpu.forecast.daily import DailyForecast
from greengpu.forecast.gate import gate_summary
from greengpu.forecast.models import DAY_H, ModelSpec, guarded
from greengpu.forecast.plan_types import DailySummary, DayAheadRow


def daily_summary(daily: DailyForecast, used: bool) -> DailySummary:
    choice = daily.choice
    return {"model": choice.model if choice else "peak_trend", "shipped_candidate": used,
            "mase": rounded(choice.mase) if choice else None,
            "baseline": choice.baseline if choice else None,
            "baseline_mase": rounded(choice.baseline_mase) if choice else None,
            "origins": choice.origins if choice else 0,
            "gate": gate_summary(choice),
            "models": {name: rounded(value) for name, value in daily.mase.items()}, "note": daily.note,
            "can_ship": daily.can_ship, "origins_needed": daily.origins_needed,
            "history_days_needed": daily.days_needed}


def day_ahead(series: pd.Series, model: str, models: tuple[ModelSpec, ...],
               calibration: Calibration) -> list[DayAheadRow]:
    """The shipped model's next 24 hours from the whole history, with the calibrated bands."""
    spec = next(m for m in models if m.name == model)
    history = series.iloc[-CANDIDATE_WINDOW_H:] if spec.kind == "candidate" else series
    point = guarded(spec, history, DAY_H).values
    low_80, up_80 = calibration.band(point, 0.8)
    low_95, up_95 = calibration.band(point, 0.95)
    times = pd.date_range(series.index[-1] + pd.Timedelta(hours=1), periods=DAY_H, freq="h")

    def gpus(values: np.ndarray, step: int) -> float:
        return round(max(0.0, float(values[step])), 1)

    return [{"time": when.isoformat(), "gpus": gpus(point, step), "lower_80": gpus(low_80, step),
             "upper_80": gpus(up_80, step), "lower_95": gpus(low_95, step), "upper_95": gpus(up_95, step)}
            for step, when in enumerate(times)]


def iso_date(day: pd.Timestamp | None) -> str | None:
    return day.date().isoformat() if day is not None else None


def rounded(value: float) -> float | None:
    return None if value is None or not math.isfinite(value) else round(float(value), 4)
