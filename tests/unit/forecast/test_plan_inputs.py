"""Planning inputs beyond history (projects, efficiency gains, expected growth, a buffer factor), the
scenario table, the day-ahead bands, and the settings file's located errors."""

from __future__ import annotations

import math
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from greengpu.config.plan_settings import PlanFileValues, load_plan_file
from greengpu.errors import ConfigError
from greengpu.forecast.models import BASELINES
from greengpu.forecast.plan import make_plan
from greengpu.forecast.plan_types import PlanSettings
from greengpu.plan_inputs import EfficiencyGain, PlanInputs, Project

FLAT = PlanSettings(horizon_days=60, lead_time_days=14, target_utilisation=1.0, redundancy_gpus=0,
                    max_wait_probability=1.0, models=BASELINES)


def steady(days: int = 28, level: float = 100.0) -> pd.Series:
    """The same daily shape every day: peaks exactly `level`, so the upper offset is 0."""
    index = pd.date_range("2026-03-02", periods=days * 24, freq="h", tz="UTC")
    hour = np.arange(len(index)) % 24
    return pd.Series(level - 40.0 * (hour < 8), index=index)


def day_row(result: object, day: str) -> dict[str, object]:
    return next(d for d in result.days if d["day"] == day)  # type: ignore[attr-defined]


def test_no_inputs_plans_the_measured_peak() -> None:
    result = make_plan(steady(), 500, FLAT)
    assert result.growth["upper_offset_gpus"] == 0.0
    assert {d["required_gpus"] for d in result.days} == {100}
    assert result.inputs["buffer_factor"] == 1.0 and result.inputs["projects"] == []


def test_projects_efficiency_and_buffer_apply_from_their_dates() -> None:
    inputs = PlanInputs(
        projects=(Project("llm", 30.0, pd.Timestamp("2026-04-10"), pd.Timestamp("2026-04-20")),),
        efficiency=(EfficiencyGain("int8", -0.2, pd.Timestamp("2026-04-05")),),
        buffer_factor=1.1)
    result = make_plan(steady(), 500, FLAT, inputs)
    # Before the gain: 100 x 1.1 buffer.
    assert day_row(result, "2026-04-01")["required_gpus"] == 110
    # Gain: 100 x 0.8 = 80, x 1.1 = 88.
    assert day_row(result, "2026-04-05")["required_gpus"] == 88
    assert day_row(result, "2026-04-05")["peak_gpus"] == 80.0
    # Project on top of the reduced organic demand: (80 + 30) x 1.1 = 121, until its end (exclusive).
    assert day_row(result, "2026-04-10")["required_gpus"] == 121
    assert day_row(result, "2026-04-19")["required_gpus"] == 121
    assert day_row(result, "2026-04-20")["required_gpus"] == 88
    assert result.capacity["required_gpus"] == 121
    summary = result.inputs
    assert summary["projects"] == [{"name": "llm", "gpus": 30.0, "start": "2026-04-10", "end": "2026-04-20"}]
    assert summary["efficiency"] == [{"name": "int8", "change": -0.2, "start": "2026-04-05"}]
    assert summary["buffer_factor"] == 1.1


def test_expected_growth_replaces_the_measured_one() -> None:
    result = make_plan(steady(), 500, FLAT, PlanInputs(growth_gpus_per_month=30.4375))  # 1 GPU a day
    assert result.growth["peak_growth_gpus_per_day"] == pytest.approx(1.0)
    assert result.inputs["measured_growth_gpus_per_month"] == 0.0
    assert result.inputs["used_growth_gpus_per_month"] == pytest.approx(30.44, abs=0.01)
    # Day 10 of the horizon needs 100 + 10 GPUs.
    assert result.days[9]["required_gpus"] == 110


def test_scenarios_cover_quantiles_by_utilisation_and_order_sensibly() -> None:
    rng = np.random.default_rng(3)
    base = steady(days=35)
    series = base + rng.integers(0, 30, len(base))  # peaks vary day to day: quantiles differ
    settings = PlanSettings(horizon_days=30, target_utilisation=0.7, max_wait_probability=1.0, models=BASELINES)
    result = make_plan(series, 150, settings)
    table = {(r["quantile"], r["target_utilisation"]): r for r in result.scenarios}
    assert set(table) == {(q, u) for q in (0.5, 0.8, 0.95) for u in (0.5, 0.65, 0.7, 0.8)}
    for u in (0.5, 0.65, 0.7, 0.8):
        assert table[(0.5, u)]["required_gpus"] <= table[(0.8, u)]["required_gpus"] <= table[(0.95, u)]["required_gpus"]
    for q in (0.5, 0.8, 0.95):
        needs = [table[(q, u)]["required_gpus"] for u in (0.5, 0.65, 0.7, 0.8)]
        assert needs == sorted(needs, reverse=True)
    # The chosen settings' row is the plan itself.
    assert table[(0.95, 0.7)]["required_gpus"] == result.capacity["required_gpus"]
    assert table[(0.95, 0.7)]["run_out_date"] == result.capacity["run_out_date"]


def test_day_ahead_has_nested_calibrated_bands() -> None:
    index = pd.date_range("2026-03-02", periods=28 * 24, freq="h", tz="UTC")
    rng = np.random.default_rng(5)
    series = pd.Series(200 + 50 * np.sin(2 * np.pi * np.arange(len(index)) / 24) + rng.normal(0, 8, len(index)),
                       index=index)
    result = make_plan(series, 500, FLAT)
    assert len(result.day_ahead) == 24
    assert result.day_ahead[0]["time"] == "2026-03-30T00:00:00+00:00"
    for row in result.day_ahead:
        assert row["lower_95"] <= row["lower_80"] <= row["upper_80"] <= row["upper_95"]
        assert row["lower_95"] < row["gpus"] < row["upper_95"]
    widths = [row["upper_95"] - row["lower_95"] for row in result.day_ahead]
    assert min(widths) > 10  # noise of sd 8: a 95% band at least +-1.3 sd wide


def test_settings_file_is_read_with_dates_percentages_and_relative_paths(tmp_path: Path) -> None:
    path = tmp_path / "plan.yaml"
    path.write_text("history: demand.csv\nhorizon: 30d\nbuffer_factor: 1.25\ngrowth_gpus_per_month: 12\n"
                    "projects:\n  - {name: a, gpus: 8, start: 2027-01-04, end: '2027-02-01'}\n"
                    "efficiency:\n  - {name: quantization, change: -15%, start: 2027-01-01}\n"
                    "  - {name: bigger models, change: 0.1, start: '2027-03-01'}\n")
    loaded = load_plan_file(path)
    assert loaded.values == PlanFileValues(history=str(tmp_path / "demand.csv"), horizon="30d")
    assert loaded.inputs.buffer_factor == 1.25 and loaded.inputs.growth_gpus_per_month == 12
    assert loaded.inputs.projects == (Project("a", 8.0, pd.Timestamp("2027-01-04"), pd.Timestamp("2027-02-01")),)
    assert [(g.name, g.change) for g in loaded.inputs.efficiency] == [("quantization", -0.15), ("bigger models", 0.1)]
    assert math.isclose(loaded.inputs.efficiency[0].change, -0.15)


@pytest.mark.parametrize(("text", "message"), [
    ("projects:\n  - {name: a, gpus: 8, start: soon}\n", ":2: projects[0].start: expected a date such as 2027-01-15"),
    ("projects:\n  - {name: a, gpus: -1, start: 2027-01-01}\n", ":2: projects[0].gpus: must be at least 0"),
    ("projects:\n  - name: a\n    gpus: 4\n    start: 2027-02-01\n    end: 2027-01-01\n",
     ":5: projects[0].end: must be after start (2027-02-01)"),
    ("efficiency:\n  - {name: q, change: lots, start: 2027-01-01}\n",
     ":2: efficiency[0].change: expected a change such as -15% or -0.15, got 'lots'"),
    ("efficiency:\n  - {name: q, change: -150%, start: 2027-01-01}\n",
     ":2: efficiency[0].change: must be between -95% and +1000%"),
    ("buffer_factor: 0.5\n", ":1: buffer_factor: must be at least 1, got 0.5"),
    ("horizon: 30d\nbufer_factor: 1.2\n", ":2: bufer_factor: unknown key"),
])
def test_bad_settings_name_file_line_and_key(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "plan.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as raised:
        load_plan_file(path)
    assert str(raised.value).startswith(f"{path}{message}")


def test_bad_settings_exit_2_with_one_line(tmp_path: Path) -> None:
    path = tmp_path / "plan.yaml"
    path.write_text("history: missing.csv\nefficiency:\n  - {name: q, change: lots, start: 2027-01-01}\n")
    done = subprocess.run([sys.executable, "-m", "greengpu", "plan", "--settings", str(path)], capture_output=True,
                          text=True, timeout=60, check=False)
    assert done.returncode == 2
    assert done.stdout == ""
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith(f"greengpu: {path}:3: efficiency[0].change: expected a change")


def test_daily_peak_models_ship_on_a_weekly_shape_and_not_on_noise() -> None:
    from greengpu.forecast.daily import forecast_daily_peaks

    rng = np.random.default_rng(21)
    days = pd.date_range("2026-01-05", periods=70, freq="D", tz="UTC")
    weekday = (days.day_of_week < 5).astype(float)
    shaped = pd.Series(100 + 1.5 * np.arange(70) + 40 * weekday + rng.normal(0, 2, 70), index=days)
    result = forecast_daily_peaks(shaped, horizon_days=28, origins=10)
    assert result.choice is not None and result.choice.origins == 10
    assert result.choice.shipped_candidate, result.note
    assert result.path is not None and len(result.path) == 28
    # The path keeps the weekly shape and the growth: next weeks' weekdays sit ~40 above their weekends.
    future = pd.date_range(days[-1] + pd.Timedelta(days=1), periods=28, freq="D")
    weekdays = result.path[np.asarray(future.day_of_week < 5)]
    weekends = result.path[np.asarray(future.day_of_week >= 5)]
    assert 25 < weekdays.mean() - weekends.mean() < 55
    assert result.path[21:].mean() > result.path[:7].mean() + 15  # three weeks of 1.5 GPUs/day growth

    flat = pd.Series(300 + rng.normal(0, 10, 70), index=days)
    plain = forecast_daily_peaks(flat, horizon_days=28, origins=6)
    assert plain.choice is not None and not plain.choice.shipped_candidate
    assert plain.path is None and "shipping the baseline" in plain.note

    short = forecast_daily_peaks(flat.iloc[:30], horizon_days=28, origins=10)
    assert short.choice is None and "needs 42" in short.note


def test_a_shipped_daily_model_drives_the_plan() -> None:
    index = pd.date_range("2026-01-05", periods=70 * 24, freq="h", tz="UTC")
    day = np.arange(len(index)) // 24
    weekday = (index.day_of_week < 5).astype(float)
    hour_shape = np.sin(np.pi * (np.arange(len(index)) % 24) / 24)  # 0 at midnight, 1 at noon
    rng = np.random.default_rng(4)
    series = pd.Series((100 + 1.5 * day + 40 * weekday) * hour_shape + rng.normal(0, 1, len(index)), index=index)
    result = make_plan(series, 1000, replace(FLAT, horizon_days=28, origins=6))
    daily = result.forecast["daily"]
    assert daily["shipped_candidate"] and daily["model"] in ("ets", "unobserved_components")
    peaks = [d["peak_gpus"] for d in result.days]
    assert max(peaks) - min(peaks) > 25  # weekdays and weekends differ, as they did in the history


def test_a_daily_model_needs_enough_origins_to_ship() -> None:
    from greengpu.forecast.daily import forecast_daily_peaks

    rng = np.random.default_rng(21)
    days = pd.date_range("2026-01-05", periods=48, freq="D", tz="UTC")
    weekday = (days.day_of_week < 5).astype(float)
    shaped = pd.Series(100 + 1.5 * np.arange(48) + 40 * weekday + rng.normal(0, 2, 48), index=days)
    result = forecast_daily_peaks(shaped, horizon_days=28, origins=10)  # 48 days: 7 origins of 10 asked
    assert result.choice is not None and result.choice.origins == 7
    assert not result.choice.shipped_candidate and result.path is None
    assert ("the long-horizon gate cannot ship a model on 7 origins; it needs 10, so 51 days of history (this one "
            "has 48: 3 more days would do)") in result.note


def test_an_unwritable_html_path_is_refused_before_planning(tmp_path: Path) -> None:
    target = tmp_path / "missing" / "plan.html"
    done = subprocess.run([sys.executable, "-m", "greengpu", "plan", "--html", str(target)], capture_output=True,
                          text=True, timeout=60, check=False)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.strip() == f"greengpu: --html {target}: folder {target.parent} does not exist"


def test_the_data_credit_comes_from_the_settings_and_reaches_every_report(tmp_path: Path) -> None:
    from greengpu.commands.plan_main import PlanOptions, load_inputs

    hours = pd.date_range("2027-01-01", periods=16 * 24, freq="h", tz="UTC")
    (tmp_path / "demand.csv").write_text("time,gpus_busy\n" + "".join(
        f"{t.strftime('%Y-%m-%dT%H:%M:%SZ')},{40 + i % 24}\n" for i, t in enumerate(hours)))
    path = tmp_path / "plan.yaml"
    path.write_text("history: demand.csv\ncredit: 'Acme lab usage, CC BY 4.0 (Acme, 2027)'\n")
    options = PlanOptions(None, None, "csv", None, None, None, None, None, baselines_only=True,
                          settings_file=str(path))
    assert load_inputs(options).credit == "Acme lab usage, CC BY 4.0 (Acme, 2027)"
    path.write_text("history: demand.csv\n")
    assert load_inputs(options).credit == ""  # not Philly, and none given: no credit is invented
    philly = tmp_path / "philly-2017"
    philly.mkdir()
    (philly / "demand.csv").write_text((tmp_path / "demand.csv").read_text())
    path.write_text("history: philly-2017/demand.csv\n")
    assert "Philly trace (Microsoft, CC BY 4.0" in load_inputs(options).credit


def test_the_payload_shows_every_plan_setting_but_the_models() -> None:
    from dataclasses import asdict

    from greengpu.forecast.plan_types import settings_shown

    settings = PlanSettings(horizon_days=30, origins=7, workers=2, allow_decline=True)
    expected = {k: v for k, v in asdict(settings).items() if k != "models"}
    assert settings_shown(settings) == expected  # a new PlanSettings field must reach the JSON too
    assert list(settings_shown(settings)) == list(expected)
