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
    power, speed = busy_gpu(a100, 10)  # below the minimum: clamped to 100 W (fraction 0.25 -> 0.35 end)
    assert power == pytest.approx(400 * TRAINING_CURVE.power_factor[0])
    assert speed == pytest.approx(1 / TRAINING_CURVE.time_factor[0])
    power, speed = busy_gpu(a100, 260)
    assert 0.75 * 400 < power < 0.85 * 400 and 0.95 < speed < 1.0  # the knee: -20% power, -5% speed


def _rows(workload: str, points: list[tuple[float, float, float]]) -> list[Measurement]:
    return [Measurement((workload,), limit_w, time_s, power_w) for limit_w, time_s, power_w in points]


def test_the_fit_takes_medians_per_bin_and_makes_them_monotone() -> None:
    # One workload, reference 400 W (100 s, 300 W). Raw factors by fraction 0.25 / 0.5 / 0.75 / 1:
    # time 2.0333 / 0.99 / 0.98 / 1 and power 0.5017 / 0.8333 / 0.8 / 1. Measurement noise makes the
    # 200 W and 300 W runs look faster than the reference: less power never runs faster, so both
    # become 1.0; the 300 W power dips below the 200 W one: more power never draws less, so 0.833.
    rows = _rows("w", [(400, 100, 300), (300, 98, 240), (200, 99, 250), (100, 203.3333, 150.5)])
    curve = fit_curve(rows, bin_width=0.25)
    assert curve.fractions == (0.25, 0.5, 0.75, 1.0)
    assert curve.time_factor == (2.033, 1.0, 1.0, 1.0)
    assert curve.power_factor == (0.502, 0.833, 0.833, 1.0)


def test_the_fit_takes_the_median_over_workloads_and_caps_power_at_the_reference() -> None:
    rows = (_rows("a", [(400, 100, 300), (200, 110, 150)]) + _rows("b", [(300, 100, 200), (150, 130, 110)])
            + _rows("c", [(200, 100, 100), (100, 150, 55)]))
    # At fraction 0.5: time 1.1 / 1.3 / 1.5 -> 1.3; power 0.5 / 0.55 / 0.55 -> 0.55.
    curve = fit_curve(rows, bin_width=0.25)
    assert curve.fractions == (0.5, 1.0)
    assert curve.time_factor == (1.3, 1.0) and curve.power_factor == (0.55, 1.0)
    # A point drawing more than the reference (noise above the cap) is held at the reference's power.
    noisy = fit_curve(_rows("w", [(400, 100, 300), (300, 101, 310)]), bin_width=0.25)
    assert noisy.power_factor == (1.0, 1.0)
    # Bin keys are rounded to 4 places, so a bin width of 1/3 gives readable fractions.
    thirds = fit_curve(_rows("w", [(300, 100, 300), (200, 110, 250), (100, 200, 150)]), bin_width=1 / 3)
    assert thirds.fractions == (0.3333, 0.6667, 1.0)


def test_fit_error_is_the_relative_energy_error_in_percent() -> None:
    from greengpu.energy.power_model import PowerCurve

    curve = PowerCurve((0.5, 1.0), (1.2, 1.0), (0.6, 1.0))  # energy factor 0.72 at half the limit
    rows = _rows("a", [(400, 100, 300), (200, 120, 150)])  # measured 1.2 x 0.5 = 0.6: 20% off
    rows += _rows("b", [(400, 100, 300), (200, 100, 240)])  # measured 1.0 x 0.8 = 0.8: 10% off
    error = fit_error(curve, rows)
    assert error["points"] == 4.0
    assert error["median_pct"] == pytest.approx(5.0)  # errors 0, 0, 10, 20
    assert error["p90_pct"] == pytest.approx(10.0)  # the 90th percentile by rank: int(0.9 x 3) = 2


def test_curve_interpolates_linearly_and_clamps_to_its_range() -> None:
    from greengpu.energy.power_model import PowerCurve

    curve = PowerCurve((0.5, 0.75, 1.0), (1.4, 1.1, 1.0), (0.6, 0.8, 1.0))
    assert curve.at(0.75) == (1.1, 0.8)
    assert curve.at(0.625) == pytest.approx((1.25, 0.7))
    assert curve.at(0.2) == (1.4, 0.6) and curve.at(1.3) == (1.0, 1.0)
    assert curve.energy_factor(0.625) == pytest.approx(1.25 * 0.7)
