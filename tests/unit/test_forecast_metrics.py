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
