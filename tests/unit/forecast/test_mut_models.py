"""The forecasting models (greengpu.forecast.models) on small series: the baselines and the guard by hand,
each statsmodels candidate against the same statsmodels model built here from its documented settings,
so a changed setting (trend, damping, season, initialisation) shows as a different forecast."""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest
from statsmodels.tsa.exponential_smoothing.ets import ETSModel
from statsmodels.tsa.forecasting.theta import ThetaModel
from statsmodels.tsa.seasonal import MSTL
from statsmodels.tsa.statespace.sarimax import SARIMAX
from statsmodels.tsa.statespace.structural import UnobservedComponents

from greengpu.forecast.models import (
    ABSURD_FACTOR,
    BASELINES,
    CANDIDATES,
    DAY_H,
    WEEK_H,
    KeptFit,
    ModelSpec,
    _hourly_uc_seasons,
    _quiet,
    drift,
    ensemble,
    ets,
    ets_forecast,
    guarded,
    median_of,
    mstl,
    mstl_forecast,
    naive,
    repeat_last_cycle,
    sarimax_fit,
    seasonal_naive,
    theta,
    theta_forecast,
    uc_fit,
    uc_forecast,
    unobserved_components,
    unobserved_components_fit,
)


def hourly(values: np.ndarray | list[float]) -> pd.Series:
    return pd.Series(np.asarray(values, dtype=float),
                     index=pd.date_range("2026-01-01", periods=len(values), freq="h", tz="UTC"))


def shaped(hours: int) -> pd.Series:
    """A daily shape, growth and an irregular part: every setting of a model changes its forecast."""
    t = np.arange(hours)
    return hourly(20 + 8 * np.sin(2 * np.pi * t / DAY_H) + 0.05 * t + ((t * 37) % 11) * 0.3)


def quiet_forecast(results: object, horizon: int) -> np.ndarray:
    return np.asarray(results.forecast(horizon), dtype=float)  # type: ignore[attr-defined]


def test_baselines_by_hand() -> None:
    history = hourly([1.0, 2.0, 4.0, 7.0])
    assert list(naive(history, 2)) == [7.0, 7.0]
    assert list(seasonal_naive(history, 5, season=3)) == [2.0, 4.0, 7.0, 2.0, 4.0]
    assert list(seasonal_naive(history, 2, season=5)) == [7.0, 7.0]  # shorter than a season: naive
    assert list(seasonal_naive(history, 2, season=4)) == [1.0, 2.0]
    day = hourly(np.arange(30.0))
    assert list(seasonal_naive(day, 2)) == [6.0, 7.0]  # a day by default: 24 hours back
    assert list(drift(history, 2)) == [9.0, 11.0]  # (7 - 1) / 3 per step
    assert list(drift(hourly([5.0]), 2)) == [5.0, 5.0]
    assert list(drift(hourly([1.0, 3.0]), 2)) == [5.0, 7.0]  # one step of 2
    assert list(repeat_last_cycle(np.array([1.0, 2.0, 3.0, 4.0]), 3, 4)) == [2.0, 3.0, 4.0, 2.0]
    assert list(median_of([np.array([1.0, 5.0]), np.array([3.0, 2.0]), np.array([2.0, 9.0])])) == [2.0, 5.0]


def test_quiet_runs_the_fit_without_its_warnings() -> None:
    def chatty() -> int:
        warnings.warn("did not converge", UserWarning, stacklevel=1)
        return 7

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert _quiet(chatty) == 7
    assert caught == []


@pytest.mark.parametrize(("hours", "season", "initialization"), [
    (48, DAY_H, "heuristic"), (10, None, "heuristic"), (9, None, "estimated"), (9, 4, "estimated"),
    (14, 4, "heuristic")])
def test_ets_is_additive_with_a_damped_trend(hours: int, season: int | None, initialization: str) -> None:
    history = shaped(hours)
    model = ETSModel(history, error="add", trend="add", damped_trend=True, seasonal="add" if season else None,
                     seasonal_periods=season, initialization_method=initialization)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        expected = quiet_forecast(model.fit(disp=False, maxiter=200), 5)
    np.testing.assert_allclose(ets_forecast(history, 5, season), expected)


def test_ets_candidate_uses_the_daily_season() -> None:
    np.testing.assert_allclose(ets(shaped(48), 3), ets_forecast(shaped(48), 3, DAY_H))


def test_unobserved_components_with_fourier_seasons_and_kept_parameters() -> None:
    history, later = shaped(48), shaped(60).iloc[12:]
    seasons = [{"period": DAY_H, "harmonics": 2}]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        results = UnobservedComponents(history, level="local linear trend", freq_seasonal=seasons).fit(
            disp=False, maxiter=100)
        extended = results.apply(later)
    fitted = uc_fit(history, "local linear trend", seasons)
    np.testing.assert_allclose(fitted.forecast(4), quiet_forecast(results, 4))
    np.testing.assert_allclose(uc_forecast(history, 4, "local linear trend", seasons), quiet_forecast(results, 4))
    np.testing.assert_allclose(fitted.extend(later).forecast(4), quiet_forecast(extended, 4))
    assert isinstance(fitted.extend(later), KeptFit)


def test_kept_parameters_filter_a_later_window_and_warm_start_a_refit() -> None:
    history, later = shaped(72), shaped(96).iloc[24:]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = SARIMAX(history, order=(1, 0, 1), seasonal_order=(1, 0, 0, DAY_H), trend="c",
                        enforce_stationarity=False, enforce_invertibility=False, concentrate_scale=True)
        results = model.fit(disp=False, maxiter=100)
        later_model = SARIMAX(later, order=(1, 0, 1), seasonal_order=(1, 0, 0, DAY_H), trend="c",
                              enforce_stationarity=False, enforce_invertibility=False, concentrate_scale=True)
        filtered = later_model.filter(results.params)
        warm = later_model.fit(disp=False, maxiter=100, start_params=results.params)
    fitted = sarimax_fit(history)
    # extend: the kept parameters run over the later window, no search (the same as statsmodels' filter).
    np.testing.assert_allclose(fitted.extend(later).forecast(4), quiet_forecast(filtered, 4))
    np.testing.assert_allclose(fitted.extend(later).results.params, results.params)
    # refit: a search on the later window that starts from the kept parameters.
    np.testing.assert_allclose(fitted.refit(later).forecast(4), quiet_forecast(warm, 4))


def test_ets_keeps_its_smoothing_parameters_over_a_later_window() -> None:
    history, later = shaped(72), shaped(96).iloc[24:]

    def ets_model(window: pd.Series) -> ETSModel:
        return ETSModel(window, error="add", trend="add", damped_trend=True, seasonal="add",
                        seasonal_periods=DAY_H, initialization_method="heuristic")

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        results = ets_model(history).fit(disp=False, maxiter=200)
        smoothed = ets_model(later).smooth(results.params)
    candidate = next(m for m in CANDIDATES if m.name == "ets")
    assert candidate.fit is not None
    fitted = candidate.fit(history)
    np.testing.assert_allclose(fitted.forecast(3), ets(history, 3))
    np.testing.assert_allclose(fitted.extend(later).forecast(3), quiet_forecast(smoothed, 3))


def test_the_hourly_unobserved_components_add_the_weekly_season_from_two_weeks() -> None:
    assert _hourly_uc_seasons(shaped(2 * WEEK_H - 1)) == [{"period": DAY_H, "harmonics": 4}]
    assert _hourly_uc_seasons(shaped(2 * WEEK_H)) == [{"period": DAY_H, "harmonics": 4},
                                                      {"period": WEEK_H, "harmonics": 3}]
    history = shaped(48)
    expected = uc_fit(history, "local level", [{"period": DAY_H, "harmonics": 4}]).forecast(3)
    np.testing.assert_allclose(unobserved_components_fit(history).forecast(3), expected)
    np.testing.assert_allclose(unobserved_components(history, 3), expected)


def test_sarimax_is_arma_1_1_with_a_daily_ar_term_and_a_constant() -> None:
    history = shaped(50)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        results = SARIMAX(history, order=(1, 0, 1), seasonal_order=(1, 0, 0, DAY_H), trend="c",
                          enforce_stationarity=False, enforce_invertibility=False, concentrate_scale=True).fit(
            disp=False, maxiter=100)
    candidate = next(m for m in CANDIDATES if m.name == "sarimax")
    assert candidate.fit is sarimax_fit
    np.testing.assert_allclose(candidate.forecast(history, 4), quiet_forecast(results, 4), rtol=1e-6)


def test_mstl_removes_the_seasons_with_two_cycles_and_adds_them_back_repeated() -> None:
    history = shaped(60)  # two days and a half: the daily season only
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        seasonal = np.asarray(MSTL(history, periods=(DAY_H,)).fit().seasonal, dtype=float).reshape(60, -1)
    adjusted = pd.Series(history.to_numpy() - seasonal.sum(axis=1), index=history.index)
    expected = ets_forecast(adjusted, 30, None) + np.array([seasonal[36 + i % 24, 0] for i in range(30)])
    np.testing.assert_allclose(mstl_forecast(history, 30, (DAY_H, WEEK_H)), expected)
    np.testing.assert_allclose(mstl(history, 30), expected)
    short = shaped(47)
    np.testing.assert_allclose(mstl_forecast(short, 3, (DAY_H,)), ets_forecast(short, 3, None))
    # Exactly two cycles: statsmodels' MSTL fails inside its fit (UnboundLocalError), so the season
    # waits for more than two.
    two = shaped(48)
    np.testing.assert_allclose(mstl_forecast(two, 3, (DAY_H,)), ets_forecast(two, 3, None))


def test_mstl_takes_both_seasons_from_more_than_two_weeks() -> None:
    t = np.arange(2 * WEEK_H + 5)
    history = hourly(shaped(len(t)).to_numpy() + 3 * np.sin(2 * np.pi * t / WEEK_H))  # a weekly season too
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        seasonal = np.asarray(MSTL(history, periods=(DAY_H, WEEK_H)).fit().seasonal, dtype=float)
    assert seasonal.shape == (len(t), 2)
    adjusted = pd.Series(history.to_numpy() - seasonal.sum(axis=1), index=history.index)
    n = len(t)
    expected = (ets_forecast(adjusted, 30, None) + np.array([seasonal[n - DAY_H + i % DAY_H, 0] for i in range(30)])
                + np.array([seasonal[n - WEEK_H + i % WEEK_H, 1] for i in range(30)]))
    np.testing.assert_allclose(mstl_forecast(history, 30, (DAY_H, WEEK_H)), expected)


@pytest.mark.parametrize("hours", [72, 47])  # statsmodels' own seasonality test rejects from three days here
def test_theta_deseasonalises_additively_from_two_cycles(hours: int) -> None:
    history = shaped(hours)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        expected = quiet_forecast(ThetaModel(history, period=DAY_H, deseasonalize=hours >= 2 * DAY_H,
                                             method="additive").fit(), 5)
    np.testing.assert_allclose(theta_forecast(history, 5, DAY_H), expected)
    np.testing.assert_allclose(theta(history, 5), expected)


def test_the_model_lists() -> None:
    assert [(m.name, m.kind, m.fit is not None) for m in BASELINES] == [
        ("naive", "baseline", False), ("seasonal_naive", "baseline", False), ("drift", "baseline", False)]
    assert [(m.name, m.kind, m.fit is not None) for m in CANDIDATES] == [
        ("ets", "candidate", True), ("unobserved_components", "candidate", True), ("sarimax", "candidate", True),
        ("mstl", "candidate", False), ("theta", "candidate", False), ("median_ensemble", "candidate", False)]
    assert CANDIDATES[-1].members == ("ets", "unobserved_components", "sarimax", "mstl", "theta")
    history = shaped(30)
    assert list(BASELINES[1].forecast(history, 2)) == list(seasonal_naive(history, 2))


def constant(value: float) -> ModelSpec:
    return ModelSpec(f"c{value:g}", "candidate", lambda history, horizon: np.full(horizon, value))


def test_the_ensemble_takes_the_median_of_guarded_members() -> None:
    def broken(history: pd.Series, horizon: int) -> np.ndarray:
        raise ValueError("singular")

    history = hourly([0.0, 10.0, 20.0, 30.0])
    spec = ensemble("median", [constant(1.0), constant(5.0), ModelSpec("broken", "candidate", broken)], season=2)
    assert spec.name == "median" and spec.kind == "candidate" and spec.members == ("c1", "c5", "broken")
    # The broken member counts as its fallback, the seasonal naive of 2 steps: 20, 30, 20.
    assert list(spec.forecast(history, 3)) == [5.0, 5.0, 5.0]
    low = ensemble("low", [constant(1.0), ModelSpec("broken", "candidate", broken), constant(-2.0)], season=2)
    assert list(low.forecast(history, 3)) == [1.0, 1.0, 1.0]
    # Between the other two, the broken member's fallback is the median: its season is the ensemble's.
    middle = ensemble("middle", [constant(0.0), ModelSpec("broken", "candidate", broken), constant(100.0)], season=2)
    assert list(middle.forecast(history, 3)) == [20.0, 30.0, 20.0]


def test_the_guard_falls_back_to_the_seasonal_naive_on_failure_non_finite_or_absurd_forecasts() -> None:
    history = hourly([10.0, 20.0, 30.0, 40.0])  # range 30: allowed [10 - 90, 40 + 90]
    assert ABSURD_FACTOR == 3.0
    fallback = [30.0, 40.0, 30.0]

    def result(values: np.ndarray) -> tuple[list[float], bool, str]:
        found = guarded(constant(0.0), history, 3, season=2, produce=lambda: values)
        return list(found.values), found.fell_back, found.reason

    assert result(np.array([-80.0, 130.0, 0.0])) == ([-80.0, 130.0, 0.0], False, "")
    assert result(np.array([-80.5, 0.0, 0.0])) == (fallback, True, "c0: forecast outside [-80, 130]")
    assert result(np.array([0.0, 130.5, 0.0])) == (fallback, True, "c0: forecast outside [-80, 130]")
    assert result(np.array([0.0, np.nan, 0.0])) == (fallback, True, "c0: non-finite forecast")
    assert result(np.array([0.0, np.inf, 0.0])) == (fallback, True, "c0: non-finite forecast")
    assert result(np.array([0.0, 0.0])) == (fallback, True, "c0: non-finite forecast")  # the wrong length

    def raises() -> np.ndarray:
        raise RuntimeError("LU decomposition error")

    failed = guarded(constant(0.0), history, 3, season=2, produce=raises)
    assert list(failed.values) == fallback and failed.fell_back and failed.reason == "c0 failed: LU decomposition error"
    # Without `produce`, the model's own forecast from the history; a flat history still allows a span of one.
    assert list(guarded(BASELINES[2], history, 2).values) == [50.0, 60.0]  # drift, not the naive fallback
    flat = hourly([5.0, 5.0, 5.0])
    assert guarded(constant(8.0), flat, 2).fell_back is False
    assert guarded(constant(8.5), flat, 2).reason == "c8.5: forecast outside [2, 8]"
    assert list(guarded(constant(8.5), flat, 2).values) == [5.0, 5.0]  # naive: shorter than a day
    with_gap = hourly([np.nan, 0.0, 10.0])
    assert guarded(constant(40.0), with_gap, 1).fell_back is False  # gaps ignored: [-30, 40]
