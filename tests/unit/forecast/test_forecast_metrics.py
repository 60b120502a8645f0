"""The forecast error metrics by hand: sMAPE and the pinball loss."""

from __future__ import annotations

import numpy as np
import pytest

from greengpu.forecast.backtest import pinball, smape


def test_pinball_weighs_misses_above_by_tau_and_below_by_one_minus_tau() -> None:
    actual = np.array([10.0, 10.0, 10.0])
    forecast = np.array([8.0, 10.0, 14.0])  # 2 under, exact, 4 over
    assert pinball(actual, forecast, 0.9) == pytest.approx((0.9 * 2 + 0 + 0.1 * 4) / 3)
    assert pinball(actual, forecast, 0.5) == pytest.approx((1.0 + 0 + 2.0) / 3)
    assert pinball(np.array([3.0]), np.array([-5.0]), 0.25) == pytest.approx(0.25 * 8)


def test_smape_is_symmetric_in_percent_and_zero_over_zero_is_no_error() -> None:
    assert smape(np.array([100.0]), np.array([50.0])) == pytest.approx(200 * 50 / 150)
    assert smape(np.array([50.0]), np.array([100.0])) == pytest.approx(200 * 50 / 150)
    assert smape(np.array([0.0, 10.0]), np.array([0.0, 10.0])) == 0.0
    assert smape(np.array([0.0]), np.array([4.0])) == pytest.approx(200.0)


def test_prepare_fills_holes_and_flags_demand_held_at_a_ceiling() -> None:
    import pandas as pd

    from greengpu.forecast.backtest import prepare

    index = pd.date_range("2026-01-05", periods=100, freq="h")
    # 5 hours of 100 at the capacity of 100, the rest at 40: 5% of the time at the ceiling.
    values = [100.0] * 5 + [40.0] * 95
    flagged = prepare(pd.Series(values, index=index), capacity=100.0)
    assert flagged.flags == ("demand sits at its ceiling (100) 5% of the time: it may be capped by capacity or "
                             "quota, so the forecast understates demand",)
    assert prepare(pd.Series([100.0] * 4 + [40.0] * 96, index=index), capacity=100.0).flags == ()  # 4%: not flagged
    # Without a capacity the ceiling is the series' own maximum.
    assert prepare(pd.Series(values, index=index)).flags[0].startswith("demand sits at its ceiling (100) 5%")
    assert prepare(pd.Series(values, index=index), capacity=120.0).flags == ()
    holes = pd.Series([10.0, 20.0, 40.0], index=index[[0, 1, 3]])
    filled = prepare(holes)
    assert list(filled.series) == [10.0, 20.0, 30.0, 40.0] and filled.series.index.freqstr == "h"
    assert filled.flags[0] == "1 missing hours filled by interpolation"
