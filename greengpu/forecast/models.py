"""Demand forecasting models behind one adapter: baselines always, statsmodels candidates when they earn it.

Every model takes an hourly pandas Series with a DatetimeIndex (freq "h") and returns point forecasts
for the next `horizon` hours as a numpy array. Baselines (hard to beat on GPU demand): naive, seasonal
naive (one day), drift. Candidates:
- ETS (`ETSModel`, additive error, damped additive trend, daily season; initial states by the
  heuristic of Hyndman and Athanasopoulos, which costs 0.15 s a fit instead of 2 s for estimating 24
  seasonal states by likelihood);
- `UnobservedComponents` with daily and weekly Fourier seasonality (weekly as harmonics, never a
  168-period seasonal, which costs 13-30 s per fit);
- SARIMAX (1,0,1)x(1,0,0,24);
- MSTL: the series less its daily and weekly seasons (statsmodels' MSTL decomposition) forecast by
  a damped-trend ETS, plus each season repeated from its last cycle;
- Theta (`ThetaModel`, additively deseasonalised over one day);
- the median ensemble: per hour, the median of the other candidates' forecasts.
ETS, UnobservedComponents and SARIMAX keep their parameters (`KeptFit`): a backtest may run them over a
new window without a search (`Fitted.extend`: ETS's smoother, the state-space filter; a tenth of a fit or
less), and estimate them again starting from the kept ones (`Fitted.refit`, a warm start: UC's search took
0.08 s from last week's parameters against 0.9 s from statsmodels' defaults).
A candidate whose fit fails or whose forecast is not finite or absurd (beyond `ABSURD_FACTOR` x the
history's range) falls back to the seasonal naive forecast, and says so.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Protocol, TypeVar

import numpy as np
import pandas as pd

if TYPE_CHECKING:  # statsmodels is the planning extra's: imported where a fit runs
    from statsmodels.base.wrapper import ResultsWrapper
    from statsmodels.tsa.base.tsa_model import TimeSeriesModel

Fit = TypeVar("Fit")

DAY_H = 24
WEEK_H = 168
ABSURD_FACTOR = 3.0

Forecaster = Callable[[pd.Series, int], np.ndarray]


class Fitted(Protocol):
    """A fitted model whose parameters can be kept while its state follows new data."""

    def forecast(self, horizon: int) -> np.ndarray: ...

    def extend(self, history: pd.Series) -> Fitted:
        """The same parameters, filtered over `history` (a later window of the same series)."""
        ...

    def refit(self, history: pd.Series) -> Fitted:
        """Parameters estimated afresh on `history`, the search starting from these (a warm start)."""
        ...


Fitter = Callable[[pd.Series], Fitted]


@dataclass(frozen=True)
class ModelSpec:
    name: str
    kind: str
    """`baseline` or `candidate`."""
    forecast: Forecaster
    fit: Fitter | None = None
    """For models whose parameters a backtest may keep between origins (state-space models)."""
    members: tuple[str, ...] = field(default=())
    """For an ensemble: the models whose forecasts it takes the median of."""


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


def _quiet(fit: Callable[[], Fit]) -> Fit:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # convergence chatter; the guard judges the result
        return fit()


def _ets_model(history: pd.Series, season: int | None) -> TimeSeriesModel:
    from statsmodels.tsa.exponential_smoothing.ets import ETSModel

    # The heuristic needs two full seasons and ten points; shorter series estimate their initial states.
    heuristic = len(history) >= max(10, 2 * (season or 0))
    return ETSModel(history.astype(float), error="add", trend="add", damped_trend=True,
                    seasonal="add" if season else None, seasonal_periods=season,
                    initialization_method="heuristic" if heuristic else "estimated")


@dataclass(frozen=True)
class KeptFit:
    """A statsmodels results object behind the `Fitted` protocol: `build` makes the same model on another
    window, which `extend` runs with these parameters (a filter pass) and `refit` estimates from them."""
    results: ResultsWrapper
    build: Callable[[pd.Series], TimeSeriesModel]
    maxiter: int
    run_with: str = "filter"
    """The model's method that runs fixed parameters over a window: a state-space model's `filter` (the
    smoother's backward pass is not needed for a forecast and costs as much again); ETS's `smooth`."""

    def forecast(self, horizon: int) -> np.ndarray:
        return np.asarray(self.results.forecast(horizon), dtype=float)

    def extend(self, history: pd.Series) -> KeptFit:
        run = getattr(self.build(history), self.run_with)
        return replace(self, results=_quiet(lambda: run(self.results.params)))

    def refit(self, history: pd.Series) -> KeptFit:
        return _fitted(self.build, history, self.maxiter, self.run_with, start_params=self.results.params)


def _fitted(build: Callable[[pd.Series], TimeSeriesModel], history: pd.Series, maxiter: int, run_with: str = "filter",
            start_params: pd.Series | None = None) -> KeptFit:
    model = build(history)
    results = _quiet(lambda: model.fit(disp=False, maxiter=maxiter, start_params=start_params))
    return KeptFit(results, build, maxiter, run_with)


def ets_fit(history: pd.Series, season: int | None) -> KeptFit:
    """Additive ETS with a damped trend (and an additive season of `season` steps), its parameters kept."""
    return _fitted(lambda window: _ets_model(window, season), history, 200, "smooth")


def ets_forecast(history: pd.Series, horizon: int, season: int | None) -> np.ndarray:
    """Additive ETS with a damped trend and, when `season` is given, an additive season of that length."""
    return ets_fit(history, season).forecast(horizon)


def uc_fit(history: pd.Series, level: str, seasons: list[dict[str, int]]) -> KeptFit:
    """UnobservedComponents with `level` and Fourier seasons (`{"period", "harmonics"}` each)."""
    from statsmodels.tsa.statespace.structural import UnobservedComponents

    def build(window: pd.Series) -> TimeSeriesModel:
        return UnobservedComponents(window.astype(float), level=level, freq_seasonal=seasons)

    return _fitted(build, history, 100)


def uc_forecast(history: pd.Series, horizon: int, level: str, seasons: list[dict[str, int]]) -> np.ndarray:
    return uc_fit(history, level, seasons).forecast(horizon)


def _hourly_uc_seasons(history: pd.Series) -> list[dict[str, int]]:
    seasons = [{"period": DAY_H, "harmonics": 4}]
    if len(history) >= 2 * WEEK_H:
        seasons.append({"period": WEEK_H, "harmonics": 3})
    return seasons


def ets(history: pd.Series, horizon: int) -> np.ndarray:
    return ets_forecast(history, horizon, DAY_H)


def ets_daily_season_fit(history: pd.Series) -> KeptFit:
    return ets_fit(history, DAY_H)


def unobserved_components_fit(history: pd.Series) -> KeptFit:
    return uc_fit(history, "local level", _hourly_uc_seasons(history))


def unobserved_components(history: pd.Series, horizon: int) -> np.ndarray:
    return unobserved_components_fit(history).forecast(horizon)


def sarimax_fit(history: pd.Series) -> KeptFit:
    from statsmodels.tsa.statespace.sarimax import SARIMAX

    def build(window: pd.Series) -> TimeSeriesModel:
        # concentrate_scale: the variance is solved for, not searched, which halves the fit time.
        return SARIMAX(window.astype(float), order=(1, 0, 1), seasonal_order=(1, 0, 0, DAY_H), trend="c",
                       enforce_stationarity=False, enforce_invertibility=False, concentrate_scale=True)

    return _fitted(build, history, 100)


def sarimax(history: pd.Series, horizon: int) -> np.ndarray:
    return sarimax_fit(history).forecast(horizon)


def repeat_last_cycle(values: np.ndarray, period: int, horizon: int) -> np.ndarray:
    last = values[-period:]
    return np.array([last[i % period] for i in range(horizon)], dtype=float)


def mstl_forecast(history: pd.Series, horizon: int, periods: Sequence[int]) -> np.ndarray:
    """MSTL's seasons (only those with more than two full cycles in `history`) repeated from their last
    cycle, plus a damped-trend ETS forecast of what is left."""
    from statsmodels.tsa.seasonal import MSTL

    # Strictly more than two cycles: at exactly two, statsmodels' MSTL fails inside its own fit.
    usable = tuple(p for p in periods if len(history) > 2 * p)
    if not usable:
        return ets_forecast(history, horizon, None)
    values = history.astype(float)
    decomposition = _quiet(lambda: MSTL(values, periods=usable).fit())
    seasonal = np.asarray(decomposition.seasonal, dtype=float).reshape(len(values), -1)
    adjusted = pd.Series(values.to_numpy() - seasonal.sum(axis=1), index=history.index)
    ahead = ets_forecast(adjusted, horizon, None)
    for column, period in enumerate(usable):
        ahead = ahead + repeat_last_cycle(seasonal[:, column], period, horizon)
    return ahead


def mstl(history: pd.Series, horizon: int) -> np.ndarray:
    return mstl_forecast(history, horizon, (DAY_H, WEEK_H))


def theta_forecast(history: pd.Series, horizon: int, period: int) -> np.ndarray:
    """The Theta method (SES with drift) on the additively deseasonalised series."""
    from statsmodels.tsa.forecasting.theta import ThetaModel

    seasonal = len(history) >= 2 * period
    model = ThetaModel(history.astype(float), period=period, deseasonalize=seasonal, method="additive")
    return np.asarray(_quiet(lambda: model.fit().forecast(horizon)), dtype=float)


def theta(history: pd.Series, horizon: int) -> np.ndarray:
    return theta_forecast(history, horizon, DAY_H)


def median_of(forecasts: Sequence[np.ndarray]) -> np.ndarray:
    return np.asarray(np.median(np.vstack(forecasts), axis=0), dtype=float)


def ensemble(name: str, members: Sequence[ModelSpec], season: int) -> ModelSpec:
    """The per-step median of `members`' guarded forecasts: a member that fails counts as its fallback."""
    def forecast(history: pd.Series, horizon: int) -> np.ndarray:
        return median_of([guarded(m, history, horizon, season).values for m in members])

    return ModelSpec(name, "candidate", forecast, members=tuple(m.name for m in members))


BASELINES = (
    ModelSpec("naive", "baseline", naive),
    ModelSpec("seasonal_naive", "baseline", seasonal_naive),
    ModelSpec("drift", "baseline", drift),
)
_SINGLE_CANDIDATES = (
    ModelSpec("ets", "candidate", ets, fit=ets_daily_season_fit),
    ModelSpec("unobserved_components", "candidate", unobserved_components, fit=unobserved_components_fit),
    ModelSpec("sarimax", "candidate", sarimax, fit=sarimax_fit),
    ModelSpec("mstl", "candidate", mstl),
    ModelSpec("theta", "candidate", theta),
)
CANDIDATES = _SINGLE_CANDIDATES + (ensemble("median_ensemble", _SINGLE_CANDIDATES, DAY_H),)


@dataclass(frozen=True)
class GuardedForecast:
    values: np.ndarray
    fell_back: bool
    reason: str = ""


def guarded(spec: ModelSpec, history: pd.Series, horizon: int, season: int = DAY_H,
            produce: Callable[[], np.ndarray] | None = None) -> GuardedForecast:
    """`spec`'s forecast (or what `produce` returns for it), or the seasonal naive one (`season` steps)
    when it fails, is not finite, or is absurd."""
    def fallback() -> np.ndarray:
        return seasonal_naive(history, horizon, season)

    try:
        values = produce() if produce is not None else spec.forecast(history, horizon)
    except Exception as error:  # a statsmodels fit can fail in many ways; all mean "use the baseline"
        return GuardedForecast(fallback(), True, f"{spec.name} failed: {error}")
    observed = history.to_numpy(dtype=float)
    span = max(1.0, float(np.nanmax(observed) - np.nanmin(observed)))
    low, high = float(np.nanmin(observed)) - ABSURD_FACTOR * span, float(np.nanmax(observed)) + ABSURD_FACTOR * span
    if values.shape != (horizon,) or not np.all(np.isfinite(values)):
        return GuardedForecast(fallback(), True, f"{spec.name}: non-finite forecast")
    if values.min() < low or values.max() > high:
        return GuardedForecast(fallback(), True, f"{spec.name}: forecast outside [{low:.0f}, {high:.0f}]")
    return GuardedForecast(values, False)
