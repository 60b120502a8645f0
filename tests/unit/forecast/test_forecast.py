"""Forecasting: a known trend and seasonality is recovered, a flat series ships a baseline, gaps and a
capacity ceiling are handled and flagged, calibrated bands cover, Erlang C matches published values."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from greengpu.forecast.backtest import origin_positions, prepare, run_backtest
from greengpu.forecast.calibration import calibrate
from greengpu.forecast.capacity import erlang_c, gpus_needed, servers_for_wait
from greengpu.forecast.gate import choose
from greengpu.forecast.models import BASELINES, CANDIDATES, GuardedForecast, ModelSpec, guarded

UC = next(m for m in CANDIDATES if m.name == "unobserved_components")


def synthetic(days: int = 21, noise: float = 3.0, seed: int = 1) -> pd.Series:
    rng = np.random.default_rng(seed)
    index = pd.date_range("2026-01-05", periods=days * 24, freq="h")
    t = np.arange(len(index))
    values = 100 + 0.05 * t + 20 * np.sin(2 * np.pi * t / 24) + 8 * np.sin(2 * np.pi * t / 168)
    return pd.Series(values + rng.normal(0, noise, len(t)), index=index)


def test_known_trend_and_seasonality_are_recovered_and_ship() -> None:
    backtest = run_backtest(prepare(synthetic()).series, horizon_h=24, origins=10, models=BASELINES + (UC,))
    assert len(backtest.origins) == 10
    uc = backtest.models["unobserved_components"]
    assert uc.fallbacks == 0
    assert uc.mase < 0.7 * backtest.models["seasonal_naive"].mase
    choice = choose(backtest)
    assert choice.shipped_candidate and choice.model == "unobserved_components"
    assert choice.wins >= 5 and "ships" in choice.reason
    # Its forecasts follow the truth: mean absolute error near the noise level (3), far below the swing (2 x 28).
    assert float(np.mean(np.abs(backtest.actuals - uc.forecasts))) < 6.0


def test_a_flat_series_ships_a_baseline() -> None:
    index = pd.date_range("2026-01-05", periods=14 * 24, freq="h")
    flat = pd.Series(np.full(len(index), 48.0), index=index)
    choice = choose(run_backtest(flat, origins=10, models=BASELINES + (UC,)))
    assert not choice.shipped_candidate and choice.model in ("naive", "seasonal_naive", "drift")
    assert choice.reason.startswith("shipping the baseline")


def test_gaps_are_filled_and_a_capacity_ceiling_is_flagged() -> None:
    series = synthetic(days=14)
    holey = series.drop(series.index[100:110])
    prepared = prepare(holey)
    assert len(prepared.series) == len(series) and not prepared.series.isna().any()
    assert prepared.flags == ("10 missing hours filled by interpolation",)
    capped = prepare(series.clip(upper=110.0), capacity=110.0)
    assert any("ceiling (110)" in flag and "understates demand" in flag for flag in capped.flags)


def test_a_model_that_blows_up_falls_back_to_the_seasonal_baseline() -> None:
    series = synthetic(days=8)
    exploding = ModelSpec("exploding", "candidate", lambda history, h: np.full(h, 1e12))
    failing = ModelSpec("failing", "candidate", lambda history, h: np.linalg.inv(np.zeros((2, 2))))
    for spec, reason in ((exploding, "outside"), (failing, "failed")):
        result: GuardedForecast = guarded(spec, series, 24)
        assert result.fell_back and reason in result.reason
        assert np.allclose(result.values, series.to_numpy()[-24:])


def test_calibrated_bands_cover_near_nominal() -> None:
    # Baselines only (fast): seasonal naive errors on a noisy seasonal series, 30 origins.
    backtest = run_backtest(synthetic(days=40, noise=6.0, seed=3), origins=30, models=BASELINES)
    calibration = calibrate(backtest, "seasonal_naive")
    assert abs(calibration.coverage[0.8] - 0.8) <= 0.05
    assert abs(calibration.coverage[0.95] - 0.95) <= 0.05
    assert np.all(calibration.upper[0.95] >= calibration.upper[0.8])
    assert calibration.pinball_upper > 0


def test_origins_are_spread_over_an_expanding_window() -> None:
    cuts = origin_positions(length=400, horizon_h=24, count=10, min_train_h=168)
    assert cuts == [168, 191, 214, 237, 260, 284, 307, 330, 353, 376]
    assert cuts[-1] + 24 == 400  # the last origin's test window ends with the history
    assert origin_positions(length=150, horizon_h=24, count=10, min_train_h=168) == []


def test_erlang_c_matches_published_values() -> None:
    assert erlang_c(3, 2.0) == pytest.approx(4 / 9)  # the textbook M/M/3 at 2 Erlangs
    assert erlang_c(2, 1.0) == pytest.approx(1 / 3)
    assert erlang_c(4, 4.0) == 1.0 and erlang_c(4, 0.0) == 0.0
    # Pooling (a known property of Erlang C): utilisation at P(wait) <= 10% for 8, 100 and 1,000 busy GPUs.
    assert [round(a / servers_for_wait(a, 0.10), 2) for a in (8, 100, 1000)] == [0.62, 0.87, 0.96]
    assert gpus_needed(130, 0.65, redundancy_gpus=8) == 208


def test_trace_demand_is_the_exact_hourly_mean_of_offered_gpus() -> None:
    from schedkit import job

    from greengpu.forecast.demand import demand_from_history, demand_from_jobs

    series = demand_from_jobs([job("a", gpus=2, duration_s=5400, submit_time_s=1800),
                               job("b", gpus=1, duration_s=600, submit_time_s=7300),
                               job("c", gpus=4, duration_s=3 * 3600, submit_time_s=0)])
    assert list(series.round(4)) == [5.0, 6.0, 4.1667, 0.0]
    assert str(series.index.freq) == "<Hour>"
    history = pd.DataFrame({"time": ["2026-01-01T00:10:00Z", "2026-01-01T00:40:00Z", "2026-01-01T00:40:00Z"],
                            "gpus_busy": [4, 6, 2], "gpus_pending": [1, 0, 0], "tenant": ["a", "a", "b"]})
    assert list(demand_from_history(history)) == [6.5]  # (4+1) and (6+2) averaged over the hour
