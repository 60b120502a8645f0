"""A Philly replay billed end to end: `greengpu simulate --ledger` with always-on and default over the last
day of October 2017 and the first of November, then `greengpu report` for both months in every format,
priced at the Virginia time-of-use rate (the real OpenEI document), with market-based CO2 and savings
against always-on; the HTML page renders in a real headless Chromium with its charts."""

from __future__ import annotations

import contextlib
import csv
import datetime as dt
import io
import json
import re
import sqlite3
import subprocess
from pathlib import Path
from zoneinfo import ZoneInfo

import numpy as np
import pytest
from conftest import REPO, public_data
from test_plan_html import chromium, has_colour

WINDOW = ("2017-10-31 12:00:00", "2017-11-01 12:00:00")
COST_RGB = (0x1F, 0x6F, 0xB4)
CO2_RGB = (0x38, 0x76, 0x1D)
IDLE_RGB = (0xE6, 0x91, 0x38)
SAVED_RGB = (0x67, 0x4E, 0xA7)
SETTINGS = """currency: USD
country_iso_code: USA
region: Virginia
pue: 1.3
pue_source: design figure of the hall (test)
tariff:
  openei: {openei}
  timezone: America/New_York
carbon:
  location: {{flat_g_per_kwh: 400, source: grid average (test)}}
  market:
    residual_mix_g_per_kwh: 520
    source: residual mix (test)
    contracts: [{{name: wind PPA, g_per_kwh: 0, kwh_per_month: 500}}]
"""
# Virginia EV rate (data/openei-urdb): period by local hour, the same every day and month; rate + adj.
PERIOD_BY_HOUR = [1, 0, 0, 0, 0, 1] + [2] * 16 + [1, 1]
RATES = [0.01679 + 0.03255, 0.04944 + 0.03255, 0.14284 + 0.03255]


def greengpu(*args: str) -> str:
    """`greengpu ARGS` in this process, as the console script runs it (no interpreter start per report)."""
    from greengpu.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(args))
    assert code == 0, err.getvalue()
    return out.getvalue()


@pytest.fixture(scope="module")
def replay(tmp_path_factory: pytest.TempPathFactory) -> Path:
    work = tmp_path_factory.mktemp("philly-report")
    with public_data("philly-2017/philly.csv").open(newline="") as handle:
        rows = list(csv.reader(handle))
    window = [r for r in rows[1:] if WINDOW[0] <= r[0] < WINDOW[1]]
    assert len(window) > 300
    with (work / "window.csv").open("w", newline="") as handle:
        csv.writer(handle).writerows([rows[0], *window])
    (work / "report.yaml").write_text(SETTINGS.format(openei=public_data("openei-urdb/openei_urdb_virginia.json")))
    greengpu("-q", "simulate", "--trace", str(work / "window.csv"), "--trace-format", "philly", "--cluster",
             str(REPO / "examples" / "philly.cluster.yaml"), "--policy", "always-on", "--policy", "default",
             "--until", str(2 * 86400), "--ledger", str(work / "ledger.db"), "--json")
    return work


def report(work: Path, month: str, *extra: str) -> str:
    return greengpu("report", "--ledger", str(work / "ledger.db"), "--month", month, "--run", "2", "--baseline", "1",
                    "--settings", str(work / "report.yaml"), *extra)


def tou_cost(ledger: Path, month: str, run_id: int) -> float:
    """The month's facility energy at the Virginia periods, hour by hour, computed here from the ledger."""
    start = dt.datetime.strptime(month, "%Y-%m").replace(tzinfo=dt.UTC)
    end = (start + dt.timedelta(days=32)).replace(day=1)
    with contextlib.closing(sqlite3.connect(ledger)) as db:
        hours = db.execute("SELECT hour_start_s, SUM(energy_kwh) FROM node_hours WHERE run_id = ? AND hour_start_s "
                           ">= ? AND hour_start_s < ? GROUP BY hour_start_s", (run_id, start.timestamp(),
                                                                               end.timestamp())).fetchall()
    eastern = ZoneInfo("America/New_York")
    return sum(kwh * 1.3 / 1.4 * RATES[PERIOD_BY_HOUR[dt.datetime.fromtimestamp(h, eastern).hour]]
               for h, kwh in hours)


@pytest.mark.parametrize("month", ["2017-10", "2017-11"])
def test_philly_months_in_every_format_with_savings_against_always_on(replay: Path, month: str) -> None:
    payload = json.loads(report(replay, month, "--json"))
    assert payload["period"] == month and payload["policy"] == "default" and payload["basis"] == "modelled"
    assert payload["pricing"]["tariff"]["kind"] == "time-of-use"
    assert "Virginia Electric & Power Co" in payload["pricing"]["tariff"]["source"]
    assert payload["totals"]["cost"] == pytest.approx(tou_cost(replay / "ledger.db", month, 2), abs=0.011)
    assert payload["totals"]["co2_kg"] == pytest.approx(payload["totals"]["energy_kwh"] * 0.4, abs=0.002)
    assert payload["totals"]["co2_market_kg"] < payload["totals"]["energy_kwh"] * 0.52  # the PPA covered 500 kWh
    baseline = payload["baseline"]
    assert baseline["policy"] == "always-on" and "counterfactual: run 1 (policy always-on)" in baseline["method"]
    # Default sleeps idle nodes: it saves energy, money and CO2 against always-on in both months.
    assert baseline["totals"]["energy_kwh"] > 0 and baseline["totals"]["cost"] > 0 and baseline["totals"]["co2_kg"] > 0
    assert len(payload["tenants"]) >= 5 and payload["trend"][-1]["period"] == month

    text = report(replay, month)
    assert f"greengpu report {month}" in text and "savings against run 1 (always-on)" in text
    table = list(csv.DictReader(io.StringIO(report(replay, month, "--format", "csv"))))
    assert {r["tenant"] for r in table} >= {t["tenant"] for t in payload["tenants"]} | {"TOTAL", "(idle)"}
    total = next(r for r in table if r["tenant"] == "TOTAL")
    assert float(total["cost"]) == payload["totals"]["cost"]
    assert float(total["saved_cost"]) == baseline["totals"]["cost"]
    assert total["country_iso_code"] == "USA" and float(total["pue"]) == 1.3
    report(replay, month, "--format", "html", "--out", str(replay / "philly-{month}.html"))
    page = (replay / f"philly-{month}.html").read_text()
    assert f"greengpu report {month}" in page and 'id="chart-savings"' in page and "Saved against always-on" in page


def test_philly_html_is_byte_identical_and_renders_with_its_charts(replay: Path) -> None:
    browser = chromium()
    pages = []
    for name in ("first.html", "second.html"):
        report(replay, "2017-11", "--format", "html", "--share-idle", "proportional", "--out", str(replay / name))
        pages.append(replay / name)
    assert pages[0].read_bytes() == pages[1].read_bytes()
    html = pages[0].read_text()
    # Self-contained: no scripts, no stylesheet links, nothing fetched (XML namespace names are not fetched).
    assert "<script" not in html and "<link" not in html and "@import" not in html
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:|//|file:)""", html)
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--window-size=1200,4000"]
    dom = subprocess.run([browser, *flags, "--dump-dom", pages[0].as_uri()], capture_output=True, text=True,
                         timeout=120, check=False)
    assert dom.returncode == 0, dom.stderr[-2000:]
    for figure_id in ("chart-rows", "chart-days", "chart-savings", "chart-trend"):
        start = dom.stdout.index(f'id="{figure_id}"')
        assert "<svg" in dom.stdout[start:start + 400], f"{figure_id} has no SVG in the rendered DOM"
    for table_id in ("sources", "market", "rows", "savings", "trend"):
        assert f'id="{table_id}"' in dom.stdout
    screenshot = replay / "report.png"
    shot = subprocess.run([browser, *flags, f"--screenshot={screenshot}", pages[0].as_uri()], capture_output=True,
                          text=True, timeout=120, check=False)
    assert shot.returncode == 0 and screenshot.exists(), shot.stderr[-2000:]
    import matplotlib.image

    pixels = matplotlib.image.imread(str(screenshot))
    assert pixels.shape[:2] == (4000, 1200)
    assert float(np.std(pixels[:, :, :3])) > 0.05, "the screenshot is blank"
    assert has_colour(pixels, COST_RGB) > 500, "the cost bars are not on the page"
    assert has_colour(pixels, CO2_RGB) > 200, "the CO2 bars are not on the page"
    assert has_colour(pixels, IDLE_RGB) > 300, "the idle share by day is not on the page"
    assert has_colour(pixels, SAVED_RGB) > 300, "the savings bars are not on the page"


def test_the_scheduled_reports_of_the_first_of_december_bill_november(replay: Path) -> None:
    from greengpu.report.monthly_main import write_scheduled_reports
    from greengpu.report.settings import read_settings

    folder = replay / "reports"
    folder.mkdir()
    first_of_december = dt.datetime(2017, 12, 1, 0, 30, tzinfo=dt.UTC)
    written = write_scheduled_reports(replay / "ledger.db", 2, folder, first_of_december,
                                      read_settings(str(replay / "report.yaml")))
    assert [p.name for p in written] == ["greengpu-2017-11.html", "greengpu-2017-11.csv", "greengpu-2017-11.json"]
    assert sorted(p.name for p in folder.iterdir()) == sorted(p.name for p in written)  # no partial file left
    assert json.loads((folder / "greengpu-2017-11.json").read_text()) == json.loads(report(replay, "2017-11", "--json")
                                                                                    ) | {"baseline": None}
