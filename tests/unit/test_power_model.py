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
