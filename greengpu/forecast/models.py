"""Demand forecasting models behind one adapter: baselines always, statsmodels candidates when they earn it.

Every model takes an hourly pandas Series with a DatetimeIndex (freq "h") and returns point forecasts
for the next `horizon` hours as a numpy array. Baselines (FIELD-NOTES.md: hard to beat on GPU demand):
naive, seasonal naive (one day), drift. Candidates: ETS (`ETSModel`, additive error and trend, damped),
`UnobservedComponents` with daily and weekly Fourier seasonality (weekly as harmonics, never a
168-period seasonal, which costs 13-30 s per fit), SARIMAX with a daily season. A candidate whose
fit fails or whose forecast is not finite or absurd (beyond `ABSURD_FACTOR` x the history's range)
falls back to the seasonal naive forecast, and says so.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pandas as pd

DAY_H = 24
WEEK_H = 168
ABSURD_FACTOR = 3.0

Forecaster = Callable[[pd.Series, int], np.ndarray]


@dataclass(frozen=True)
class ModelSpec:
    name: str
    kind: str
    """`baseline` or `candidate`."""
    forecast: Forecaster


def naive(history: pd.Series, horizon: int) -> np.ndarray:
    return np.full(horizon, float(history.iloc[-1]))


def seasonal_naive(history: pd.Series, horizon: int, season: int = DAY_H) -> np.ndarray:
    if len(history) < season:
        return naive(history, horizon)
    last_season = history.to_numpy(dtype=float)[-season:]
    return np.array([last_season[i % season] for i in range(horizon)])


def drift(history: pd.Series, horizon: int) -> np.ndarray:
    values = history.to_numpy(dtype=float)
    slope = (values[-1] - values[0]) / max(1, len(values) - 1)
    return np.asarray(values[-1] + slope * np.arange(1, horizon + 1), dtype=float)


def _quiet(fit: Callable[[], np.ndarray]) -> np.ndarray:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # convergence chatter; the guard judges the result
        return fit()


def ets_forecast(history: pd.Series, horizon: int, season: int | None) -> np.ndarray:
    """Additive ETS with a damped trend and, when `season` is given, an additive season of that length."""
    from statsmodels.tsa.exponential_smoothing.ets import ETSModel

    def fit() -> np.ndarray:
        model = ETSModel(history.astype(float), error="add", trend="add", damped_trend=True,
                         seasonal="add" if season else None, seasonal_periods=season)
        return np.asarray(model.fit(disp=False, maxiter=200).forecast(horizon), dtype=float)

    return _quiet(fit)


def uc_forecast(history: pd.Series, horizon: int, level: str, seasons: list[dict[str, int]]) -> np.ndarray:
    """UnobservedComponents with `level` and Fourier seasons (`{"period", "harmonics"}` each)."""
    from statsmodels.tsa.statespace.structural import UnobservedComponents

    def fit() -> np.ndarray:
        model = UnobservedComponents(history.astype(float), level=level, freq_seasonal=seasons)
        return np.asarray(model.fit(disp=False, maxiter=100).forecast(horizon), dtype=float)

    return _quiet(fit)


def ets(history: pd.Series, horizon: int) -> np.ndarray:
    return ets_forecast(history, horizon, DAY_H)


def unobserved_components(history: pd.Series, horizon: int) -> np.ndarray:
    seasons = [{"period": DAY_H, "harmonics": 4}]
    if len(history) >= 2 * WEEK_H:
        seasons.append({"period": WEEK_H, "harmonics": 3})
    return uc_forecast(history, horizon, "local level", seasons)


def sarimax(history: pd.Series, horizon: int) -> np.ndarray:
    from statsmodels.tsa.statespace.sarimax import SARIMAX

    def fit() -> np.ndarray:
        model = SARIMAX(history.astype(float), order=(1, 0, 1), seasonal_order=(1, 0, 0, DAY_H), trend="c",
                        enforce_stationarity=False, enforce_invertibility=False)
        result = model.fit(disp=False, maxiter=100)
        return np.asarray(result.forecast(horizon), dtype=float)

    return _quiet(fit)


BASELINES = (
    ModelSpec("naive", "baseline", naive),
    ModelSpec("seasonal_naive", "baseline", seasonal_naive),
    ModelSpec("drift", "baseline", drift),
)
CANDIDATES = (
    ModelSpec("ets", "candidate", ets),
    ModelSpec("unobserved_components", "candidate", unobserved_components),
    ModelSpec("sarimax", "candidate", sarimax),
)


@dataclass(frozen=True)
class GuardedForecast:
    values: np.ndarray
    fell_back: bool
    reason: str = ""


def guarded(spec: ModelSpec, history: pd.Series, horizon: int, season: int = DAY_H) -> GuardedForecast:
    """`spec`'s forecast, or the seasonal naive one (`season` steps) when it fails, is not finite, or is
    absurd."""
    def fallback() -> np.ndarray:
        return seasonal_naive(history, horizon, season)

    try:
        values = spec.forecast(history, horizon)
    except Exception as error:  # a statsmodels fit can fail in many ways; all mean "use the baseline"
        return GuardedForecast(fallback(), True, f"{spec.name} failed: {error}")
    observed = history.to_numpy(dtype=float)
    span = max(1.0, float(np.nanmax(observed) - np.nanmin(observed)))
    low, high = float(np.nanmin(observed)) - ABSURD_FACTOR * span, float(np.nanmax(observed)) + ABSURD_FACTOR * span
    if values.shape != (horizon,) or not np.all(np.isfinite(values)):
        return GuardedForecast(fallback(), True, f"{spec.name}: non-finite forecast")
    if values.min() < low or values.max() > high:
        return GuardedForecast(fallback(), True, f"{spec.name}: forecast outside "
                               f"[{low:.0f}, {high:.0f}]")
    return GuardedForecast(values, False)
