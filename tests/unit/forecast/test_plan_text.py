"""What `greengpu plan` prints, line by line, on synthetic histories whose figures are worked out by hand:
units on every rate, a clamped trend said as such, "already short" when run-out is the first planned day,
an order-by date that has passed said as "order now" with the arrival, one number format, and a capacity
chart that starts where the data starts."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from rich.console import Console

from greengpu.forecast.models import BASELINES
from greengpu.forecast.plan import make_plan
from greengpu.forecast.plan_types import PlanResult, PlanSettings
from greengpu.report.plan_text import bands_line, gpus, growth_line, growth_text, headline, render_text, signed


def growing(days: int = 35, growth_per_day: float = 2.0) -> pd.Series:
    """Day d (from 2026-03-02) peaks at hour 6 at 110.5 + growth x d (a sine of 10 around a line)."""
    index = pd.date_range("2026-03-02", periods=days * 24, freq="h", tz="UTC")
    t = np.arange(len(index))
    return pd.Series(100 + growth_per_day * t / 24 + 10 * np.sin(2 * np.pi * t / 24), index=index)


def payload_of(result: PlanResult, series: pd.Series) -> dict[str, Any]:
    return {"forecast": result.forecast, "capacity": result.capacity, "months": result.months,
            "growth": result.growth, "flags": result.flags, "inputs": result.inputs, "scenarios": result.scenarios,
            "days": result.days, "day_ahead": result.day_ahead,
            "history": {"source": "synthetic.csv", "demand": "busy + pending, from the history",
                        "hours": len(series), "first": series.index[0].isoformat(),
                        "last": series.index[-1].isoformat(), "credit": "",
                        "daily_peaks": [[d.date().isoformat(), float(v)]
                                        for d, v in series.resample("D").max().items()]}}


def plan(series: pd.Series, installed: int | None, lead_time_days: int) -> dict[str, Any]:
    # 100% utilisation, no spare, no wait rule: GPUs needed on a day = ceil(its upper peak).
    settings = PlanSettings(horizon_days=120, lead_time_days=lead_time_days, target_utilisation=1.0,
                            redundancy_gpus=0, max_wait_probability=1.0, models=BASELINES, daily_candidates=False,
                            workers=1)
    return payload_of(make_plan(series, installed, settings), series)


# Worked out in tests/unit/forecast/test_plan.py for this series: level 172.5, growth 2.0/day, upper offset 8, so
# day k ahead (k = 1 is 2026-04-06) needs ceil(180.5 + 2 k) GPUs: 183 on the first day, 421 on the 120th.


def test_a_run_out_with_time_to_order_names_the_order_by_date() -> None:
    payload = plan(growing(), 250, 28)  # 251 needed from k = 35: 2026-05-10; ordered 28 days before
    assert headline(payload) == ("Capacity: runs out 2026-05-10: 250 GPUs installed, 421 needed within 120 days. "
                                 "Order by 2026-04-12 (a lead time of 28 days).")
    assert payload["capacity"]["late_days"] == 0 and payload["capacity"]["already_short"] is False
    assert not any(flag.startswith("order") for flag in payload["flags"])


def test_an_order_by_date_that_has_passed_says_order_now_and_when_they_arrive() -> None:
    payload = plan(growing(), 250, 60)  # by the lead time, 2026-03-11: before the plan's first day, 2026-04-06
    capacity = payload["capacity"]
    assert (capacity["order_by_date"], capacity["order_by_lead_time_date"]) == ("2026-04-06", "2026-03-11")
    assert (capacity["arrival_date"], capacity["late_days"]) == ("2026-06-05", 26)  # 60 days on; 26 after 05-10
    assert headline(payload) == ("Capacity: runs out 2026-05-10: 250 GPUs installed, 421 needed within 120 days. "
                                 "Order now: with a lead time of 60 days they arrive 2026-06-05, 26 days after they "
                                 "are needed.")
    assert ("order now: with a lead time of 60 days the GPUs needed from 2026-05-10 had to be ordered by 2026-03-11; "
            "ordered now they arrive 2026-06-05, 26 days after they are needed") in payload["flags"]


def test_run_out_on_the_first_planned_day_is_already_short_and_an_order_before_the_data_says_so() -> None:
    payload = plan(growing(), 150, 84)  # 183 needed from the first day
    capacity = payload["capacity"]
    assert capacity["already_short"] is True and capacity["run_out_date"] == capacity["plan_start_date"]
    assert headline(payload) == ("Capacity: already short. 150 GPUs installed; 183 needed from the plan's first day "
                                 "(2026-04-06) and 421 within 120 days. Order now: with a lead time of 84 days they "
                                 "arrive 2026-06-29, 84 days after they are needed.")
    # By the lead time the order was due on 2026-01-12, before the history starts (2026-03-02): said, not shown
    # as the order-by date.
    assert capacity["order_by_date"] == "2026-04-06" and capacity["order_by_lead_time_date"] == "2026-01-12"
    assert ("order now: with a lead time of 84 days the GPUs needed from 2026-04-06 had to be ordered by 2026-01-12 "
            "(before the history starts on 2026-03-02); ordered now they arrive 2026-06-29, 84 days after they are "
            "needed") in payload["flags"]


def test_enough_gpus_and_unknown_gpus_say_so() -> None:
    assert headline(plan(growing(), 1000, 84)) == ("Capacity: the 1,000 GPUs installed cover the next 120 days (at "
                                                   "most 421 needed).")
    assert headline(plan(growing(), None, 84)).startswith("Capacity: 421 GPUs needed within 120 days; installed "
                                                          "unknown (give --cluster")


def test_a_growth_is_a_rate_with_its_unit_per_day_and_per_month() -> None:
    payload = plan(growing(), 250, 28)
    assert growth_line(payload) == ("Daily peak demand: 172.5 GPUs now (median of the last 7 days); growing "
                                    "+2.00 GPUs/day (+60.9 GPUs/month, Theil-Sen over the last 28 days); the 95% "
                                    "upper peak adds 8 GPUs.")  # 2 x 365.25 / 12 = 60.875 a month
    assert growth_text(payload["inputs"], payload["growth"]) == "+60.9 GPUs/month (measured over the last 28 days)"


def test_a_falling_trend_planned_flat_says_it_was_clamped() -> None:
    payload = plan(growing(growth_per_day=-1.5), 250, 28)
    # Peaks fall 1.5 a day: 45.66 a month; the plan holds the level instead of planning the fall.
    assert payload["growth"]["peak_growth_gpus_per_day"] == 0.0
    assert payload["growth"]["measured_growth_gpus_per_day"] == -1.5
    line = growth_line(payload)
    assert "growing" not in line
    assert line.endswith("planned flat: peaks fell 1.50 GPUs/day (45.7 GPUs/month, Theil-Sen over the last 28 "
                         "days) and the plan does not count on a fall; the 95% upper peak adds 0 GPUs.")
    assert growth_text(payload["inputs"], payload["growth"]) == (
        "+0 GPUs/month: planned flat (measured: -45.7 GPUs/month over the last 28 days; a fall is not planned)")


def test_one_number_format_for_gpu_figures() -> None:
    assert [gpus(v) for v in (1000, 1414, 565.7, 0.5, 12.0, 1234567.25, None)] == [
        "1,000", "1,414", "565.7", "0.5", "12", "1,234,567.2", "n/a"]
    assert [signed(v) for v in (64, -284.0, 0.0, 1500.5)] == ["+64", "-284", "+0", "+1,500.5"]


def test_the_printed_report_uses_one_format_and_the_headline_comes_first() -> None:
    payload = plan(growing(), 1000, 28)
    out = io.StringIO()
    render_text(payload, Console(file=out, width=400, color_system=None))
    lines = out.getvalue().splitlines()
    assert lines[1] == headline(payload)
    month_rows = [line for line in lines if line.startswith("│ 2026-")]
    assert month_rows and all("," in row for row in month_rows if "1,0" in row)
    assert not any(token.isdigit() and len(token) > 3 for line in lines for token in line.replace("│", " ").split())
    assert bands_line(payload) in lines


def test_the_capacity_chart_starts_where_the_data_starts() -> None:
    import matplotlib
    import matplotlib.dates as mdates

    from greengpu.report.plan_html import SVG_RC, capacity_figure

    matplotlib.use("Agg")
    payload = plan(growing(), 150, 84)  # an order-by date 2026-01-12 by the lead time, before the data
    with matplotlib.rc_context(SVG_RC):
        figure = capacity_figure(payload)
    low, high = figure.axes[0].get_xlim()
    assert mdates.num2date(low).date().isoformat() == "2026-03-02"  # the first day of data
    assert mdates.num2date(high).date().isoformat() == payload["days"][-1]["day"]
    labels = [text.get_text() for text in figure.axes[0].texts]
    assert labels == ["run out 2026-04-06", "order now 2026-04-06"]


def test_the_wider_band_holds_the_narrower_one() -> None:
    payload = plan(growing(), 250, 28)
    assert all(r["lower_95"] <= r["lower_80"] <= r["upper_80"] <= r["upper_95"] for r in payload["day_ahead"])


def test_piped_progress_is_plain_lines_on_stderr_and_q_silences_it(tmp_path: Path) -> None:
    series = growing(days=20)
    history = tmp_path / "history.csv"
    pd.DataFrame({"time": series.index.strftime("%Y-%m-%dT%H:%M:%SZ"), "gpus_busy": series.round(1)}).to_csv(
        history, index=False)
    command = [sys.executable, "-m", "greengpu", "plan", "--history", str(history), "--models", "baselines", "--json"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, check=True)
    json.loads(done.stdout)  # stdout stays one JSON object
    lines = done.stderr.splitlines()
    # Not a terminal: a line per phase (reading the inputs left unsaid, so a bad input has its line alone),
    # and where each backtest ended.
    assert lines[:2] == ["greengpu plan: hourly demand", "greengpu plan: backtest and plan"]
    assert any(line.startswith("greengpu plan: day-ahead backtest: ") and line.split(": ")[2].startswith("3 of 3 ")
               for line in lines)  # 30 origins within 6 days (a short history): a task per baseline
    quiet = subprocess.run([sys.executable, "-m", "greengpu", "-q", *command[3:]], capture_output=True, text=True,
                           timeout=300, check=True)
    assert quiet.stderr == ""


def test_the_plan_savings_line_never_shows_a_saving_while_the_total_rose() -> None:
    """Issue 36: the total cost (energy plus cloud, as the replay counts it) comes first, and a rise says MORE."""
    from greengpu.report.plan_text import savings_line

    rose = savings_line({"cost": -1300.0, "energy_kwh": 500.0, "co2_kg": 40.0})
    assert "total cost (energy plus cloud) 1,300 MORE" in rose and "500 kWh less" in rose and "saved" not in rose
    fell = savings_line({"cost": 62.0, "energy_kwh": -5.0, "co2_kg": 0.2})
    assert "62 less" in fell and "5 kWh MORE" in fell and "the same kg CO2" in fell
