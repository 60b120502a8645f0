"""The power model: the shipped curve is what the public Zeus traces give, and its use is sane."""

from __future__ import annotations

import csv

import pytest
from conftest import PUBLIC_DATA, public_data
from schedkit import node_type

from greengpu.energy.power_model import TRAINING_CURVE, Measurement, busy_gpu, fit_curve, fit_error


def zeus_rows() -> list[Measurement]:
    public_data("zeus-power-limit-traces/summary_power_a40.csv")
    rows = []
    for path in sorted((PUBLIC_DATA / "zeus-power-limit-traces").glob("summary_power_*.csv")):
        gpu = path.stem.rsplit("_", 1)[-1]
        with path.open() as handle:
            for r in csv.DictReader(handle):
                rows.append(Measurement((gpu, r["dataset"], r["network"], r["batch_size"], r["optimizer"]),
                                        float(r["power_limit"]), float(r["time_per_epoch"]),
                                        float(r["average_power"])))
    return rows


def test_shipped_curve_is_the_fit_of_the_public_traces() -> None:
    rows = zeus_rows()
    fitted = fit_curve(rows)
    assert fitted.fractions == TRAINING_CURVE.fractions
    assert fitted.time_factor == pytest.approx(TRAINING_CURVE.time_factor, abs=0.002)
    assert fitted.power_factor == pytest.approx(TRAINING_CURVE.power_factor, abs=0.002)
    error = fit_error(TRAINING_CURVE, rows)
    print(f"\npower model fit over {error['points']:.0f} Zeus points: median energy error {error['median_pct']:.1f}%, "
          f"p90 {error['p90_pct']:.1f}%")
    assert error["median_pct"] < 10


def test_curve_is_monotone_and_capping_saves_energy_near_the_knee() -> None:
    times, powers = TRAINING_CURVE.time_factor, TRAINING_CURVE.power_factor
    assert all(a >= b for a, b in zip(times, times[1:], strict=False))
    assert all(a <= b for a, b in zip(powers, powers[1:], strict=False))
    assert TRAINING_CURVE.energy_factor(0.65) < 0.9  # the efficiency knee
    assert TRAINING_CURVE.energy_factor(0.35) > 1.0  # a cap set too low costs energy (Zeus: A40 at 100 W)


def test_busy_gpu_clamps_to_the_limits_nvml_accepts() -> None:
    a100 = node_type(8)  # 100-400 W
    assert busy_gpu(a100, None) == (400, 1.0)
    # Below the minimum: clamped to 100 W (fraction 0.25, under the fitted 0.35): the GPU draws its limit
    # and takes as much energy per unit of work as at the lowest fitted point (the model does not guess
    # at savings below the data).
    power, speed = busy_gpu(a100, 10)
    assert power == 100
    assert speed == pytest.approx(0.25 / (TRAINING_CURVE.time_factor[0] * TRAINING_CURVE.power_factor[0]))
    power, speed = busy_gpu(a100, 400 * 0.65)  # 0.65 of the uncapped draw: -38% power, 22% slower
    assert power == pytest.approx(400 * 0.621) and speed == pytest.approx(1 / 1.219)


def test_a_capped_gpu_never_draws_above_its_cap() -> None:
    # Issue 41: an A100 capped at 259 W was modelled at 319.6 W (the Zeus curve's power factor 0.799 at
    # 0.65 of the highest limit, times 400 W). Against the uncapped draw, a limit of 0.65 of it leaves
    # at most 0.65 of the power.
    a100 = node_type(8)  # 100-400 W
    power, speed = busy_gpu(a100, 259)
    assert power <= 259 and speed < 1.0
    for limit_w in range(100, 401):
        assert busy_gpu(a100, limit_w)[0] <= limit_w


def _rows(workload: str, points: list[tuple[float, float, float]]) -> list[Measurement]:
    return [Measurement((workload,), limit_w, time_s, power_w) for limit_w, time_s, power_w in points]


def test_the_fit_takes_medians_per_bin_and_makes_them_monotone() -> None:
    # One workload drawing 400 W at its 400 W limit (100 s). Raw factors by fraction of that draw
    # 0.25 / 0.5 / 0.75 / 1: time 2.0333 / 0.99 / 0.98 / 1 and power 0.275 / 0.475 / 0.45 / 1. Measurement
    # noise makes the 200 W and 300 W runs look faster than the reference: less power never runs faster,
    # so both become 1.0; the 300 W power dips below the 200 W one: more power never draws less, so
    # 0.475; the 100 W run drew 110 W: a GPU never draws above its limit, so 0.25.
    rows = _rows("w", [(400, 100, 400), (300, 98, 180), (200, 99, 190), (100, 203.3333, 110)])
    curve = fit_curve(rows, bin_width=0.25)
    assert curve.fractions == (0.25, 0.5, 0.75, 1.0)
    assert curve.time_factor == (2.033, 1.0, 1.0, 1.0)
    assert curve.power_factor == (0.25, 0.475, 0.475, 1.0)


def test_the_fit_takes_the_median_over_workloads_and_caps_power_at_the_reference() -> None:
    rows = (_rows("a", [(400, 100, 400), (200, 110, 190)]) + _rows("b", [(300, 100, 300), (150, 130, 140)])
            + _rows("c", [(200, 100, 200), (100, 150, 95)]))
    # At fraction 0.5 of each one's draw: time 1.1 / 1.3 / 1.5 -> 1.3; power 0.475 / 0.467 / 0.475 -> 0.475.
    curve = fit_curve(rows, bin_width=0.25)
    assert curve.fractions == (0.5, 1.0)
    assert curve.time_factor == (1.3, 1.0) and curve.power_factor == (0.475, 1.0)
    # A point drawing more than its limit (noise above the cap) is held at the limit.
    noisy = fit_curve(_rows("w", [(400, 100, 400), (300, 101, 310)]), bin_width=0.25)
    assert noisy.power_factor == (0.75, 1.0)
    # A limit above what the workload draws uncapped does not bind: it is left out of the fit.
    loose = fit_curve(_rows("w", [(400, 100, 200), (300, 100, 200)]), bin_width=0.25)
    assert loose.fractions == (1.0,)
    # Bin keys are rounded to 4 places, so a bin width of 1/3 gives readable fractions.
    thirds = fit_curve(_rows("w", [(300, 100, 300), (200, 110, 190), (100, 200, 95)]), bin_width=1 / 3)
    assert thirds.fractions == (0.3333, 0.6667, 1.0)


def test_fit_error_is_the_relative_energy_error_in_percent() -> None:
    from greengpu.energy.power_model import PowerCurve

    curve = PowerCurve((0.5, 1.0), (1.2, 1.0), (0.6, 1.0))  # energy factor 0.72 at half the limit
    rows = _rows("a", [(400, 100, 400), (200, 120, 200)])  # measured 1.2 x 0.5 = 0.6: 20% off
    rows += _rows("b", [(400, 100, 400), (200, 100, 320)])  # measured 1.0 x 0.8 = 0.8: 10% off
    error = fit_error(curve, rows)
    assert error["points"] == 4.0
    assert error["median_pct"] == pytest.approx(5.0)  # errors 0, 0, 10, 20
    assert error["p90_pct"] == pytest.approx(10.0)  # the 90th percentile by rank: int(0.9 x 3) = 2


def test_curve_interpolates_linearly_and_clamps_to_its_range() -> None:
    from greengpu.energy.power_model import PowerCurve

    curve = PowerCurve((0.5, 0.75, 1.0), (1.4, 1.1, 1.0), (0.6, 0.8, 1.0))
    assert curve.at(0.75) == (1.1, 0.8)
    assert curve.at(0.625) == pytest.approx((1.25, 0.7))
    assert curve.at(0.5) == (1.4, 0.6) and curve.at(1.3) == (1.0, 1.0)
    # Below the range the power follows the limit and energy per unit of work stays at the lowest point's.
    assert curve.at(0.2) == pytest.approx((1.4 * 0.6 / 0.2, 0.2))
    assert curve.energy_factor(0.2) == pytest.approx(curve.energy_factor(0.5))
    assert curve.energy_factor(0.625) == pytest.approx(1.25 * 0.7)
