"""The backtest's arithmetic against values worked out by hand: the MASE scale and the conformal rank.

Only the public functions are used (`mase_scale`, `run_backtest`, `conformal_upper`), so these tests
pin what the numbers must be, whatever the code around them becomes:
- the MASE of an origin is scaled by the in-sample seasonal naive error of that origin's training
  part only; scaling by the whole series would let the future leak into the score;
- the split-conformal upper quantile of n samples at level L is the ceil((n + 1) L)-th smallest (the
  largest when that rank passes n), which is what makes a new sample fall under it with probability
  at least L.
"""

from __future__ import annotations

import random

import numpy as np
import pandas as pd
import pytest

from greengpu.forecast.backtest import mase_scale, run_backtest
from greengpu.forecast.calibration import conformal_upper
from greengpu.forecast.models import ModelSpec

# --------------------------------------------------------------------------- MASE scale


def test_mase_scale_is_the_mean_absolute_seasonal_difference() -> None:
    # season 2: |4-1|, |8-2|, |16-4| = 3, 6, 12, mean 7
    assert mase_scale(np.array([1.0, 2.0, 4.0, 8.0, 16.0]), season=2) == 7.0
    # season 1 is the naive one-step error: |3-1|, |2-3|, |6-2| = 2, 1, 4
    assert mase_scale(np.array([1.0, 3.0, 2.0, 6.0]), season=1) == pytest.approx(7.0 / 3.0)


def test_mase_scale_of_a_series_shorter_than_a_season_falls_back_to_one_step_differences() -> None:
    assert mase_scale(np.array([5.0, 2.0, 6.0]), season=24) == 3.5  # |2-5|, |6-2|
    assert mase_scale(np.array([5.0, 2.0, 6.0]), season=3) == 3.5  # exactly one season long: still too short


def test_mase_scale_never_divides_by_zero() -> None:
    assert mase_scale(np.array([7.0]), season=24) == 1e-9
    assert mase_scale(np.full(50, 3.0), season=24) == 1e-9
    assert mase_scale(np.array([]), season=24) == 1e-9


def _zero_forecast(history: pd.Series, horizon: int) -> np.ndarray:
    return np.zeros(horizon)


def test_each_origin_is_scaled_by_its_own_training_part_only() -> None:
    # Slope 1 for twelve hours, then a steep rise: the season-2 error is 2 in the first part and
    # far larger later. An origin cut early must not see the later steepness in its scale.
    values = [float(i) for i in range(12)] + [11.0 + (i - 11) ** 2 for i in range(12, 24)]
    series = pd.Series(values, index=pd.date_range("2026-01-05", periods=24, freq="h"))
    zero = ModelSpec("zero", "baseline", _zero_forecast)
    result = run_backtest(series, horizon_h=4, origins=3, min_train_h=8, models=[zero], season=2)
    cuts = result.origins
    assert len(cuts) == 3 and cuts[0] == 8 and cuts[-1] == 20
    expected = []
    for cut, actual in zip(cuts, result.actuals, strict=True):
        assert list(actual) == values[cut:cut + 4]
        train = values[:cut]
        scale = sum(abs(train[i] - train[i - 2]) for i in range(2, cut)) / (cut - 2)
        expected.append(sum(values[cut:cut + 4]) / 4 / scale)  # the zero forecast's error is the actual
    # The first origin by hand: actual 8, 9, 10, 11 (mean 9.5), training 0..7 (season-2 error 2).
    assert expected[0] == 9.5 / 2
    assert result.models["zero"].per_origin_mase == pytest.approx(tuple(expected), rel=1e-12)
    assert result.models["zero"].mase == pytest.approx(sum(expected) / 3, rel=1e-12)


# --------------------------------------------------------------------------- conformal rank


@pytest.mark.parametrize(("n", "level", "rank"), [
    (10, 0.8, 9),    # ceil(11 x 0.8) = ceil(8.8); without the +1 it would be the 8th
    (20, 0.95, 20),  # ceil(21 x 0.95) = ceil(19.95); without the +1, the 19th
    (12, 0.8, 11),   # ceil(13 x 0.8) = ceil(10.4); without the +1, ceil(9.6) = 10
    (5, 0.95, 5),    # ceil(6 x 0.95) = 6 > 5: the largest
    (3, 0.5, 2),     # ceil(4 x 0.5) = 2
])
def test_conformal_upper_takes_the_ceil_n_plus_one_times_level_th_smallest(n: int, level: float, rank: int) -> None:
    values = [float(v) for v in range(1, n + 1)]
    random.Random(n).shuffle(values)  # the order samples arrive in does not matter
    assert conformal_upper(values, level) == float(rank)
    assert conformal_upper(np.array(values).reshape(1, n), level) == float(rank)  # any shape, flattened


def test_conformal_upper_of_no_samples_is_zero() -> None:
    assert conformal_upper([], 0.95) == 0.0


def test_a_new_sample_falls_under_the_conformal_upper_at_least_level_of_the_time() -> None:
    # Exchangeable draws: with 10 samples at 80%, the 9th smallest of 10 covers a fresh draw with
    # probability exactly 9/11 = 0.818; the 8th (the rank without +1) only 8/11 = 0.727.
    rng = np.random.default_rng(2026)
    trials = 8000
    draws = rng.normal(size=(trials, 11))
    covered = sum(draws[i, 10] <= conformal_upper(draws[i, :10], 0.8) for i in range(trials))
    rate = covered / trials
    assert 0.8 <= rate <= 0.84, rate
