"""`greengpu plan` with no arguments, as an installed user runs it: the package alone (no checkout beside
it), from another directory, its output piped. One run, shared by the tests below (a full plan takes
10-30 s): the example ships inside the package, progress reaches stderr, every daily origin is backtested,
the long-horizon gate says it cannot pass on 4 origins, and each line a planner found confusing on this
example reads as it should."""

from __future__ import annotations

import fnmatch
import html
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from conftest import REPO
from rich.console import Console

from greengpu.report.plan_text import gpus, render_text


@pytest.fixture(scope="module")
def bundled(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("installed")
    site, elsewhere = root / "site", root / "elsewhere"
    # The package as a wheel installs it: greengpu/ alone, no forecasts/ or examples/ beside it.
    shutil.copytree(REPO / "greengpu", site / "greengpu", ignore=shutil.ignore_patterns("__pycache__"))
    elsewhere.mkdir()
    html = elsewhere / "plan.html"
    done = subprocess.run([sys.executable, "-m", "greengpu", "plan", "--json", "--html", str(html)],
                          capture_output=True, text=True, timeout=600, cwd=elsewhere, check=False,
                          env={**os.environ, "PYTHONPATH": str(site)})
    assert done.returncode == 0, done.stderr
    return {"site": site, "payload": json.loads(done.stdout), "stderr": done.stderr, "html": html.read_text()}


def printed(payload: dict[str, Any]) -> list[str]:
    out = io.StringIO()
    render_text(payload, Console(file=out, width=1000, color_system=None))
    return out.getvalue().splitlines()


def test_the_example_ships_inside_the_package_and_runs_from_any_directory(bundled: dict[str, Any]) -> None:
    payload = bundled["payload"]
    assert Path(payload["history"]["source"]).parent == bundled["site"] / "greengpu" / "plan_example"
    assert payload["capacity"]["required_gpus"] > 0  # what CI asserts of this run
    assert "Data: derived from the Philly trace" in "\n".join(printed(payload))


def test_every_file_of_the_example_is_package_data_and_its_cluster_is_the_shipped_example() -> None:
    globs = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["greengpu"]
    example = REPO / "greengpu" / "plan_example"
    for path in example.iterdir():
        relative = path.relative_to(REPO / "greengpu").as_posix()
        assert any(fnmatch.fnmatch(relative, pattern) for pattern in globs), f"{relative} would not be installed"
    assert (example / "philly.cluster.yaml").read_bytes() == (REPO / "examples" / "philly.cluster.yaml").read_bytes()
    assert (REPO / "forecasts" / "plan.yaml").resolve() == (example / "plan.yaml").resolve()


def test_piped_progress_goes_to_stderr(bundled: dict[str, Any]) -> None:
    lines = bundled["stderr"].splitlines()
    assert lines and all(line.startswith("greengpu plan: ") for line in lines)
    counts = [re.fullmatch(r"greengpu plan: day-ahead backtest: (\d+) of (\d+) tasks \(\d+ s\)", line)
              for line in lines if line.startswith("greengpu plan: day-ahead backtest: ")]
    assert counts and all(counts)
    done, total = counts[-1].groups()  # type: ignore[union-attr]
    assert done == total  # the phase's last line counts every task done


def test_every_daily_origin_is_backtested_by_default(bundled: dict[str, Any]) -> None:
    payload = bundled["payload"]
    first, last = pd.Timestamp(payload["history"]["first"]), pd.Timestamp(payload["history"]["last"])
    # One origin a day from the first with 14 days of history before it to the last leaving 24 hours.
    hours = int((last - first) / pd.Timedelta(hours=1)) + 1
    assert payload["forecast"]["origins"] == (hours - 24 - 14 * 24) // 24 + 1
    assert len(payload["forecast"]["per_origin"]["times"]) == payload["forecast"]["origins"]
    gate = payload["forecast"]["gate"]
    assert gate["power"]["untied_origins"] == gate["wins"] + gate["losses"]


def test_the_long_horizon_gate_on_four_origins_explains_that_it_cannot_pass(bundled: dict[str, Any]) -> None:
    daily = bundled["payload"]["forecast"]["daily"]
    days = len(bundled["payload"]["history"]["daily_peaks"])
    assert daily["origins"] == days - 42 + 1 == 4 and daily["can_ship"] is False
    line = next(line for line in printed(bundled["payload"]) if line.startswith("Long horizon: "))
    assert line.startswith(f"Long horizon: daily peaks (4 origins, 14-day horizon): the long-horizon gate cannot ship "
                           f"a model on 4 origins; it needs 10, so 51 days of history (this one has {days}: "
                           f"{51 - days} more days would do)")
    assert daily["gate"]["can_pass"] is False
    assert daily["gate"]["power"]["text"] == ("the gate cannot pass on 4 untied origins: even 4 wins of 4 give "
                                              "p = 0.0625 > 0.05; the sign test needs at least 5 untied origins")


def test_already_short_is_the_headline_and_the_order_by_date_is_not_before_the_data(bundled: dict[str, Any]) -> None:
    payload = bundled["payload"]
    capacity, history = payload["capacity"], payload["history"]
    lines = printed(payload)
    # The history ends the day before the plan's first day; run-out on that day is "already short".
    assert capacity["plan_start_date"] == (pd.Timestamp(history["last"]) + pd.Timedelta(days=1)).date().isoformat()
    assert capacity["run_out_date"] == capacity["plan_start_date"] and capacity["already_short"]
    assert lines[1] == (f"Capacity: already short. {gpus(capacity['installed_gpus'])} GPUs installed; "
                        f"{gpus(capacity['required_now_gpus'])} needed from the plan's first day "
                        f"({capacity['plan_start_date']}) and {gpus(capacity['required_gpus'])} within "
                        f"{capacity['horizon_days']} days. Order now: with a lead time of 84 days they arrive "
                        f"{capacity['arrival_date']}, 84 days after they are needed.")
    assert capacity["order_by_date"] == capacity["plan_start_date"] >= history["first"][:10]
    by_lead_time = capacity["order_by_lead_time_date"]
    assert by_lead_time < history["first"][:10]  # run-out minus 84 days: before the data, so said
    assert any(line.endswith(f"had to be ordered by {by_lead_time} (before the history starts on "
                             f"{history['first'][:10]}); ordered now they arrive {capacity['arrival_date']}, 84 days "
                             "after they are needed") for line in lines)
    escaped = html.escape(lines[1], quote=False).replace("'", "&#39;")  # as Jinja's autoescape writes it
    assert f'id="headline">{escaped}</p>' in bundled["html"]


def test_a_clamped_fall_reads_as_a_rate_with_its_unit_not_as_growth(bundled: dict[str, Any]) -> None:
    payload = bundled["payload"]
    growth, inputs = payload["growth"], payload["inputs"]
    assert growth["measured_growth_gpus_per_day"] < 0 == growth["peak_growth_gpus_per_day"]
    lines = printed(payload)
    per_day, per_month = -growth["measured_growth_gpus_per_day"], -inputs["measured_growth_gpus_per_month"]
    line = next(line for line in lines if line.startswith("Daily peak demand: "))
    assert "growing" not in line
    assert (f"planned flat: peaks fell {per_day:.2f} GPUs/day ({gpus(per_month)} GPUs/month, Theil-Sen over the "
            "last 28 days) and the plan does not count on a fall") in line
    row = next(line for line in lines if "growth of daily peaks" in line)
    assert (f"+0 GPUs/month: planned flat (measured: -{gpus(per_month)} GPUs/month over the last 28 days; a fall is "
            "not planned)") in row


def test_the_bands_stay_plausible_and_every_gpu_figure_has_one_format(bundled: dict[str, Any]) -> None:
    payload = bundled["payload"]
    ahead = payload["day_ahead"]
    lowest_seen = min(value for _, value in payload["history"]["recent"])
    for row in ahead:
        # The 95% band is wider than the 80% one, but not by an order of magnitude below it, and it does not
        # fall to nothing where demand has never gone near zero.
        assert row["lower_95"] <= row["lower_80"] <= row["upper_80"] <= row["upper_95"]
        assert row["lower_95"] >= row["lower_80"] / 10 and row["lower_95"] > lowest_seen / 10
    lines = printed(payload)
    band = next(line for line in lines if line.startswith("Next 24 hours ("))
    low95 = min(row["lower_95"] for row in ahead)
    assert f"the 95% band {gpus(low95)}-" in band
    for line in lines:
        for token in line.replace("│", " ").replace("(", " ").split():
            digits = token.rstrip(".,;)").lstrip("+-")
            # A count of a thousand or more is grouped (1,414), never bare (1414); dates and years aside.
            assert not (digits.isdigit() and len(digits) >= 4 and not digits.startswith(("20", "19"))), line
    months = [line for line in lines if line.startswith("│ 20")]
    assert months and all(gpus(m["required_gpus"]) in row for m, row in zip(payload["months"], months, strict=False))


def test_the_capacity_chart_starts_where_the_data_starts(bundled: dict[str, Any]) -> None:
    import matplotlib
    import matplotlib.dates as mdates

    from greengpu.report.plan_html import SVG_RC, capacity_figure

    matplotlib.use("Agg")
    payload = bundled["payload"]
    with matplotlib.rc_context(SVG_RC):
        figure = capacity_figure(payload)
    low, high = figure.axes[0].get_xlim()
    assert mdates.num2date(low).date().isoformat() == payload["history"]["daily_peaks"][0][0]
    assert mdates.num2date(high).date().isoformat() == payload["days"][-1]["day"]
