"""The capacity plan's arithmetic (greengpu.forecast.plan) on small synthetic series, every expected value
worked out by hand or with numpy directly, and fast: only the baselines are backtested (the statsmodels
candidates have their own tests), so each check runs in a fraction of a second."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from greengpu.forecast.daily import DailyForecast
from greengpu.forecast.demand import ANY_MODEL
from greengpu.forecast.models import BASELINES
from greengpu.forecast.plan import (
    DAYS_PER_MONTH,
    PeakModel,
    PlannedDay,
    _inputs_summary,
    _months,
    _scenarios,
    efficiency_factor,
    horizon_days,
    make_plan,
    peak_history,
    peak_upper_offset,
    plan_days,
    project_gpus,
    run_out_day,
    size_by_model,
)
from greengpu.forecast.plan_summary import daily_summary, iso_date, rounded
from greengpu.forecast.plan_types import PlanSettings
from greengpu.plan_inputs import EfficiencyGain, PlanInputs, Project

FAST = PlanSettings(horizon_days=30, lead_time_days=10, target_utilisation=0.5, redundancy_gpus=1,
                    max_wait_probability=1.0, origins=3, models=BASELINES, daily_candidates=False)


def climbing(days: int = 30, start: str = "2026-01-01", slope: float = 0.5) -> pd.Series:
    """Day d peaks at 10 + slope x d at noon; every other hour is half the peak."""
    index = pd.date_range(start, periods=days * 24, freq="h", tz="UTC")
    day = np.arange(len(index)) // 24
    peak = 10.0 + slope * day
    return pd.Series(np.where(np.arange(len(index)) % 24 == 12, peak, peak / 2), index=index)


def test_peak_history_by_hand() -> None:
    history = peak_history(climbing(), FAST)
    # Peaks 10, 10.5 ... 24.5 over 30 days; the window is the last 28 (days 2..29), the level the median of
    # the last 7 (days 23..29: day 26, 23.0); daily mean = peak x (1 + 23 / 2) / 24 = peak x 25 / 48.
    assert len(history.daily_peaks) == 30 and history.window_days == 28
    assert history.level == 23.0 and history.slope_per_day == pytest.approx(0.5)
    assert history.mean_ratio == pytest.approx(25 / 48)
    short = peak_history(climbing(), PlanSettings(growth_window_days=5))
    assert short.window_days == 5 and short.level == 23.5  # median of the 5 there are: day 27
    assert peak_history(climbing(slope=0.0) * 0.0, FAST).mean_ratio == 1.0  # no peak: no ratio


def test_peak_upper_offset_is_the_conformal_rise_over_the_previous_weeks_median() -> None:
    peaks = np.array([10.0] * 7 + [12.0, 10.0, 15.0, 10.0, 10.0])
    # Day 7 rises 2 above the median 10, day 9 rises 5, the rest 0: 5 errors; at 95% the rank is
    # ceil(6 x 0.95) = 6 > 5, the largest: 5; at 50% ceil(3) = 3rd smallest: 0.
    assert peak_upper_offset(peaks) == 5.0
    assert peak_upper_offset(peaks, level=0.5) == 0.0
    assert peak_upper_offset(peaks, level=0.6) == 2.0  # ceil(3.6) = 4th smallest
    assert peak_upper_offset(peaks, lookback_days=9) == 5.0  # errors 0, 5, 0 (medians 10 each)
    assert peak_upper_offset(peaks[:8], lookback_days=7) == 2.0
    falling = np.array([10.0] * 7 + [5.0])
    assert peak_upper_offset(falling) == 0.0  # never below zero


def test_efficiency_gains_and_projects_apply_from_their_start_and_until_their_end() -> None:
    day = pd.Timestamp("2026-03-10")
    gains = (EfficiencyGain("q", -0.2, pd.Timestamp("2026-03-10")),
             EfficiencyGain("r", 0.5, pd.Timestamp("2026-03-01")),
             EfficiencyGain("later", -0.9, pd.Timestamp("2026-03-11")))
    assert efficiency_factor(day, gains) == pytest.approx(0.8 * 1.5)
    assert efficiency_factor(day, ()) == 1.0
    projects = (Project("a", 3.0, pd.Timestamp("2026-03-10"), pd.Timestamp("2026-03-11")),
                Project("b", 4.0, pd.Timestamp("2026-03-01")), Project("c", 5.0, pd.Timestamp("2026-03-01"), day),
                Project("d", 6.0, pd.Timestamp("2026-03-11")))
    assert project_gpus(day, projects) == 7.0
    assert project_gpus(pd.Timestamp("2026-03-11"), projects) == 10.0


def days3() -> pd.DatetimeIndex:
    return pd.date_range("2026-03-01", periods=3, freq="D", tz="UTC")


def test_plan_days_by_hand_with_inputs() -> None:
    peaks = PeakModel(level=10.0, slope_per_day=1.0, mean_ratio=0.5)
    plain = plan_days(days3(), peaks, 2.0, 0.5, FAST, PlanInputs())
    # Day 1: organic 11, upper 13: ceil(13 / 0.5) + 1 = 27; the mean 5.5 needs floor(5.5) + 1 = 6 by the wait rule.
    assert [(d.peak, d.upper, d.required) for d in plain] == [(11.0, 13.0, 27), (12.0, 14.0, 29), (13.0, 15.0, 31)]
    assert [d.day for d in plain] == list(days3())
    inputs = PlanInputs(projects=(Project("p", 4.0, pd.Timestamp("2026-03-02"), pd.Timestamp("2026-03-03")),),
                        efficiency=(EfficiencyGain("e", -0.5, pd.Timestamp("2026-03-02")),), buffer_factor=2.0)
    planned = plan_days(days3(), peaks, 2.0, 0.5, FAST, inputs)
    # Day 2: organic 12 x 0.5 + 4 = 10; upper ((12 + 2) x 0.5 + 4) x 2 = 22 -> 45. Day 3: (15 x 0.5) x 2 = 15.
    assert [(d.peak, d.upper, d.required) for d in planned] == [(11.0, 26.0, 53), (10.0, 22.0, 45), (6.5, 15.0, 31)]


def test_the_wait_rule_can_need_more_than_the_utilisation_rule() -> None:
    settings = PlanSettings(redundancy_gpus=0, max_wait_probability=1.0)
    # Upper 3 at utilisation 1: 3 GPUs; the mean 3 x 2 = 6 needs 7 by the wait rule.
    (day,) = plan_days(days3()[:1], PeakModel(3.0, 0.0, 2.0), 0.0, 1.0, settings, PlanInputs())
    assert day.required == 7
    inputs = PlanInputs(projects=(Project("p", 2.5, pd.Timestamp("2026-03-01")),))
    (with_project,) = plan_days(days3()[:1], PeakModel(3.0, 0.0, 2.0), 0.0, 1.0, settings, inputs)
    assert with_project.required == 9  # mean 6 + 2.5 = 8.5 -> 9; the rule: 5.5 -> 6
    (falling,) = plan_days(days3()[:1], PeakModel(0.5, -1.0, 2.0), 0.0, 1.0, settings, PlanInputs())
    assert falling.peak == 0.0 and falling.required == 1  # organic floored at 0; at least one GPU by the wait rule


def test_a_daily_models_path_replaces_the_trend_and_is_floored_at_the_level_unless_decline_is_allowed() -> None:
    peaks = PeakModel(level=10.0, slope_per_day=1.0, mean_ratio=0.5, path=np.array([5.0, 20.0]))
    planned = plan_days(days3(), peaks, 0.0, 1.0, PlanSettings(max_wait_probability=1.0), PlanInputs())
    assert [d.peak for d in planned] == [10.0, 20.0, 13.0]
    declining = plan_days(days3(), peaks, 0.0, 1.0, PlanSettings(allow_decline=True, max_wait_probability=1.0),
                          PlanInputs())
    assert [d.peak for d in declining] == [5.0, 20.0, 13.0]


def test_run_out_is_the_first_day_needing_more_than_installed() -> None:
    planned = [PlannedDay(pd.Timestamp(f"2026-03-0{i + 1}"), 0.0, 0.0, need) for i, need in enumerate([27, 45, 31])]
    assert run_out_day(planned, None) is None
    assert run_out_day(planned, 30) == pd.Timestamp("2026-03-02")
    assert run_out_day(planned, 26) == pd.Timestamp("2026-03-01")
    assert run_out_day(planned, 45) is None


def test_horizon_starts_the_day_after_the_history() -> None:
    days = horizon_days(climbing(days=2), PlanSettings(horizon_days=4))
    assert list(days) == list(pd.date_range("2026-01-03", periods=4, freq="D", tz="UTC"))


def test_months_take_each_months_highest_figures() -> None:
    planned = [PlannedDay(pd.Timestamp("2026-01-30", tz="UTC"), 5.46, 7.06, 9),
               PlannedDay(pd.Timestamp("2026-01-31", tz="UTC"), 4.0, 8.0, 8),
               PlannedDay(pd.Timestamp("2026-02-01", tz="UTC"), 3.0, 4.0, 5)]
    assert _months(planned) == [
        {"month": "2026-01", "peak_gpus": 5.5, "upper_peak_gpus": 8.0, "required_gpus": 9},
        {"month": "2026-02", "peak_gpus": 3.0, "upper_peak_gpus": 4.0, "required_gpus": 5}]
    assert _months([PlannedDay(pd.Timestamp("2026-03-01", tz="UTC"), 1.0, 7.46, 3)])[0]["upper_peak_gpus"] == 7.5
    assert _months([]) == []
    naive_days = [PlannedDay(pd.Timestamp("2026-03-31"), 1.0, 2.0, 3)]
    assert _months(naive_days)[0]["month"] == "2026-03"


def test_scenarios_cross_every_quantile_with_every_utilisation_target() -> None:
    peaks = PeakModel(level=10.0, slope_per_day=0.0, mean_ratio=0.0)
    settings = PlanSettings(target_utilisation=0.7, redundancy_gpus=0, max_wait_probability=1.0)
    rows = _scenarios(days3(), peaks, {0.5: 0.0, 0.8: 2.0, 0.95: 4.0}, settings, PlanInputs(), 16)
    assert [(r["quantile"], r["target_utilisation"]) for r in rows] == [
        (q, u) for q in (0.5, 0.8, 0.95) for u in (0.5, 0.65, 0.7, 0.8)]
    # ceil(upper / u): 10 -> 20, 16, 15, 13; 12 -> 24, 19, 18, 15; 14 -> 28, 22, 20, 18.
    assert [r["required_gpus"] for r in rows] == [20, 16, 15, 13, 24, 19, 18, 15, 28, 22, 20, 18]
    assert [r["run_out_date"] for r in rows][:4] == ["2026-03-01", None, None, None]
    assert rows[5]["run_out_date"] == "2026-03-01" and rows[-1]["run_out_date"] == "2026-03-01"


def test_inputs_summary_reports_what_was_used() -> None:
    inputs = PlanInputs(projects=(Project("p", 4.0, pd.Timestamp("2026-03-02")),
                                  Project("q", 1.0, pd.Timestamp("2026-03-03"), pd.Timestamp("2026-04-01"))),
                        efficiency=(EfficiencyGain("e", -0.5, pd.Timestamp("2026-03-05")),), buffer_factor=1.5,
                        growth_gpus_per_month=3.14159)
    assert _inputs_summary(inputs, 0.1, 0.2) == {
        "projects": [{"name": "p", "gpus": 4.0, "start": "2026-03-02", "end": None},
                     {"name": "q", "gpus": 1.0, "start": "2026-03-03", "end": "2026-04-01"}],
        "efficiency": [{"name": "e", "change": -0.5, "start": "2026-03-05"}], "buffer_factor": 1.5,
        "growth_gpus_per_month": 3.14, "measured_growth_gpus_per_month": round(0.1 * 365.25 / 12, 2),
        "used_growth_gpus_per_month": round(0.2 * 365.25 / 12, 2)}
    assert _inputs_summary(PlanInputs(), 0.0, 0.0)["growth_gpus_per_month"] is None
    assert DAYS_PER_MONTH == 365.25 / 12


def test_iso_androunded() -> None:
    assert iso_date(pd.Timestamp("2026-03-02T13:00", tz="UTC")) == "2026-03-02" and iso_date(None) is None
    assert rounded(1.234567) == 1.2346 and rounded(float("nan")) is None and rounded(math.inf) is None
    assert rounded(None) is None  # type: ignore[arg-type]


def test_daily_summary_without_a_daily_backtest() -> None:
    summary = daily_summary(DailyForecast(None, {"naive": 1.23456}, None, "too short"), False)
    assert summary == {"model": "peak_trend", "shipped_candidate": False, "mase": None, "baseline": None,
                       "baseline_mase": None, "origins": 0, "gate": None, "models": {"naive": 1.2346},
                       "note": "too short", "can_ship": False, "origins_needed": 10, "history_days_needed": 51}


def test_size_by_model_sizes_pinned_models_and_reports_the_rest() -> None:
    settings = PlanSettings(horizon_days=3, target_utilisation=1.0, redundancy_gpus=0, max_wait_probability=1.0)
    flat = climbing(days=10, slope=0.0)  # peaks 10, no growth, no rise
    rows = size_by_model({"A100": flat, ANY_MODEL: flat * 2, "H100": flat.iloc[:0], "V100": flat * 0.5},
                         {"A100": 9}, settings)
    # Each: ceil(peak / 1) or the wait rule on the mean (peak x 25/48): 10 -> 10 vs 6; 5 -> 5 vs 3.
    assert rows == [
        {"gpu_model": "A100", "installed_gpus": 9, "peak_gpus": 10.0, "growth_gpus_per_day": 0.0,
         "upper_offset_gpus": 0.0, "required_gpus": 10, "run_out_date": "2026-01-11"},
        {"gpu_model": ANY_MODEL, "installed_gpus": None, "peak_gpus": 20.0, "growth_gpus_per_day": 0.0,
         "upper_offset_gpus": 0.0, "required_gpus": None, "run_out_date": None},
        {"gpu_model": "V100", "installed_gpus": 0, "peak_gpus": 5.0, "growth_gpus_per_day": 0.0,
         "upper_offset_gpus": 0.0, "required_gpus": 5, "run_out_date": "2026-01-11"}]
    alone = size_by_model({ANY_MODEL: flat}, {}, settings)
    assert alone[0]["installed_gpus"] is None and alone[0]["required_gpus"] == 10 and alone[0]["run_out_date"] is None
    falling = climbing(days=10, slope=-0.5)
    assert size_by_model({"A100": falling}, {}, settings)[0]["growth_gpus_per_day"] == 0.0
    declining = PlanSettings(horizon_days=3, allow_decline=True)
    assert size_by_model({"A100": falling}, {}, declining)[0]["growth_gpus_per_day"] == -0.5


def test_make_plan_end_to_end_with_the_baselines() -> None:
    series = climbing()
    result = make_plan(series, 40, FAST)
    # Level 23 on 2026-01-27..30's median day, growth 0.5/day, the rise over the last week's median 2.0 every
    # day (peaks climb 0.5 a day: 4 days above the median): upper on day k = 23 + 0.5 k + 2.
    assert result.growth == {"peak_level_gpus": 23.0, "peak_growth_gpus_per_day": 0.5,
                             "measured_growth_gpus_per_day": 0.5, "upper_offset_gpus": 2.0, "window_days": 28.0}
    first = result.days[0]
    assert first == {"day": "2026-01-31", "peak_gpus": 23.5, "upper_peak_gpus": 25.5, "required_gpus": 52}
    # Run-out: 2 x (25 + 0.5 k) + 1 > 40 from the first day: already short. By the lead time the order was due
    # 10 days before, 2026-01-21, which has passed: order now (the first planned day), arriving 10 days late.
    capacity = result.capacity
    assert capacity == {"installed_gpus": 40, "required_gpus": 2 * math.ceil(25 + 15) + 1,
                        "run_out_date": "2026-01-31", "order_by_date": "2026-01-31",
                        "order_by_lead_time_date": "2026-01-21", "arrival_date": "2026-02-10", "late_days": 10,
                        "already_short": True, "plan_start_date": "2026-01-31", "required_now_gpus": 52,
                        "target_utilisation": 0.5, "redundancy_gpus": 1, "lead_time_days": 10, "horizon_days": 30,
                        "max_wait_probability": 1.0}
    assert ("order now: with a lead time of 10 days the GPUs needed from 2026-01-31 had to be ordered by 2026-01-21; "
            "ordered now they arrive 2026-02-10, 10 days after they are needed") in result.flags
    assert [m["month"] for m in result.months] == ["2026-01", "2026-02", "2026-03"]
    assert len(result.scenarios) == 3 * 3 and result.inputs["buffer_factor"] == 1.0
    forecast = result.forecast
    assert set(forecast) == {"model", "mase", "baseline", "baseline_mase", "origins", "wins", "shipped_candidate",
                             "reason", "coverage_80", "coverage_95", "models", "fit_s", "backtest_s", "gate",
                             "per_origin", "daily", "bands"}
    bands = forecast["bands"]
    assert set(bands["interval_scores"]) == {"additive", "sqrt", "log1p"}
    assert bands["interval_score"] == min(bands["interval_scores"].values())
    assert bands["interval_scores"][bands["scale"]] == bands["interval_score"]
    assert forecast["origins"] == 3 and set(forecast["models"]) == {"naive", "seasonal_naive", "drift"}
    assert forecast["shipped_candidate"] is False and forecast["baseline"] == forecast["model"]
    assert len(forecast["per_origin"]["times"]) == 3 and set(forecast["per_origin"]["mase"]) == set(forecast["models"])
    assert forecast["daily"]["model"] == "peak_trend" and forecast["daily"]["shipped_candidate"] is False
    assert "the daily backtest needs 42" in forecast["daily"]["note"]
    ahead = result.day_ahead
    assert [row["time"] for row in ahead] == [t.isoformat() for t in
                                              pd.date_range("2026-01-31", periods=24, freq="h", tz="UTC")]
    assert set(ahead[0]) == {"time", "gpus", "lower_80", "upper_80", "lower_95", "upper_95"}
    assert all(r["lower_95"] <= r["lower_80"] <= r["upper_80"] <= r["upper_95"] for r in ahead)


def test_make_plan_without_installed_gpus_and_with_an_expected_growth() -> None:
    result = make_plan(climbing(), None, FAST, PlanInputs(growth_gpus_per_month=DAYS_PER_MONTH))
    # One GPU a day expected instead of the measured 0.5.
    assert result.growth["peak_growth_gpus_per_day"] == 1.0 and result.growth["measured_growth_gpus_per_day"] == 0.5
    assert result.days[0]["peak_gpus"] == 24.0 and result.days[1]["peak_gpus"] == 25.0
    assert result.capacity["run_out_date"] is None and result.capacity["order_by_date"] is None
    assert result.inputs["used_growth_gpus_per_month"] == round(DAYS_PER_MONTH, 2)
    assert not any(f.startswith("order-by") for f in result.flags)


def test_falling_peaks_are_planned_flat_and_flagged_unless_decline_is_allowed() -> None:
    falling = climbing(slope=-0.25)  # peaks 10 .. 2.75
    result = make_plan(falling, 100, FAST)
    assert result.growth["peak_growth_gpus_per_day"] == 0.0 and result.growth["measured_growth_gpus_per_day"] == -0.25
    # 0.25 a day is 0.25 x 365.25 / 12 = 7.6 a month; the level, the median of the last week's peaks, 3.5.
    assert ("demand peaks fell 0.25 GPUs/day (8 GPUs/month) over the last 28 days; planned flat at 3.5 GPUs rather "
            "than falling") in result.flags
    assert result.capacity["run_out_date"] is None
    allowed = make_plan(falling, 100, PlanSettings(**{**FAST.__dict__, "allow_decline": True}))
    assert allowed.growth["peak_growth_gpus_per_day"] == -0.25
    assert not any("planned flat" in f for f in allowed.flags)


def test_with_forty_days_of_rises_the_95th_percentile_is_below_the_largest() -> None:
    # Every fourth day rises 1, 2 ... 10 above a flat 10 (a week never holds more than two rises, so its
    # median stays 10): 40 errors, 30 of them 0; rank ceil(41 x 0.95) = 39: the second largest, 9.
    peaks = np.full(47, 10.0)
    peaks[8::4] += np.arange(1.0, 11.0)
    assert peak_upper_offset(peaks) == 9.0


def test_peaks_below_one_gpu_still_give_a_mean_ratio() -> None:
    assert peak_history(climbing(days=10, slope=0.0) * 0.05, FAST).mean_ratio == pytest.approx(25 / 48)


def test_a_history_ending_at_midnight_plans_from_the_next_day() -> None:
    series = climbing(days=2)
    ending_at_midnight = pd.concat([series, pd.Series([1.0], index=[series.index[-1] + pd.Timedelta(hours=1)])])
    assert horizon_days(ending_at_midnight, PlanSettings(horizon_days=1))[0] == pd.Timestamp("2026-01-04", tz="UTC")


def test_the_wait_rule_takes_efficiency_gains_into_the_mean() -> None:
    settings = PlanSettings(redundancy_gpus=0, max_wait_probability=1.0)
    inputs = PlanInputs(efficiency=(EfficiencyGain("e", -0.5, pd.Timestamp("2026-03-01")),))
    (day,) = plan_days(days3()[:1], PeakModel(4.0, 0.0, 2.0), 0.0, 1.0, settings, inputs)
    assert day.required == 5  # the mean 4 x 2 x 0.5 = 4 -> 5; the rule: 2


def test_make_plan_flags_demand_at_the_installed_ceiling_and_gaps_and_times_its_backtest() -> None:
    series = climbing()
    gappy = series.drop(series.index[100:103])
    result = make_plan(gappy, 12, FAST)  # at 12 or more: the noons from day 4 and the last two days, 10%
    assert "3 missing hours filled by interpolation" in result.flags
    assert any(f.startswith("demand sits at its ceiling (12) ") for f in result.flags)
    assert not any("ceiling" in f for f in make_plan(series, 100, FAST).flags)
    assert not any("ceiling" in f for f in make_plan(series, None, FAST).flags)  # the series' own peak: 1 hour
    assert 0.0 <= result.forecast["backtest_s"] < 60.0
    # Origins a day apart from two weeks in to the last full day, three of them evenly: the first and last kept.
    times = result.forecast["per_origin"]["times"]
    assert times[0] == "2026-01-15T00:00:00+00:00" and times[-1] == "2026-01-30T00:00:00+00:00"


def test_a_shipped_daily_model_sets_the_plans_peaks_unless_growth_is_given(monkeypatch: pytest.MonkeyPatch) -> None:
    from greengpu.forecast import daily
    from greengpu.forecast.models import ModelSpec

    start = pd.Timestamp("2026-01-01", tz="UTC")

    def perfect_peaks(history: pd.Series, horizon: int) -> np.ndarray:  # climbing(): day d peaks at 10 + d / 2
        first = (history.index[-1] - start).days + 1
        return 10.0 + 0.5 * np.arange(first, first + horizon)

    monkeypatch.setattr(daily, "DAILY_CANDIDATES", (ModelSpec("perfect", "candidate", perfect_peaks),))
    settings = PlanSettings(horizon_days=5, lead_time_days=10, target_utilisation=0.5, redundancy_gpus=1,
                            max_wait_probability=1.0, origins=5, models=BASELINES, daily_candidates=True)
    result = make_plan(climbing(days=60), None, settings)
    summary = result.forecast["daily"]
    assert summary["model"] == "perfect" and summary["shipped_candidate"] is True and summary["origins"] == 5
    assert summary["mase"] == summary["models"]["perfect"] == 0.0
    assert summary["baseline"] in ("naive", "weekly_naive", "peak_trend")
    assert summary["baseline_mase"] == summary["models"][summary["baseline"]] > 0.0
    assert summary["gate"] is not None and summary["gate"]["shipped_candidate"] is True
    assert summary["can_ship"] is True and summary["origins_needed"] == 5 and summary["history_days_needed"] == 46
    # Day 60 peaks at 40 by the model; the trend rule would say 38.5 (the median of days 53..59 plus 0.5).
    assert [d["peak_gpus"] for d in result.days] == [40.0, 40.5, 41.0, 41.5, 42.0]
    growth = make_plan(climbing(days=60), None, settings, PlanInputs(growth_gpus_per_month=0.5 * DAYS_PER_MONTH))
    assert growth.forecast["daily"]["shipped_candidate"] is False
    assert [d["peak_gpus"] for d in growth.days][:2] == [38.5, 39.0]
    without = make_plan(climbing(days=60), None, PlanSettings(**{**settings.__dict__, "daily_candidates": False}))
    assert without.forecast["daily"]["note"].startswith("daily peaks: candidates not run; ")


def test_flat_peaks_are_not_flagged_as_falling() -> None:
    result = make_plan(climbing(slope=0.0), 100, FAST)
    assert result.growth["measured_growth_gpus_per_day"] == 0.0 and not any("fell" in f for f in result.flags)


def test_the_order_by_date_is_flagged_only_once_it_is_the_first_planned_day_or_earlier() -> None:
    # Required on day k: ceil((25 + k / 2) / 0.5) + 1 = 51 + k: above 70 from day 20, 2026-02-19.
    def flags(lead_time_days: int) -> list[str]:
        result = make_plan(climbing(), 70, PlanSettings(**{**FAST.__dict__, "lead_time_days": lead_time_days}))
        assert result.capacity["run_out_date"] == "2026-02-19"
        return [f for f in result.flags if f.startswith("order")]

    assert flags(18) == []  # order by 2026-02-01, the second planned day
    assert flags(19) == ["order today: with a lead time of 19 days the GPUs needed from 2026-02-19 must be ordered by "
                         "2026-01-31, the plan's first day"]
    assert flags(20) == ["order now: with a lead time of 20 days the GPUs needed from 2026-02-19 had to be ordered by "
                         "2026-01-30; ordered now they arrive 2026-02-20, 1 day after they are needed"]


def test_a_plan_of_no_days_needs_no_gpus() -> None:
    result = make_plan(climbing(), 10, PlanSettings(**{**FAST.__dict__, "horizon_days": 0}))
    assert result.capacity["required_gpus"] == 0 and result.days == [] and result.months == []
    assert {row["required_gpus"] for row in result.scenarios} == {0}


def test_the_forecast_summary_reports_the_chosen_models_scores() -> None:
    forecast = make_plan(climbing(), 40, FAST).forecast
    assert forecast["mase"] == forecast["models"][forecast["model"]] is not None
    assert forecast["baseline_mase"] == forecast["models"][forecast["baseline"]] is not None
    assert 0.0 <= forecast["coverage_80"] <= forecast["coverage_95"] <= 1.0
    assert all(isinstance(v, float) and v >= 0.0 for v in forecast["fit_s"].values())
    assert all(isinstance(v, float) for values in forecast["per_origin"]["mase"].values() for v in values)
    assert isinstance(forecast["backtest_s"], float) and forecast["backtest_s"] == round(forecast["backtest_s"], 2)
    assert forecast["gate"] is not None and forecast["gate"]["shipped_candidate"] is False


def test_scenarios_use_each_quantiles_own_rise() -> None:
    # Rises above the last week's median vary from day to day: the median rise is below the 95% one.
    index = pd.date_range("2026-01-01", periods=30 * 24, freq="h", tz="UTC")
    day = np.arange(len(index)) // 24
    peak = 20.0 + (day * 7) % 5  # 20, 22, 24, 21, 23, ... in a five-day cycle
    series = pd.Series(np.where(np.arange(len(index)) % 24 == 12, peak, 10.0), index=index)
    rows = make_plan(series, 100, FAST).scenarios
    need = {(r["quantile"], r["target_utilisation"]): r["required_gpus"] for r in rows}
    assert need[(0.5, 0.5)] < need[(0.95, 0.5)]


def test_reported_figures_are_rounded_to_their_stated_decimals() -> None:
    # Peaks grow a third of a GPU a day: level 10 + 26 / 3, the rise over last week's median 4 / 3.
    result = make_plan(climbing(slope=1 / 3), 20, FAST)
    assert result.growth == {"peak_level_gpus": 18.7, "peak_growth_gpus_per_day": 0.333,
                             "measured_growth_gpus_per_day": 0.333, "upper_offset_gpus": 1.3, "window_days": 28.0}
    assert (result.days[1]["peak_gpus"], result.days[1]["upper_peak_gpus"]) == (19.3, 20.7)
    assert result.scenarios[0]["run_out_date"] == "2026-01-31"


def test_size_by_model_rounds_its_figures_and_plans_no_days_as_no_gpus() -> None:
    settings = PlanSettings(horizon_days=0, target_utilisation=1.0, max_wait_probability=1.0)
    (row,) = size_by_model({"A100": climbing(slope=1 / 3)}, {"A100": 9}, settings)
    assert (row["peak_gpus"], row["growth_gpus_per_day"], row["upper_offset_gpus"]) == (18.7, 0.333, 1.3)
    assert row["required_gpus"] == 0 and row["run_out_date"] is None


@pytest.mark.parametrize("scale", [0.06, 1.0])  # small values: some bands reach below zero
def test_the_day_ahead_is_the_shipped_models_forecast_with_its_calibrated_bands(scale: float) -> None:
    from greengpu.forecast.backtest import prepare, run_backtest
    from greengpu.forecast.calibration import calibrate_best, from_scale, to_scale
    from greengpu.forecast.models import guarded

    series = climbing(slope=1 / 3) * scale
    result = make_plan(series, None, FAST)
    model = result.forecast["model"]
    hourly = prepare(series).series
    backtest = run_backtest(hourly, horizon_h=24, origins=3, min_train_h=14 * 24, models=BASELINES)
    calibration = calibrate_best(backtest, model)
    assert result.forecast["bands"]["scale"] == calibration.scale
    point = guarded(next(m for m in BASELINES if m.name == model), hourly, 24).values
    centre = to_scale(point, calibration.scale)
    expected = []
    for step, when in enumerate(pd.date_range("2026-01-31", periods=24, freq="h", tz="UTC")):
        row = {"time": when.isoformat(), "gpus": round(max(0.0, float(point[step])), 1)}
        for level, tag in ((0.8, 80), (0.95, 95)):
            for side, offsets in (("lower", calibration.lower[level]), ("upper", calibration.upper[level])):
                edge = from_scale(np.array([centre[step] + offsets[step]]), calibration.scale)[0]
                row[f"{side}_{tag}"] = round(max(0.0, float(edge)), 1)
        expected.append(row)
    assert result.day_ahead == expected


def test_a_shipped_candidates_day_ahead_is_fitted_on_the_last_three_weeks(monkeypatch: pytest.MonkeyPatch) -> None:
    from greengpu.forecast.models import ModelSpec

    seen: list[int] = []
    series = climbing(days=30)

    def perfect_hourly(history: pd.Series, horizon: int) -> np.ndarray:
        seen.append(len(history))
        start = history.index[-1] + pd.Timedelta(hours=1)
        return series.reindex(pd.date_range(start, periods=horizon, freq="h")).fillna(
            series.iloc[-1]).to_numpy(dtype=float)

    candidates = BASELINES + (ModelSpec("perfect", "candidate", perfect_hourly),)
    settings = PlanSettings(**{**FAST.__dict__, "origins": 5, "models": candidates})  # 5 wins pass the sign test
    result = make_plan(series, None, settings)
    assert result.forecast["model"] == "perfect" and result.forecast["shipped_candidate"] is True
    assert seen[-1] == 21 * 24  # the day ahead: the candidate's window of the 720 hours
    baseline_only = make_plan(series, None, FAST)
    assert baseline_only.day_ahead[0]["gpus"] == round(float(guarded_naive(series, baseline_only)), 1)


def guarded_naive(series: pd.Series, result: object) -> float:
    """The first hour of the shipped baseline's forecast from the whole history."""
    from greengpu.forecast.models import guarded

    model = result.forecast["model"]  # type: ignore[attr-defined]
    return float(guarded(next(m for m in BASELINES if m.name == model), series, 24).values[0])
