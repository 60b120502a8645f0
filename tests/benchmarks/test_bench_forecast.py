"""Forecast backtests on public data: MASE per model, the gate's verdict with its evidence and power over
every daily origin (the default) and over half of them (the verdict must not change), calibrated coverage
on the scale the plan would choose, and the time per fit.
Run on demand: python3 -m pytest tests/benchmarks/test_bench_forecast.py -s

Series: the bundled Philly demand (`forecasts/philly-demand.csv`: busy + pending GPUs of the Philly
trace's offered load, Oct 1 - Nov 14 2017), the offered load of the whole public Philly trace (about
three months), and running + pending GPUs of the Helios Earth virtual clusters vc6YE and vcvlY (May
2020, hourly means of the per-minute series). All ship in data/ (data/README.md).
"""

from __future__ import annotations

import time
from pathlib import Path

import pandas as pd
import pytest
from conftest import REPO, public_data

from greengpu.forecast.backtest import Backtest, available_cpus, prepare, run_backtest
from greengpu.forecast.calibration import calibrate_best
from greengpu.forecast.demand import demand_from_jobs
from greengpu.forecast.gate import Choice, choose
from greengpu.sim.traces import read_trace


def helios(vc: str) -> pd.Series:
    frame = pd.read_csv(public_data(f"helios-2020/earth_{vc}_hourly.csv"))
    return pd.Series((frame["running_gpu_num"] + frame["pending_gpu_num"]).to_numpy(dtype=float),
                     index=pd.DatetimeIndex(pd.to_datetime(frame["time"])))


def bundled_philly(path: Path = REPO / "forecasts" / "philly-demand.csv") -> pd.Series:
    frame = pd.read_csv(path)
    return pd.Series((frame["gpus_busy"] + frame["gpus_pending"]).to_numpy(dtype=float),
                     index=pd.DatetimeIndex(pd.to_datetime(frame["time"])))


def whole_philly() -> pd.Series:
    jobs = read_trace(public_data("philly-2017/philly.csv"), "philly").jobs
    return demand_from_jobs(jobs)


SERIES = {"philly-bundled": bundled_philly, "philly-whole-trace": whole_philly,
          "helios-vc6YE": lambda: helios("vc6YE"), "helios-vcvlY": lambda: helios("vcvlY")}


def backtest(series: pd.Series, origins: int | None) -> tuple[Backtest, Choice, float]:
    start = time.perf_counter()
    result = run_backtest(series, horizon_h=24, origins=origins, min_train_h=14 * 24, workers=available_cpus())
    return result, choose(result), time.perf_counter() - start


@pytest.mark.benchmark
@pytest.mark.parametrize("name", list(SERIES))
def test_the_verdict_holds_with_half_the_origins(name: str) -> None:
    prepared = prepare(SERIES[name]())
    series = prepared.series
    every, choice, elapsed = backtest(series, None)
    half, half_choice, half_elapsed = backtest(series, len(every.origins) // 2)
    calibration = calibrate_best(every, choice.model)
    print(f"\n[forecast] {name}: {len(series)} hours; flags: {'; '.join(prepared.flags) or 'none'}")
    print(f"[forecast] {'model':22s} {'MASE':>6s} {'sMAPE%':>7s} {'fit s':>6s} fallbacks  | {'MASE /2':>7s}")
    for model in every.models.values():
        print(f"[forecast] {model.name:22s} {model.mase:6.3f} {model.smape:7.1f} {model.fit_s:6.2f} "
              f"{model.fallbacks:9d}  | {half.models[model.name].mase:7.3f}")
    for label, result, verdict, seconds in (("every", every, choice, elapsed),
                                            ("half", half, half_choice, half_elapsed)):
        print(f"[forecast] {label}: {len(result.origins)} origins, backtest {seconds:.1f} s on {available_cpus()} "
              f"workers; {verdict.reason}")
        print(f"[forecast]   {verdict.to_change}")
        print(f"[forecast]   power: {verdict.power.text()}")
    print(f"[forecast] bands on {calibration.scale} (interval scores "
          + ", ".join(f"{k} {v:.1f}" for k, v in calibration.compared.items())
          + f"); coverage (leave-one-origin-out, every origin): 80% -> {calibration.coverage[0.8]:.0%}, "
          f"95% -> {calibration.coverage[0.95]:.0%}")
    assert len(half.origins) == len(every.origins) // 2 and len(every.origins) >= 10
    assert (half_choice.model, half_choice.shipped_candidate) == (choice.model, choice.shipped_candidate)
