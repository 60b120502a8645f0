"""`greengpu plan` end to end, timed as a user runs it (a new process each time): with no arguments (the
bundled Philly demand) and on the public Helios series, each with every daily origin (the default) and
with half of them, whose verdicts must agree; on six months of hourly history; on a six-month trace with
savings; and on the real Philly trace. Prints the wall time, the backtest time and the time per fit of
each model, the verdict and the gate's power.

Run on demand: python3 -m pytest tests/benchmarks/test_bench_plan.py -s
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import public_data

SIX_MONTHS_H = 182 * 24


def six_months_history(path: Path) -> None:
    """Hourly busy and pending GPUs of a 400-GPU cluster: growth, a daily and a weekly shape, AR(1) noise."""
    rng = np.random.default_rng(11)
    index = pd.date_range("2026-01-05", periods=SIX_MONTHS_H, freq="h", tz="UTC")
    t = np.arange(SIX_MONTHS_H)
    noise = np.zeros(SIX_MONTHS_H)
    for i in range(1, SIX_MONTHS_H):
        noise[i] = 0.8 * noise[i - 1] + rng.normal(0, 6)
    weekday = (index.day_of_week < 5).astype(float)
    demand = 180 + 0.25 * t / 24 + 40 * np.sin(2 * np.pi * (t % 24 - 8) / 24) * weekday + 25 * weekday + noise
    busy = np.clip(demand, 0, 400)
    pending = np.clip(demand - 400, 0, None)
    pd.DataFrame({"time": index.strftime("%Y-%m-%dT%H:%M:%SZ"), "gpus_busy": busy.round(1),
                  "gpus_pending": pending.round(1)}).to_csv(path, index=False)


def six_months_lab_trace(path: Path) -> None:
    """A ten-GPU lab's six months of jobs (canonical trace CSV, docs/TRACES.md)."""
    rng = np.random.default_rng(12)
    start = pd.Timestamp("2026-01-05T00:00:00Z")
    rows = []
    for hour in range(SIX_MONTHS_H):
        day_time = 8 <= hour % 24 < 20 and (hour // 24) % 7 < 5
        for k in range(rng.poisson(1.2 if day_time else 0.15)):
            submit = start + pd.Timedelta(hours=hour, minutes=int(rng.integers(0, 60)))
            rows.append({"job_id": f"j{hour}-{k}", "submit_time": submit.strftime("%Y-%m-%dT%H:%M:%SZ"),
                         "duration_s": int(rng.integers(1200, 5 * 3600)), "gpus": int(rng.choice([1, 1, 1, 2, 4])),
                         "tenant": str(rng.choice(["phd-students", "postdocs"])), "priority": 0,
                         "class": "training", "checkpoint_interval_s": ""})
    pd.DataFrame(rows).to_csv(path, index=False)


def timed_plan(*args: str) -> tuple[float, dict]:
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "greengpu", "plan", *args, "--json"], capture_output=True,
                          text=True, timeout=900, check=False)
    elapsed = time.perf_counter() - start
    assert done.returncode == 0, done.stderr
    return elapsed, json.loads(done.stdout)


def helios_history(vc: str, path: Path) -> None:
    """A Helios Earth virtual cluster's hourly running and pending GPUs as a usage history CSV."""
    frame = pd.read_csv(public_data(f"helios-2020/earth_{vc}_hourly.csv"))
    pd.DataFrame({"time": frame["time"], "gpus_busy": frame["running_gpu_num"],
                  "gpus_pending": frame["pending_gpu_num"]}).to_csv(path, index=False)


def verdict(payload: dict) -> tuple[str, bool, str | None]:
    """The day-ahead verdict and the long-horizon one."""
    forecast = payload["forecast"]
    return forecast["model"], forecast["shipped_candidate"], forecast["daily"]["model"]


def all_and_half(name: str, *args: str) -> None:
    """The plan with every daily origin and with half of them: the same verdict, within the time budget."""
    elapsed, payload = timed_plan(*args)
    report(f"{name}, every daily origin", elapsed, payload)
    origins = payload["forecast"]["origins"]
    half_elapsed, half = timed_plan(*args, "--origins", str(max(5, origins // 2)))
    report(f"{name}, half the origins", half_elapsed, half)
    print(f"[plan]   {name}: {origins} origins {elapsed:.1f} s, {half['forecast']['origins']} origins "
          f"{half_elapsed:.1f} s; verdict {verdict(payload)} and {verdict(half)}")
    assert verdict(half) == verdict(payload), f"{name}: the verdict turns on the origins"
    assert elapsed <= 60.0, f"{name}: a plan with every daily origin took {elapsed:.0f} s (budget 60 s)"


def report(name: str, elapsed: float, payload: dict) -> None:
    forecast, timing = payload["forecast"], payload["timing"]
    fits = ", ".join(f"{m} {s:.2f}" for m, s in forecast["fit_s"].items())
    print(f"\n[plan] {name}: {payload['history']['hours']:,} hours; wall {elapsed:.1f} s (hourly backtest "
          f"{timing['backtest_s']:.1f} s over {forecast['origins']} origins, whole plan with the daily backtest "
          f"{timing['plan_s']:.1f} s"
          + (f", savings replays finished {timing['savings_wait_s']:.1f} s after the plan" if "savings_wait_s"
             in timing else "") + ")")
    print(f"[plan]   seconds per fit: {fits}")
    print(f"[plan]   shipped {forecast['model']} (MASE {forecast['mase']}, {forecast['baseline']} "
          f"{forecast['baseline_mase']}); coverage 80% {forecast['coverage_80']}, 95% {forecast['coverage_95']}; "
          f"required {payload['capacity']['required_gpus']} GPUs, run out {payload['capacity']['run_out_date']}")
    gate = forecast.get("gate") or {}
    if gate.get("to_change"):
        print(f"[plan]   gate: {forecast['reason']}")
        print(f"[plan]   {gate['to_change']}")
    if gate.get("power"):
        print(f"[plan]   power: {gate['power']['text']}; bands on {forecast['bands']['scale']}")
    daily = forecast["daily"]
    print(f"[plan]   long horizon: {daily['note']}; daily MASE: "
          + ", ".join(f"{m} {v}" for m, v in daily["models"].items()))
    if "savings" in payload:
        saved = payload["savings"]["saved"]
        print(f"[plan]   savings default vs always-on: {saved['energy_kwh']:,.0f} kWh, {saved['cost']:,.0f} cost, "
              f"{saved['co2_kg']:,.0f} kg CO2")


@pytest.mark.benchmark
def test_plan_timings(tmp_path: Path, repo: Path) -> None:
    all_and_half("no arguments (bundled Philly example)")
    for vc in ("vc6YE", "vcvlY"):
        helios_history(vc, tmp_path / f"{vc}.csv")
        all_and_half(f"Helios {vc}", "--history", str(tmp_path / f"{vc}.csv"))

    history = tmp_path / "history.csv"
    six_months_history(history)
    cluster = str(repo / "examples" / "training-400.cluster.yaml")
    elapsed, payload = timed_plan("--history", str(history), "--cluster", cluster)
    report("six months of hourly history, 400 GPUs, every daily origin", elapsed, payload)
    assert payload["history"]["hours"] >= SIX_MONTHS_H - 1
    half_elapsed, half = timed_plan("--history", str(history), "--cluster", cluster, "--origins",
                                    str(payload["forecast"]["origins"] // 2))
    report("six months of hourly history, 400 GPUs, half the origins", half_elapsed, half)
    print(f"[plan]   six months: verdict {verdict(payload)} with every origin, {verdict(half)} with half")
    assert elapsed <= 60.0, f"a plan on six months of hourly history took {elapsed:.0f} s (budget 60 s)"

    trace = tmp_path / "trace.csv"
    six_months_lab_trace(trace)
    elapsed, payload = timed_plan("--trace", str(trace), "--cluster", str(repo / "examples" / "lab-a100.cluster.yaml"))
    report("six-month trace of a ten-GPU lab, with savings", elapsed, payload)

    philly = public_data("philly-2017/philly.csv")
    elapsed, payload = timed_plan("--trace", str(philly), "--trace-format", "philly", "--cluster",
                                  str(repo / "examples" / "philly.cluster.yaml"))
    report("the Philly trace (about 3 months, 1,000 GPUs), with savings", elapsed, payload)
