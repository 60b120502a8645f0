"""`greengpu plan`: capacity dates from a known growth, the JSON contract, bad input in one line."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from greengpu.commands.plan_main import parse_days
from greengpu.errors import BadInput
from greengpu.forecast.models import BASELINES
from greengpu.forecast.plan import make_plan, peak_upper_offset, theil_sen_slope
from greengpu.forecast.plan_types import PlanSettings


def growing(days: int = 35, start_gpus: float = 100.0, growth_per_day: float = 2.0) -> pd.Series:
    index = pd.date_range("2026-03-02", periods=days * 24, freq="h", tz="UTC")
    t = np.arange(len(index))
    daily_shape = 10 * np.sin(2 * np.pi * t / 24)  # peaks 10 above the day's level
    return pd.Series(start_gpus + growth_per_day * t / 24 + daily_shape, index=index)


def test_run_out_and_order_by_follow_the_growth() -> None:
    settings = PlanSettings(horizon_days=120, lead_time_days=28, target_utilisation=1.0, redundancy_gpus=0,
                            max_wait_probability=1.0, models=BASELINES)
    result = make_plan(growing(), installed_gpus=250, settings=settings)
    # Worked out from the series alone: day d (0..34, from 2026-03-02) peaks at hour 6, where the sine
    # is 1: 100 + 2 x (24 d + 6) / 24 + 10 = 110.5 + 2 d.
    # - level: the median of the last 7 peaks (days 28..34) = day 31's = 172.5;
    # - growth: the peaks are exactly linear, so Theil-Sen gives 2.0 per day;
    # - upper offset: each peak minus the median of the 7 before it (4 days back) = 8, at any level.
    assert result.growth["peak_level_gpus"] == 172.5
    assert result.growth["peak_growth_gpus_per_day"] == 2.0
    assert result.growth["upper_offset_gpus"] == 8.0
    # Day k ahead (k = 1 is 2026-04-06) needs ceil(172.5 + 2 k + 8) GPUs at 100% utilisation; that
    # first passes 250 at k = 35 (250.5 -> 251): 2026-05-10, and the order goes out 28 days before.
    assert result.capacity["run_out_date"] == "2026-05-10"
    assert result.capacity["order_by_date"] == "2026-04-12"
    assert result.days[0] == {"day": "2026-04-06", "peak_gpus": 174.5, "upper_peak_gpus": 182.5, "required_gpus": 183}
    assert [m["month"] for m in result.months] == ["2026-04", "2026-05", "2026-06", "2026-07", "2026-08"]
    assert result.months[0]["required_gpus"] <= result.months[-1]["required_gpus"]


def test_a_burst_does_not_tilt_the_growth_and_the_offset_is_calibrated() -> None:
    peaks = np.full(28, 100.0)
    peaks[20] = 400.0
    assert theil_sen_slope(peaks) == 0.0
    # One day in seven peaks 30 GPUs above a steady week: 1 in 7 is above the 86th percentile, so the
    # 95% offset is the full 30.
    rises = np.array([100.0] * 7 + [100.0, 100.0, 100.0, 100.0, 100.0, 100.0, 130.0] * 6)
    assert peak_upper_offset(rises) == 30.0
    assert peak_upper_offset(rises, level=0.8) == 0.0


def test_durations() -> None:
    assert (parse_days("90d", "x"), parse_days("12w", "x"), parse_days("720h", "x")) == (90, 84, 30)
    with pytest.raises(BadInput, match="expected a duration such as 90d"):
        parse_days("three months", "--horizon")


def test_plan_json_contract_and_bad_history(tmp_path: Path, repo: Path) -> None:
    series = growing(days=16)
    history = tmp_path / "history.csv"
    pd.DataFrame({"time": series.index.strftime("%Y-%m-%dT%H:%M:%SZ"), "gpus_busy": series.round(1),
                  "gpus_pending": 0}).to_csv(history, index=False)
    out = subprocess.run([sys.executable, "-m", "greengpu", "plan", "--history", str(history), "--cluster",
                          str(repo / "examples" / "lab-a100.cluster.yaml"), "--horizon", "60d", "--lead-time", "4w",
                          "--models", "baselines", "--buffer-factor", "1.5", "--growth", "12", "--json"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    payload = json.loads(out.stdout)
    assert payload["inputs"]["buffer_factor"] == 1.5 and payload["inputs"]["growth_gpus_per_month"] == 12
    assert payload["growth"]["peak_growth_gpus_per_day"] == pytest.approx(12 / 30.4375, abs=0.001)
    assert payload["history"]["demand"] == "busy + pending, from the history"
    assert set(payload["forecast"]) >= {"model", "mase", "baseline", "baseline_mase", "origins", "coverage_80",
                                        "coverage_95"}
    assert set(payload["capacity"]) >= {"installed_gpus", "required_gpus", "run_out_date", "order_by_date"}
    assert payload["forecast"]["origins"] >= 10
    assert payload["capacity"]["lead_time_days"] == 28 and payload["capacity"]["horizon_days"] == 60

    bad = tmp_path / "bad.csv"
    bad.write_text("time,gpus_busy\n2026-03-02T00:00:00Z,5\n2026-03-02T01:00:00Z,lots\n")
    refused = subprocess.run([sys.executable, "-m", "greengpu", "plan", "--history", str(bad)],
                             capture_output=True, text=True, timeout=60)
    assert refused.returncode == 2
    assert refused.stderr.strip() == f"greengpu: {bad}:3: gpus_busy: expected a number of GPUs >= 0, got 'lots'"
    assert refused.stdout == ""


def test_savings_compare_always_on_and_default_on_the_same_trace(repo: Path) -> None:
    from schedkit import job

    from greengpu.commands.plan_main import _finish_savings, _start_savings
    from greengpu.config.inventory import load_cluster

    cluster = load_cluster(repo / "examples" / "lab-a100.cluster.yaml")
    t0 = 1_700_000_000.0
    jobs = [job(f"j{i}", gpus=1, duration_s=1800, submit_time_s=t0 + i * 7200,
                tenant="postdocs" if i % 3 == 0 else "phd-students") for i in range(12)]
    savings = _finish_savings(_start_savings(cluster, jobs))
    assert set(savings) == {"always-on", "default", "saved"}
    saved = savings["saved"]["energy_kwh"]
    assert saved == pytest.approx(savings["always-on"]["energy_kwh"] - savings["default"]["energy_kwh"])
    assert saved > 0  # a mostly idle lab: sleep and capping save energy
    for policy in ("always-on", "default"):
        tenants = savings[policy]["tenants"]
        assert set(tenants) == {"phd-students", "postdocs", "(idle)"}
        # Tenants plus idle add up to the site: what each tenant is billed, and what nobody is.
        for key in ("energy_kwh", "cost", "co2_kg"):
            assert sum(row[key] for row in tenants.values()) == pytest.approx(savings[policy][key], abs=0.01)
        assert tenants["phd-students"]["gpu_hours"] == pytest.approx(8 * 0.5, rel=0.1)
        assert tenants["postdocs"]["gpu_hours"] == pytest.approx(4 * 0.5, rel=0.1)


TWO_MODELS = """site: {pue: 1.2, price_per_kwh: 0.1, carbon_g_per_kwh: 300}
node_types:
  a100x4: {gpus: 4, gpu_model: A100, gpu_idle_w: 50, gpu_max_w: 400, gpu_min_limit_w: 100, host_idle_w: 300,
           host_sleep_w: 5, boot_s: 200}
  h100x8: {gpus: 8, gpu_model: H100, gpu_idle_w: 70, gpu_max_w: 700, gpu_min_limit_w: 200, host_idle_w: 500,
           host_sleep_w: 8, boot_s: 300}
nodes:
  - {name: "a[1-2]", type: a100x4}
  - {name: "h1", type: h100x8}
tenants:
  lab: {quota_gpus: 16}
"""


def test_demand_pinned_to_gpu_models_is_sized_per_model(tmp_path: Path) -> None:
    cluster = tmp_path / "two.cluster.yaml"
    cluster.write_text(TWO_MODELS)
    rows = ["job_id,submit_time,duration_s,gpus,tenant,gpu_type"]
    start = pd.Timestamp("2026-03-02T00:00:00Z")
    for day in range(21):
        noon = start + pd.Timedelta(days=day, hours=12)
        # Every day at noon: 6 A100s for 2 hours, 4 H100s for 2 hours, 2 GPUs of either for 1 hour.
        rows.append(f"a{day},{noon:%Y-%m-%dT%H:%M:%SZ},7200,6,lab,A100")
        rows.append(f"h{day},{noon:%Y-%m-%dT%H:%M:%SZ},7200,4,lab,H100")
        rows.append(f"x{day},{noon:%Y-%m-%dT%H:%M:%SZ},3600,2,lab,A100|H100")
    trace = tmp_path / "trace.csv"
    trace.write_text("\n".join(rows) + "\n")
    out = subprocess.run([sys.executable, "-m", "greengpu", "plan", "--trace", str(trace), "--cluster", str(cluster),
                          "--models", "baselines", "--target-utilisation", "0.8", "--horizon", "30d", "--json"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    models = {row["gpu_model"]: row for row in json.loads(out.stdout)["gpu_models"]}
    assert set(models) == {"A100", "H100", "(any model)"}
    assert models["A100"]["installed_gpus"] == 8 and models["H100"]["installed_gpus"] == 8
    assert models["A100"]["peak_gpus"] == 6.0 and models["H100"]["peak_gpus"] == 4.0
    # Steady peaks: no rise above last week's, no growth: ceil(6 / 0.8) = 8 and ceil(4 / 0.8) = 5.
    assert models["A100"]["required_gpus"] == 8 and models["A100"]["run_out_date"] is None
    assert models["H100"]["required_gpus"] == 5
    assert models["(any model)"]["required_gpus"] is None  # it shares both pools
    assert models["(any model)"]["installed_gpus"] is None


def test_a_history_with_a_gpu_model_column_splits_demand_by_model() -> None:
    from greengpu.forecast.demand import demand_by_model_from_history

    frame = pd.DataFrame({
        "time": pd.to_datetime(["2026-03-02T00:00Z", "2026-03-02T00:00Z", "2026-03-02T01:00Z", "2026-03-02T02:00Z"],
                               utc=True),
        "gpus_busy": [3.0, 5.0, 4.0, 1.0], "gpus_pending": [1.0, 0.0, 0.0, 0.0],
        "gpu_model": ["A100", "H100", "A100", ""]})
    by_model = demand_by_model_from_history(frame)
    assert list(by_model) == ["(any model)", "A100", "H100"]
    assert by_model["A100"].tolist() == [4.0, 4.0, 0.0]  # busy + pending; hours it did not appear are 0
    assert by_model["H100"].tolist() == [5.0, 0.0, 0.0]
    assert by_model["(any model)"].tolist() == [0.0, 0.0, 1.0]
    # The cluster's demand adds the models' rows up.
    from greengpu.forecast.demand import demand_from_history

    assert demand_from_history(frame).tolist() == [9.0, 4.0, 1.0]


def test_trace_demand_is_running_plus_pending_of_an_always_on_replay(tmp_path: Path, repo: Path) -> None:
    from schedkit import job

    from greengpu.forecast.demand import demand_from_jobs, demand_from_replay

    # Two jobs of one hour: the second waited 30 minutes, so it is demand for 1.5 hours, not 1.
    jobs = [job("a", gpus=2, duration_s=3600, submit_time_s=0.0), job("b", gpus=4, duration_s=3600,
                                                                      submit_time_s=0.0)]
    offered = demand_from_jobs(jobs)
    replayed = demand_from_replay(jobs, {"a": 3600.0, "b": 5400.0})
    assert offered.tolist() == [6.0, 0.0]
    assert replayed.tolist() == [6.0, 2.0, 0.0]  # b pending 30 min, then running to 5400 s

    # End to end: ten GPUs, a burst of twelve one-GPU jobs every morning: two wait an hour each day.
    rows = ["job_id,submit_time,duration_s,gpus,tenant"]
    start = pd.Timestamp("2026-03-02T09:00:00Z")
    for day in range(16):
        for k in range(12):
            rows.append(f"d{day}-{k},{start + pd.Timedelta(days=day):%Y-%m-%dT%H:%M:%SZ},3600,1,postdocs")
    trace = tmp_path / "burst.csv"
    trace.write_text("\n".join(rows) + "\n")
    out = subprocess.run([sys.executable, "-m", "greengpu", "plan", "--trace", str(trace), "--cluster",
                          str(repo / "examples" / "lab-a100.cluster.yaml"), "--models", "baselines", "--json"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    payload = json.loads(out.stdout)
    assert payload["history"]["demand"] == "running + pending, always-on replay"
    nine = [value for when, value in payload["history"]["recent"] if when.endswith("T09:00:00+00:00")]
    ten = [value for when, value in payload["history"]["recent"] if when.endswith("T10:00:00+00:00")]
    assert set(nine) == {12.0}  # ten running and two pending
    assert set(ten) == {2.0}  # the two that waited run in the next hour
