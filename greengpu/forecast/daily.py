"""Daily-resolution forecasts of daily peak demand, for the plan's long horizon, under the same gate.

The capacity plan sizes for daily peaks weeks and months ahead; an hourly model is the wrong tool
there. On the series of daily peaks this backtests, over a 14-day horizon from origins with at least
28 days of training:
- baselines: naive (yesterday's peak), seasonal naive (the peak a week before), and `peak_trend`, the
  plan's own rule (median of the last week's peaks plus the Theil-Sen growth of the last 28 days,
  floored at zero);
- candidates: ETS (additive, damped trend, weekly season once three weeks are known),
  UnobservedComponents (local linear trend, weekly Fourier season), Theta (weekly deseasonalised) and
  the median ensemble of the three.
Origins are every day with 28 days of history before it (thinned evenly to the backtest's cap). A
candidate ships only under the same gate as the hourly models (`gate.py`: median MASE ratio <= 0.95
against the best baseline and a sign test over the origins at 5%) and over at least 10 origins (51
days of history; fewer only when fewer are asked for); its forecast then becomes the plan's path of
peaks. Otherwise the plan keeps its rule and says why.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np
import pandas as pd

from greengpu.forecast.backtest import run_backtest
from greengpu.forecast.gate import Choice, choose
from greengpu.forecast.models import (
    KeptFit,
    ModelSpec,
    ensemble,
    ets_fit,
    ets_forecast,
    guarded,
    naive,
    seasonal_naive,
    theta_forecast,
    uc_fit,
    uc_forecast,
)

WEEK_D = 7
HORIZON_D = 14
MIN_TRAIN_D = 28
TREND_WINDOW_D = 28
MIN_SHIP_ORIGINS = 10


def theil_sen_slope(values: np.ndarray) -> float:
    """Median of pairwise slopes (per step): one burst cannot tilt it."""
    n = len(values)
    if n < 2:
        return 0.0
    i, j = np.triu_indices(n, k=1)
    return float(np.median((values[j] - values[i]) / (j - i)))


def peak_trend(history: pd.Series, horizon: int) -> np.ndarray:
    values = history.to_numpy(dtype=float)
    level = float(np.median(values[-WEEK_D:]))
    slope = max(0.0, theil_sen_slope(values[-TREND_WINDOW_D:]))
    return np.asarray(level + slope * np.arange(1, horizon + 1), dtype=float)


def weekly_naive(history: pd.Series, horizon: int) -> np.ndarray:
    return seasonal_naive(history, horizon, WEEK_D)


def daily_ets(history: pd.Series, horizon: int) -> np.ndarray:
    return ets_forecast(history, horizon, WEEK_D if len(history) >= 3 * WEEK_D else None)


def daily_ets_fit(history: pd.Series) -> KeptFit:
    return ets_fit(history, WEEK_D if len(history) >= 3 * WEEK_D else None)


DAILY_UC_SEASONS = [{"period": WEEK_D, "harmonics": 3}]


def daily_unobserved_components(history: pd.Series, horizon: int) -> np.ndarray:
    return uc_forecast(history, horizon, "local linear trend", DAILY_UC_SEASONS)


def daily_unobserved_components_fit(history: pd.Series) -> KeptFit:
    return uc_fit(history, "local linear trend", DAILY_UC_SEASONS)


DAILY_BASELINES = (
    ModelSpec("naive", "baseline", naive),
    ModelSpec("weekly_naive", "baseline", weekly_naive),
    ModelSpec("peak_trend", "baseline", peak_trend),
)
def daily_theta(history: pd.Series, horizon: int) -> np.ndarray:
    return theta_forecast(history, horizon, WEEK_D)


# ETS and UC keep their parameters for a week of origins, as the hourly ones do (backtest.REFIT_EVERY): on six
# months of peaks, 141 origins, UC's fits were three quarters of the daily backtest's time.
_DAILY_SINGLE_CANDIDATES = (
    ModelSpec("ets", "candidate", daily_ets, fit=daily_ets_fit),
    ModelSpec("unobserved_components", "candidate", daily_unobserved_components, fit=daily_unobserved_components_fit),
    ModelSpec("theta", "candidate", daily_theta),
)
DAILY_CANDIDATES = _DAILY_SINGLE_CANDIDATES + (ensemble("median_ensemble", _DAILY_SINGLE_CANDIDATES, WEEK_D),)


@dataclass(frozen=True)
class DailyForecast:
    choice: Choice | None
    """None when the history is too short to backtest."""
    mase: dict[str, float]
    path: np.ndarray | None
    """The shipped candidate's peaks for each day of the horizon; None when a baseline ships."""
    note: str
    origins_needed: int = MIN_SHIP_ORIGINS
    """Origins a daily model must pass the gate on to ship."""
    can_ship: bool = False
    """Whether this history holds enough origins for a candidate to ship at all."""

    @property
    def days_needed(self) -> int:
        """The days of history that give `origins_needed` origins."""
        return self.origins_needed + MIN_TRAIN_D + HORIZON_D - 1


def forecast_daily_peaks(daily_peaks: pd.Series, horizon_days: int, origins: int | None,
                         with_candidates: bool = True, workers: int = 1,
                         progress: Callable[[int, int], None] | None = None) -> DailyForecast:
    """Backtest the daily models on `daily_peaks` (freq D) and, if a candidate ships, its path."""
    days = len(daily_peaks)
    needed = MIN_SHIP_ORIGINS if origins is None else min(MIN_SHIP_ORIGINS, origins)
    if days < MIN_TRAIN_D + HORIZON_D:
        ship_days = needed + MIN_TRAIN_D + HORIZON_D - 1
        return DailyForecast(None, {}, None, f"daily peaks: {days} days of history; the daily backtest needs "
                                             f"{MIN_TRAIN_D + HORIZON_D}, and a daily model {ship_days} to ship, so "
                                             "the plan's trend rule stands", needed)
    models = DAILY_BASELINES + (DAILY_CANDIDATES if with_candidates else ())
    backtest = run_backtest(daily_peaks, horizon_h=HORIZON_D, origins=origins, min_train_h=MIN_TRAIN_D,
                            models=models, season=WEEK_D, candidate_window=None, spacing=1, workers=workers,
                            progress=progress)
    choice = choose(backtest)  # 42 days or more always leave at least one origin
    mase = {m.name: m.mase for m in backtest.models.values()}
    found = len(backtest.origins)
    note = f"daily peaks ({found} origins, {HORIZON_D}-day horizon): {choice.reason}"
    can_ship = found >= needed and choice.power.can_pass
    if found < needed:
        # A few origins can crown a model by luck; months of capacity should not ride on that. Say so
        # first, with the history that would do, so the verdict below it does not read as a judgement.
        days_needed = needed + MIN_TRAIN_D + HORIZON_D - 1
        best = choice.evidence
        seen = f"; meanwhile the best candidate, {best.model}: {best.summary()}" if best is not None else ""
        note = (f"daily peaks ({found} origins, {HORIZON_D}-day horizon): the long-horizon gate cannot ship a "
                f"model on {found} origins; it needs {needed}, so {days_needed} days of history (this one has "
                f"{days}: {days_needed - days} more days would do){seen}")
        if choice.shipped_candidate:
            choice = replace(choice, model=choice.baseline, mase=choice.baseline_mase, shipped_candidate=False)
    if not choice.shipped_candidate:
        rule = f"the plan keeps its trend rule (peak_trend, MASE {mase['peak_trend']:.3f})"
        if not with_candidates:
            return DailyForecast(choice, mase, None, f"daily peaks: candidates not run; {rule}", needed, can_ship)
        return DailyForecast(choice, mase, None, f"{note}; {rule}", needed, can_ship)
    spec = next(m for m in models if m.name == choice.model)
    result = guarded(spec, daily_peaks, horizon_days, WEEK_D)
    if result.fell_back:
        return DailyForecast(choice, mase, None, f"{note}; its fit on the whole history failed ({result.reason}), "
                                                 "so the plan's trend rule stands", needed, can_ship)
    return DailyForecast(choice, mase, np.maximum(result.values, 0.0), note, needed, can_ship)
