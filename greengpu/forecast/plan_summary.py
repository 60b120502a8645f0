"""Parts of the capacity plan as the report shows them (greengpu.forecast.plan): the daily-peak forecast's summary,
the shipped model's next 24 hours with its calibrated bands, dates and rounded figures."""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

from greengpu.forecast.backtest import CANDIDATE_WINDOW_H
from greengpu.forecast.calibration import Calibration
from greengpu.forecast.daily import DailyForecast
from greengpu.forecast.gate import gate_summary
from greengpu.forecast.models import DAY_H, ModelSpec, guarded


def daily_summary(daily: DailyForecast, used: bool) -> dict[str, Any]:
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
               calibration: Calibration) -> list[dict[str, Any]]:
    """The shipped model's next 24 hours from the whole history, with the calibrated bands."""
    spec = next(m for m in models if m.name == model)
    history = series.iloc[-CANDIDATE_WINDOW_H:] if spec.kind == "candidate" else series
    point = guarded(spec, history, DAY_H).values
    bands = {level: calibration.band(point, level) for level in calibration.levels}
    times = pd.date_range(series.index[-1] + pd.Timedelta(hours=1), periods=DAY_H, freq="h")
    rows = []
    for step, when in enumerate(times):
        row: dict[str, Any] = {"time": when.isoformat(), "gpus": round(max(0.0, float(point[step])), 1)}
        for level, (lower, upper) in bands.items():
            tag = int(round(level * 100))
            row[f"lower_{tag}"] = round(max(0.0, float(lower[step])), 1)
            row[f"upper_{tag}"] = round(max(0.0, float(upper[step])), 1)
        rows.append(row)
    return rows


def iso_date(day: pd.Timestamp | None) -> str | None:
    return day.date().isoformat() if day is not None else None


def rounded(value: float) -> float | None:
    return None if value is None or not math.isfinite(value) else round(float(value), 4)
