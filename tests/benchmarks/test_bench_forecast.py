"""Forecast backtests on public data: MASE per model against each baseline, coverage, the gate's choice,
and the time per fit. Run on demand: python3 -m pytest tests/benchmarks/test_bench_forecast.py -s

Series: running + pending GPUs of the Helios Earth virtual clusters vc6YE and vcvlY (May 2020, per
minute -> hourly), and the hourly offered GPU demand of the Philly trace (Sep-Nov 2017).
"""

from __future__ import annotations

import time

import pandas as pd
import pytest
from conftest import shared_data_or_skip

from greengpu.forecast.backtest import calibrate, prepare, run_backtest
from greengpu.forecast.demand import demand_from_jobs
from greengpu.forecast.gate import choose
from greengpu.sim.traces import read_trace


def helios(vc: str) -> pd.Series:
    path = shared_data_or_skip(f"helios-2020-aggregates/earth_{vc}_cluster_sequence_vc.csv")
    frame = pd.read_csv(path, usecols=["time", "running_gpu_num", "pending_gpu_num"])
    series = pd.Series((frame["running_gpu_num"] + frame["pending_gpu_num"]).to_numpy(dtype=float),
                       index=pd.DatetimeIndex(pd.to_datetime(frame["time"])))
    return series.resample("h").mean()


def philly() -> pd.Series:
    jobs = read_trace(shared_data_or_skip("philly-2017/philly.csv"), "philly").jobs
    demand = demand_from_jobs(jobs)
    # The offered load from 2017-10-01 to 2017-11-14, when the trace is dense (72% of jobs).
    return demand["2017-10-01":"2017-11-14"]


@pytest.mark.benchmark
@pytest.mark.parametrize("name", ["helios-vc6YE", "helios-vcvlY", "philly"])
def test_backtest_table(name: str) -> None:
    raw = philly() if name == "philly" else helios(name.split("-")[1])
    prepared = prepare(raw)
    series = prepared.series
    start = time.perf_counter()
    backtest = run_backtest(series, horizon_h=24, origins=24, min_train_h=14 * 24)
    elapsed = time.perf_counter() - start
    choice = choose(backtest)
    calibration = calibrate(backtest, choice.model)
    baselines = {m.name: m.mase for m in backtest.models.values() if m.kind == "baseline"}
    best_baseline = min(baselines, key=lambda k: baselines[k])
    print(f"\n[forecast] {name}: {len(series)} hours, {len(backtest.origins)} origins, horizon 24 h, "
          f"backtest {elapsed:.1f} s; flags: {'; '.join(prepared.flags) or 'none'}")
    print(f"[forecast] {'model':22s} {'MASE':>6s} {'sMAPE%':>7s} {'vs naive':>9s} {'vs snaive':>10s} "
          f"{'vs drift':>9s} {'fit s':>6s} fallbacks")
    for model in backtest.models.values():
        ratios = "".join(f" {model.mase / baselines[b]:>9.2f}" for b in ("naive", "seasonal_naive", "drift"))
        print(f"[forecast] {model.name:22s} {model.mase:6.3f} {model.smape:7.1f}{ratios} {model.fit_s:6.2f} "
              f"{model.fallbacks}")
    print(f"[forecast] best baseline {best_baseline}; gate: {choice.reason}")
    print(f"[forecast] calibrated coverage (leave-one-origin-out): 80% -> {calibration.coverage[0.8]:.0%}, "
          f"95% -> {calibration.coverage[0.95]:.0%}; pinball (q97.5) {calibration.pinball_upper:.2f}")
    assert len(backtest.origins) >= 10
    if choice.shipped_candidate:
        assert choice.mase <= 0.95 * choice.baseline_mase and 2 * choice.wins >= choice.origins
