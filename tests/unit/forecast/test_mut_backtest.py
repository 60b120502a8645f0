"""The rolling-origin backtest's arithmetic at its edges, with cheap models whose forecasts are worked out
by hand: where origins fall, what each model sees, the notes on a short history, fallbacks and fit time
counted per origin, the ensemble built from its members' forecasts, the error bands' quantiles, their
leave-one-origin-out coverage and pinball loss, and the flags `prepare` raises."""

from __future__ import annotations

import math
import time
import warnings
from collections.abc import Callable

import numpy as np
import pandas as pd
import pytest

from greengpu.forecast.backtest import (
    Backtest,
    ModelBacktest,
    mase_scale,
    origin_positions,
    prepare,
    run_backtest,
    smape,
)
from greengpu.forecast.calibration import _conformal_quantile, calibrate, calibrate_best
from greengpu.forecast.models import ModelSpec, ensemble, naive


def hourly(values: list[float] | np.ndarray) -> pd.Series:
    return pd.Series(np.asarray(values, dtype=float),
                     index=pd.date_range("2026-05-04", periods=len(values), freq="h"))


def counting(forecast: Callable[[pd.Series, int], np.ndarray], seen: list[pd.Series]) -> Callable[..., np.ndarray]:
    def recorded(history: pd.Series, horizon: int) -> np.ndarray:
        seen.append(history)
        return forecast(history, horizon)
    return recorded


# --- where origins fall ---------------------------------------------------------------------------

def test_one_origin_is_the_last_cut_with_or_without_spacing() -> None:
    # 20 days, a day's horizon, a week of training: the last cut leaves exactly one day to test.
    assert origin_positions(20 * 24, 24, 1, 7 * 24, spacing=24) == [19 * 24]
    assert origin_positions(100, 10, 1, 50, spacing=None) == [90]
    # Two, evenly spread: the first and the last.
    assert origin_positions(100, 10, 2, 50, spacing=None) == [50, 90]
    assert origin_positions(17 * 24, 24, 2, 7 * 24, spacing=24) == [7 * 24, 16 * 24]


def test_thinning_keeps_the_first_and_the_last_and_spreads_the_rest_evenly() -> None:
    # Ten daily cuts from 168 to 384; four of them: positions 0, 3, 6 and 9 of the ten.
    assert origin_positions(408, 24, 4, 168, spacing=24) == [168, 240, 312, 384]


def test_a_history_exactly_one_training_window_and_one_horizon_long_has_one_origin() -> None:
    assert origin_positions(48, 24, None, 24, spacing=24) == [24]
    assert origin_positions(47, 24, None, 24, spacing=24) == []


def test_no_origin_trains_on_less_than_the_minimum() -> None:
    # Hourly cuts from 20 to 35: sixteen of them, none before hour 20.
    assert origin_positions(40, 5, None, 20, spacing=1) == list(range(20, 36))


# --- metrics ----------------------------------------------------------------------------------------

def test_the_mase_scale_of_two_points_is_their_step() -> None:
    assert mase_scale(np.array([1.0, 4.0]), season=24) == 3.0
    assert mase_scale(np.array([5.0]), season=24) == 1e-9  # nothing to scale by: the floor


def test_smape_below_one_and_at_zero() -> None:
    assert smape(np.array([0.2]), np.array([0.1])) == pytest.approx(2 * 0.1 / 0.3 * 100)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert smape(np.array([0.0, 1.0]), np.array([0.0, 3.0])) == pytest.approx((0 + 2 * 2 / 4 * 100) / 2)


# --- what each model sees, scores and notes ----------------------------------------------------------

def test_candidates_see_a_trailing_window_and_baselines_the_whole_history() -> None:
    candidate_seen: list[pd.Series] = []
    baseline_seen: list[pd.Series] = []
    models = [ModelSpec("base", "baseline", counting(naive, baseline_seen)),
              ModelSpec("cand", "candidate", counting(naive, candidate_seen))]
    series = hourly(list(range(12)))
    run_backtest(series, horizon_h=2, min_train_h=5, models=models, season=2, candidate_window=6, spacing=1)
    cuts = [5, 6, 7, 8, 9, 10]
    assert [len(h) for h in baseline_seen] == cuts
    assert [h.iloc[0] for h in baseline_seen] == [0.0] * 6
    assert [len(h) for h in candidate_seen] == [5, 6, 6, 6, 6, 6]
    assert [h.iloc[0] for h in candidate_seen] == [0.0, 0.0, 1.0, 2.0, 3.0, 4.0]
    assert [h.iloc[-1] for h in candidate_seen] == [c - 1.0 for c in cuts]
    candidate_seen.clear()
    run_backtest(series, horizon_h=2, min_train_h=5, models=models, season=2, candidate_window=None, spacing=1)
    assert [len(h) for h in candidate_seen] == cuts


def test_scores_per_origin_by_hand() -> None:
    # Values 1, 2, 3, ...: naive one step ahead misses by 1; the MASE scale (season 2) is 2 everywhere;
    # sMAPE at cut c is 2 x 1 / (c + (c + 1)) x 100.
    series = hourly([float(v) for v in range(1, 13)])
    result = run_backtest(series, horizon_h=1, min_train_h=5, models=[ModelSpec("naive", "baseline", naive)],
                          season=2, spacing=1)
    cuts = list(result.origins)
    assert cuts == [5, 6, 7, 8, 9, 10, 11]
    scored = result.models["naive"]
    assert scored.per_origin_mase == pytest.approx((0.5,) * 7)
    assert scored.smape == pytest.approx(np.mean([200.0 / (2 * c + 1) for c in cuts]))
    assert result.horizon_h == 1
    assert scored.fallbacks == 0


def test_a_history_too_short_for_any_origin_gives_empty_results_quietly() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        result = run_backtest(hourly([1.0] * 10), horizon_h=24, min_train_h=48,
                              models=[ModelSpec("naive", "baseline", naive)])
    assert result.origins == () and result.actuals.shape == (0, 24)
    scored = result.models["naive"]
    assert math.isnan(scored.mase) and math.isnan(scored.smape)
    assert scored.forecasts.shape == (0, 24) and scored.per_origin_mase == ()
    assert result.notes == ["only 0 origins: the history is short for a 24-step horizon"]


def test_notes_on_a_short_history() -> None:
    model = [ModelSpec("naive", "baseline", naive)]
    # 15 days: 8 daily origins fit after the first week, so 30 closer together are backtested instead.
    result = run_backtest(hourly(np.arange(15 * 24)), models=model)
    assert len(result.origins) == 30
    assert result.notes == ["only 8 origins 24 steps apart: the history is short, so 30 origins closer together "
                            "(and overlapping) were backtested"]
    # The same history with the count asked for: no note, the caller chose it.
    assert run_backtest(hourly(np.arange(15 * 24)), origins=12, models=model).notes == []
    # 17 days: exactly ten daily origins, enough; no note.
    result = run_backtest(hourly(np.arange(17 * 24)), models=model)
    assert len(result.origins) == 10 and result.notes == []
    # Three origins asked for.
    result = run_backtest(hourly(np.arange(17 * 24)), origins=3, models=model)
    assert result.notes == ["only 3 origins: the history is short for a 24-step horizon"]
    # Without spacing, the origins are spread evenly and nothing is said about days.
    result = run_backtest(hourly(np.arange(17 * 24)), origins=12, models=model, spacing=None)
    assert len(result.origins) == 12 and result.notes == []


def failing_on(bad_cuts: set[int]) -> Callable[[pd.Series, int], np.ndarray]:
    def forecast(history: pd.Series, horizon: int) -> np.ndarray:
        if len(history) in bad_cuts:
            raise RuntimeError("no fit")
        return naive(history, horizon)
    return forecast


def test_a_failing_model_falls_back_to_the_seasonal_naive_of_the_backtests_season() -> None:
    # Values equal their hour; season 3: the fallback repeats the last three hours, so from cut c it
    # forecasts c - 3, c - 2.
    series = hourly(list(range(40)))
    spec = ModelSpec("flaky", "baseline", failing_on({30, 31}))
    result = run_backtest(series, horizon_h=2, min_train_h=30, models=[spec], season=3, spacing=1)
    assert list(result.origins) == list(range(30, 39))
    forecasts = result.models["flaky"].forecasts
    assert forecasts[0].tolist() == [27.0, 28.0] and forecasts[1].tolist() == [28.0, 29.0]
    assert forecasts[2].tolist() == [31.0, 31.0]  # naive from cut 32 on
    assert result.models["flaky"].fallbacks == 2


class KeptFit:
    """A state-space stand-in: its forecast is the last value it was filtered over."""

    def __init__(self, history: pd.Series, log: list[str], extend_fails: bool, absurd: bool) -> None:
        self.last = float(history.iloc[-1])
        self.log, self.extend_fails, self.absurd = log, extend_fails, absurd

    def forecast(self, horizon: int) -> np.ndarray:
        return np.full(horizon, 1e12 if self.absurd else self.last)

    def extend(self, history: pd.Series) -> KeptFit:
        self.log.append("extend")
        if self.extend_fails:
            raise ValueError("parameters do not filter this window")
        return KeptFit(history, self.log, self.extend_fails, self.absurd)


def kept_spec(log: list[str], extend_fails: bool = False, absurd: bool = False, fit_fails: bool = False) -> ModelSpec:
    def fit(history: pd.Series) -> KeptFit:
        log.append("fit")
        if fit_fails:
            raise RuntimeError("no convergence")
        return KeptFit(history, log, extend_fails, absurd)
    return ModelSpec("kept", "candidate", naive, fit=fit)


def test_kept_parameters_that_cannot_filter_the_new_window_are_estimated_afresh() -> None:
    log: list[str] = []
    series = hourly(list(range(40)))
    result = run_backtest(series, horizon_h=2, min_train_h=35, models=[kept_spec(log, extend_fails=True)],
                          season=3, candidate_window=None, spacing=1)
    assert len(result.origins) == 4
    assert log == ["fit", "extend", "fit", "extend", "fit", "extend", "fit"]
    assert result.models["kept"].fallbacks == 0
    assert [row[0] for row in result.models["kept"].forecasts] == [34.0, 35.0, 36.0, 37.0]


def test_an_absurd_forecast_is_not_kept_for_the_next_origin() -> None:
    log: list[str] = []
    result = run_backtest(hourly(list(range(40))), horizon_h=2, min_train_h=35, models=[kept_spec(log, absurd=True)],
                          season=3, candidate_window=None, spacing=1)
    assert log == ["fit"] * 4  # each origin fell back, so the next one estimates afresh
    assert result.models["kept"].fallbacks == 4
    assert result.models["kept"].forecasts[0].tolist() == [32.0, 33.0]  # seasonal naive, season 3, from 35


def test_a_fit_that_fails_falls_back_and_keeps_nothing() -> None:
    log: list[str] = []
    result = run_backtest(hourly(list(range(40))), horizon_h=2, min_train_h=35,
                          models=[kept_spec(log, fit_fails=True)], season=3, candidate_window=None, spacing=1)
    assert log == ["fit"] * 4 and result.models["kept"].fallbacks == 4
    assert result.models["kept"].forecasts[-1].tolist() == [35.0, 36.0]  # from cut 38


def sleepy(delay_s: float) -> Callable[[pd.Series, int], np.ndarray]:
    def forecast(history: pd.Series, horizon: int) -> np.ndarray:
        time.sleep(delay_s)
        return naive(history, horizon)
    return forecast


def test_fit_time_is_the_mean_per_origin() -> None:
    spec = ModelSpec("slow", "baseline", sleepy(0.02))
    started = time.perf_counter()
    result = run_backtest(hourly(list(range(40))), horizon_h=2, min_train_h=35, models=[spec], spacing=1)
    wall_s = time.perf_counter() - started
    assert len(result.origins) == 4
    fit_s = result.models["slow"].fit_s
    assert 0.02 <= fit_s <= wall_s / 4  # each origin sleeps 0.02 s; the four together fit in the wall time
    one = run_backtest(hourly(list(range(40))), horizon_h=2, min_train_h=38, models=[spec], spacing=1)
    assert len(one.origins) == 1 and one.models["slow"].fit_s >= 0.02


def test_the_ensemble_is_built_from_its_members_forecasts_whatever_the_order() -> None:
    calls: list[pd.Series] = []
    low = ModelSpec("low", "candidate", counting(lambda h, n: np.full(n, 1.0), calls))
    high = ModelSpec("high", "candidate", counting(lambda h, n: np.full(n, 3.0), calls))
    both = ensemble("both", [low, high], 3)
    series = hourly([2.0] * 40)
    for models in ([both, low, high], [low, high, both]):
        calls.clear()
        result = run_backtest(series, horizon_h=2, min_train_h=35, models=models, season=3, spacing=1)
        assert len(calls) == 2 * 4  # each member once per origin: the ensemble reuses their forecasts
        made = result.models["both"]
        assert made.forecasts.tolist() == [[2.0, 2.0]] * 4
        assert made.fallbacks == 0
        assert made.fit_s == result.models["low"].fit_s + result.models["high"].fit_s


# --- error bands ------------------------------------------------------------------------------------

def backtest_with_errors(errors: np.ndarray) -> Backtest:
    """A backtest whose one model's errors (actual - forecast) are `errors`, shape (origins, horizon)."""
    origins, horizon = errors.shape
    model = ModelBacktest("m", "candidate", 0.0, 0.0, (), np.zeros((origins, horizon)), 0, 0.0)
    return Backtest(tuple(range(origins)), horizon, np.asarray(errors, dtype=float), {"m": model})


def test_bands_from_24_origins_take_the_conformal_ranks() -> None:
    errors = np.array([[float(e)] for e in (7, 3, 19, 24, 1, 12, 5, 22, 9, 16, 2, 20,
                                             11, 14, 6, 23, 8, 17, 4, 13, 10, 21, 15, 18)])
    calibration = calibrate(backtest_with_errors(errors), "m", levels=(0.8, 0.95))
    # 80%: upper at q = 0.9, the ceil(25 x 0.9) = 23rd smallest; lower, mirrored, the 23rd largest.
    assert calibration.upper[0.8].tolist() == [23.0] and calibration.lower[0.8].tolist() == [2.0]
    # 95%: ceil(25 x 0.975) = 25 > 24, so the largest and the smallest.
    assert calibration.upper[0.95].tolist() == [24.0] and calibration.lower[0.95].tolist() == [1.0]
    # Pinball loss of the 95% upper band, each origin against the band of the other 23 (their largest:
    # ceil(24 x 0.975) = 24 > 23): origins 1..23 sit under 24 by 24 - e, at 0.025 each; origin 24 sits
    # 1 over 23, at 0.975. (0.025 x 276 + 0.975) / 24.
    assert calibration.pinball_upper == pytest.approx(7.875 / 24)
    reordered = calibrate(backtest_with_errors(errors), "m", levels=(0.95, 0.8))
    assert reordered.pinball_upper == pytest.approx(7.875 / 24)


def test_a_constant_error_is_covered_at_the_bands_edge() -> None:
    calibration = calibrate(backtest_with_errors(np.full((3, 4), 1.5)), "m")
    assert calibration.coverage == {0.8: 1.0, 0.95: 1.0}
    two = calibrate(backtest_with_errors(np.full((2, 4), 1.5)), "m")
    assert two.coverage == {0.8: 1.0, 0.95: 1.0}


def test_one_origin_gives_bands_but_no_coverage_quietly() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        calibration = calibrate(backtest_with_errors(np.array([[0.0, 10.0, 20.0, 30.0, 40.0, 50.0]])), "m")
    # Steps within two of each other are pooled: the window's largest above, its smallest below.
    assert calibration.upper[0.8].tolist() == [20.0, 30.0, 40.0, 50.0, 50.0, 50.0]
    assert calibration.lower[0.8].tolist() == [0.0, 0.0, 0.0, 10.0, 20.0, 30.0]
    assert math.isnan(calibration.coverage[0.8]) and math.isnan(calibration.coverage[0.95])
    assert math.isnan(calibration.pinball_upper)


def backtest_around(levels: list[float], actual_of: Callable[[float, int], float]) -> Backtest:
    """One-step forecasts equal to `levels`, and the actuals `actual_of(level, origin)` makes of them."""
    forecasts = np.array([[level] for level in levels])
    actuals = np.array([[actual_of(level, i)] for i, level in enumerate(levels)])
    model = ModelBacktest("m", "candidate", 0.0, 0.0, (), forecasts, 0, 0.0)
    return Backtest(tuple(range(len(levels))), 1, actuals, {"m": model})


RATIOS = (0.8, 0.9, 1.0, 1.1, 1.25)


def test_errors_that_grow_with_the_level_are_banded_on_the_log_scale() -> None:
    # Demand 100 or 1,000 GPUs, missed by the same ratios at both levels: 20% down to 25% up.
    levels = [100.0, 1000.0] * 20
    backtest = backtest_around(levels, lambda level, i: level * RATIOS[(i // 2) % 5])
    additive = calibrate(backtest, "m", scale="additive")
    best = calibrate_best(backtest, "m")
    assert best.scale == "log1p" and set(best.compared) == {"additive", "sqrt", "log1p"}
    assert best.interval_score == min(best.compared.values()) < best.compared["additive"]
    assert additive.interval_score == best.compared["additive"]
    # In GPUs, drawn around 100: the additive band borrows the misses at 1,000 (200 down) and reaches below
    # zero; on the log scale it is the ratios' own, of 1 + GPUs: the 95% band takes the widest of the 40 (the
    # conformal rank ceil(41 x 0.975) = 40), which the misses at 1,000 give: 801 / 1,001 and 1,251 / 1,001.
    low, high = additive.band(np.array([100.0]), 0.95)
    assert low[0] == 100.0 - 200.0 and high[0] == 100.0 + 250.0
    low, high = best.band(np.array([100.0]), 0.95)
    assert low[0] == pytest.approx(101 * 801 / 1001 - 1) and high[0] == pytest.approx(101 * 1251 / 1001 - 1)


def test_errors_of_the_same_size_at_every_level_stay_additive() -> None:
    levels = [100.0, 1000.0] * 20
    backtest = backtest_around(levels, lambda level, i: level + (-20.0, -10.0, 0.0, 10.0, 25.0)[(i // 2) % 5])
    best = calibrate_best(backtest, "m")
    assert best.scale == "additive"
    low, high = best.band(np.array([500.0]), 0.95)
    assert (low[0], high[0]) == (480.0, 525.0)
    with pytest.raises(ValueError, match="scale must be one of"):
        calibrate(backtest, "m", scale="cube")


def test_the_median_is_the_upper_rule_at_one_half() -> None:
    # q = 0.5 takes the ceil((n + 1) / 2)-th smallest: the 3rd of four, not the mirror's 2nd.
    assert _conformal_quantile(np.array([4.0, 1.0, 3.0, 2.0]), 0.5) == 3.0


# --- prepare ----------------------------------------------------------------------------------------

def test_the_ceiling_flag_counts_only_hours_at_the_ceiling() -> None:
    # 1 hour in 40 at the maximum, 4 just under it: 2.5% at the ceiling, no flag.
    values = [50.0] * 35 + [99.5] * 4 + [100.0]
    assert prepare(hourly(values)).flags == ()


def test_an_idle_series_has_no_ceiling_and_a_fractional_one_does() -> None:
    assert prepare(hourly([0.0] * 48)).flags == ()
    flags = prepare(hourly([0.5, 0.25] * 24)).flags
    assert flags == ("demand sits at its ceiling (0.5) 50% of the time: it may be capped by capacity or quota, "
                     "so the forecast understates demand",)


def test_no_origins_give_zero_bands_and_no_coverage() -> None:
    calibration = calibrate(backtest_with_errors(np.zeros((0, 3))), "m")
    assert calibration.lower[0.8].tolist() == [0.0] * 3 and calibration.upper[0.95].tolist() == [0.0] * 3
    assert math.isnan(calibration.coverage[0.8]) and math.isnan(calibration.pinball_upper)


def test_past_half_a_year_of_days_the_last_half_year_is_backtested_and_the_notes_say_so() -> None:
    model = [ModelSpec("naive", "baseline", naive)]
    # 400 days, a week of training: (400 x 24 - 24 - 168) // 24 + 1 = 393 daily origins; the last 182 run.
    result = run_backtest(hourly(np.arange(400 * 24)), models=model)
    assert len(result.origins) == 182 and result.origins[-1] == 400 * 24 - 24
    assert result.origins[0] == 400 * 24 - 24 - 181 * 24
    assert result.notes == ["182 origins backtested, the last 182 of the 393 the history holds (at most 182 by "
                            "default; --origins asks for another count)"]
    assert len(run_backtest(hourly(np.arange(400 * 24)), origins=393, models=model).origins) == 393


def test_the_fits_run_with_one_blas_thread_even_in_libraries_loaded_later() -> None:
    import ast
    import os
    import subprocess
    import sys

    # A fresh interpreter where OpenBLAS would use four threads: numpy's loaded before the limit, scipy's
    # (which statsmodels' fits use) only by the first fit, after it.
    script = ("import numpy\nfrom threadpoolctl import threadpool_info\n"
              "from greengpu.forecast.blas import one_blas_thread\n"
              "with one_blas_thread():\n"
              "    import statsmodels.tsa.statespace.sarimax\n"
              "    blas = [i for i in threadpool_info() if i['user_api'] == 'blas']\n"
              "    print(sorted({(i['filepath'], i['num_threads']) for i in blas}))\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=True,
                          env={**os.environ, "OPENBLAS_NUM_THREADS": "4"})
    libraries = ast.literal_eval(done.stdout)  # the (path, threads) pairs printed above
    assert len(libraries) >= 1 and {threads for _, threads in libraries} == {1}
