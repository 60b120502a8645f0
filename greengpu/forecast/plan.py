"""`greengpu plan`'s capacity plan, pure: forecast choice, calibrated peak demand, GPUs needed per month,
run-out and order-by dates.

Method (docs/FORECAST.md):
1. A day-ahead rolling-origin backtest picks the shipped model by the gate and calibrates its bands.
2. Peak demand: the daily peaks of the last `growth_window_days`; their level is the median of the
   last week's peaks, their growth the Theil-Sen slope (robust to a burst) over the window, floored
   at zero unless `allow_decline`.
3. For each day of the horizon, the upper peak = level + growth x days ahead + the calibrated upper
   offset of daily peaks (`peak_upper_offset`: how far a day's peak rose above the previous week's
   median, at 95%, out of sample). GPUs needed = ceil(upper
   peak / target utilisation) + redundancy, and at least the Erlang-C count that keeps P(wait) under
   `max_wait_probability` for the day's mean demand.
4. Run-out: the first day that needs more GPUs than are installed; order-by: run-out minus the lead
   time (flagged when already past).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from greengpu.forecast.backtest import calibrate, choose, prepare, run_backtest
from greengpu.forecast.capacity import gpus_needed, servers_for_wait
from greengpu.forecast.models import BASELINES, CANDIDATES, DAY_H, ModelSpec


@dataclass(frozen=True)
class PlanSettings:
    horizon_days: int = 90
    lead_time_days: int = 84
    target_utilisation: float = 0.65
    redundancy_gpus: int = 0
    max_wait_probability: float = 0.10
    origins: int = 10
    growth_window_days: int = 28
    allow_decline: bool = False
    models: tuple[ModelSpec, ...] = BASELINES + CANDIDATES


@dataclass(frozen=True)
class PlanResult:
    forecast: dict[str, Any]
    capacity: dict[str, Any]
    months: list[dict[str, Any]]
    growth: dict[str, float]
    flags: list[str] = field(default_factory=list)


def theil_sen_slope(values: np.ndarray) -> float:
    """Median of pairwise slopes (per step): one burst cannot tilt it."""
    n = len(values)
    if n < 2:
        return 0.0
    i, j = np.triu_indices(n, k=1)
    return float(np.median((values[j] - values[i]) / (j - i)))


def peak_upper_offset(daily_peaks: np.ndarray, level: float = 0.95, lookback_days: int = 7) -> float:
    """How far a day's peak rises above the median of the previous week's peaks, at `level`.

    Calibrated out of sample (each day against the days before it), with the split-conformal
    correction: the upper quantile of peak demand the plan sizes for.
    """
    errors = [daily_peaks[i] - float(np.median(daily_peaks[i - lookback_days:i]))
              for i in range(lookback_days, len(daily_peaks))]
    if not errors:
        return 0.0
    values = np.sort(np.asarray(errors))
    rank = min(len(values), math.ceil((len(values) + 1) * level))
    return max(0.0, float(values[rank - 1]))


def make_plan(history: pd.Series, installed_gpus: int | None, settings: PlanSettings) -> PlanResult:
    prepared = prepare(history, capacity=float(installed_gpus) if installed_gpus else None)
    series = prepared.series
    flags = list(prepared.flags)
    backtest = run_backtest(series, horizon_h=DAY_H, origins=settings.origins, min_train_h=14 * DAY_H,
                            models=settings.models)
    flags += backtest.notes
    choice = choose(backtest)
    calibration = calibrate(backtest, choice.model)

    daily_peaks = series.resample("D").max().dropna()
    window = daily_peaks.iloc[-settings.growth_window_days:].to_numpy(dtype=float)
    slope = theil_sen_slope(window)
    if slope < 0 and not settings.allow_decline:
        flags.append(f"demand peaks fell {-slope:.2f} GPUs/day over the last {len(window)} days; planned flat")
        slope = 0.0
    level = float(np.median(window[-7:]))
    upper_offset = peak_upper_offset(daily_peaks.to_numpy(dtype=float))
    daily_mean = series.resample("D").mean().dropna()
    mean_level = float(np.median(daily_mean.to_numpy(dtype=float)[-7:]))
    mean_ratio = mean_level / level if level > 0 else 1.0

    start = series.index[-1].normalize() + pd.Timedelta(days=1)
    days = pd.date_range(start, periods=settings.horizon_days, freq="D")
    rows = []
    for ahead, day in enumerate(days, start=1):
        peak = level + slope * ahead
        upper = max(0.0, peak + upper_offset)
        by_rule = gpus_needed(upper, settings.target_utilisation, settings.redundancy_gpus)
        by_wait = servers_for_wait(max(0.0, peak * mean_ratio), settings.max_wait_probability)
        rows.append((day, peak, upper, max(by_rule, by_wait)))
    run_out = next((day for day, _, _, need in rows if installed_gpus is not None and need > installed_gpus), None)
    order_by = run_out - pd.Timedelta(days=settings.lead_time_days) if run_out is not None else None
    if order_by is not None and run_out is not None and order_by <= start:
        flags.append(f"order-by date {order_by.date()} has passed: with a {settings.lead_time_days}-day lead time "
                     f"the GPUs needed from {run_out.date()} cannot arrive in time")
    months = []
    frame = pd.DataFrame(rows, columns=["day", "peak", "upper", "need"]).set_index("day")
    day_index = pd.DatetimeIndex(frame.index)
    months_index = (day_index.tz_convert(None) if day_index.tz is not None else day_index).to_period("M")
    for month, part in frame.groupby(months_index):
        months.append({"month": str(month), "peak_gpus": round(float(part["peak"].max()), 1),
                       "upper_peak_gpus": round(float(part["upper"].max()), 1),
                       "required_gpus": int(part["need"].max())})
    required = max(need for _, _, _, need in rows) if rows else 0
    return PlanResult(
        forecast={"model": choice.model, "mase": _round(choice.mase), "baseline": choice.baseline,
                  "baseline_mase": _round(choice.baseline_mase), "origins": choice.origins,
                  "wins": choice.wins, "shipped_candidate": choice.shipped_candidate, "reason": choice.reason,
                  "coverage_80": _round(calibration.coverage[0.8]), "coverage_95": _round(calibration.coverage[0.95]),
                  "models": {m.name: _round(m.mase) for m in backtest.models.values()}},
        capacity={"installed_gpus": installed_gpus, "required_gpus": required,
                  "run_out_date": run_out.date().isoformat() if run_out is not None else None,
                  "order_by_date": order_by.date().isoformat() if order_by is not None else None,
                  "target_utilisation": settings.target_utilisation, "redundancy_gpus": settings.redundancy_gpus,
                  "lead_time_days": settings.lead_time_days, "horizon_days": settings.horizon_days,
                  "max_wait_probability": settings.max_wait_probability},
        months=months,
        growth={"peak_level_gpus": round(level, 1), "peak_growth_gpus_per_day": round(slope, 3),
                "upper_offset_gpus": round(upper_offset, 1), "window_days": float(len(window))},
        flags=flags,
    )


def _round(value: float) -> float | None:
    return None if value is None or not math.isfinite(value) else round(float(value), 4)
