"""Monthly bills of random ledgers conserve: under every idle-sharing rule and every row kind, the rows plus
idle add up to the totals to the cent and the gram (and the thousandth of a kWh and of a GPU-hour); the
totals are the ledger's own metering; the savings against a baseline add up too; and the CSV reads back to
the JSON's numbers. Ledgers span several months, with fractional GPUs, an hourly tariff with negative
prices, market-based instruments and embodied emissions."""

from __future__ import annotations

import contextlib
import csv
import io
import json
import math
import sqlite3
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from greengpu.accounting.attribution import Attribution
from greengpu.accounting.ledger import month_bounds_s
from greengpu.accounting.ledger_write import write_run
from greengpu.accounting.meter import EnergyMeter
from greengpu.cli import main
from greengpu.model import Job, Site, TimeSeries

OCT_1_2017 = 1_506_816_000.0
HOUR = 3600.0
NODES = {"a": 8, "b": 4}
UNITS = {"gpu_hours": 3, "gpu_hours_allocated": 3, "gpu_energy_kwh": 3, "energy_kwh": 3, "idle_energy_kwh": 3,
         "cost": 2, "co2_kg": 3, "co2_market_kg": 3, "embodied_kg": 3}
SETTINGS = """pue: 1.25
pue_source: metered, annual average
currency: EUR
country_iso_code: DEU
tariff: {hourly_csv: prices.csv, source: test market}
carbon:
  location: {flat_g_per_kwh: 380, source: grid average}
  market:
    residual_mix_g_per_kwh: 610
    source: residual mix
    contracts: [{name: ppa, g_per_kwh: 20, share: 0.3}]
    certificates_kwh_per_month: 15
embodied: {kg_per_gpu: 1500, lifetime_years: 5, source: vendor LCA}
"""


@st.composite
def ledgers(draw: st.DrawFn) -> list[list[tuple[str, str, float, float, dict[str, int]]]]:
    """Two runs of jobs: (job id, tenant, start, end, milli-GPUs by node) over about three months."""
    out = []
    for _ in range(2):
        jobs = []
        for index in range(draw(st.integers(0, 12))):
            start = OCT_1_2017 + draw(st.floats(0, 85 * 86400, allow_nan=False))
            length = draw(st.floats(60, 40 * 86400, allow_nan=False))
            node = draw(st.sampled_from(sorted(NODES)))
            units = {node: draw(st.integers(1, NODES[node] * 1000))}
            if draw(st.booleans()):
                units["b" if node == "a" else "a"] = draw(st.integers(100, 4000))
            jobs.append((f"j{index}", draw(st.sampled_from(["lab", "vision", "nlp", "x y"])), start, start + length,
                         units))
        out.append(jobs)
    return out


def write_ledger(path: Path, runs: list[list[tuple[str, str, float, float, dict[str, int]]]], prices: TimeSeries
                 ) -> None:
    for number, jobs in enumerate(runs):
        site = Site(pue=1.4, tariff=prices, carbon_g_per_kwh=400.0)
        attribution = Attribution(EnergyMeter(site))
        end = OCT_1_2017 + 92 * 86400
        for node, gpus in NODES.items():
            # The baseline run keeps nodes awake; the other sleeps them half the time.
            half = OCT_1_2017 + 46 * 86400
            attribution.node_draw(node, gpus, OCT_1_2017, half, 300.0 * gpus, 250.0, asleep=False)
            attribution.node_draw(node, gpus, half, end, 10.0 if number else 300.0 * gpus, 10.0, asleep=bool(number))
        for job_id, tenant, start, stop, units in jobs:
            job = Job(job_id=job_id, tenant=tenant, gpus=sum(units.values()) / 1000, duration_s=stop - start,
                      priority=0, submit_time_s=start, job_class="training" if len(tenant) % 2 else "inference")
            attribution.job_ran(job, units, start, stop, dict.fromkeys(units, 250.0), dict.fromkeys(units, 250.0),
                                {n: NODES[n] for n in units})
        write_run(path, attribution, kind="simulate", policy="always-on" if number == 0 else "default", source="t")


def cli(*args: str) -> str:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(args))
    assert code == 0, err.getvalue()
    return out.getvalue()


def assert_adds_up(rows: list[dict], idle: dict, totals: dict) -> None:
    for key, digits in UNITS.items():
        if totals.get(key) is None:
            continue
        added = sum(r[key] for r in rows) + idle[key]
        assert round(added, digits) == totals[key], (key, added, totals[key])
        assert round(totals[key], digits) == totals[key]


@settings(max_examples=8, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(runs=ledgers(), share=st.sampled_from(["none", "proportional", "even"]),
       aggregate=st.sampled_from(["tenant", "node", "class", "job"]),
       month=st.sampled_from(["2017-10", "2017-11", "2017-12"]), negative=st.booleans())
def test_bills_conserve_and_csv_reads_back(runs, share: str, aggregate: str, month: str, negative: bool) -> None:
    with tempfile.TemporaryDirectory() as folder:
        work = Path(folder)
        hours = [OCT_1_2017 + HOUR * k for k in range(93 * 24)]
        values = [0.05 + 0.2 * math.sin(k / 7.0) ** 2 - (0.3 if negative and k % 11 == 0 else 0.0)
                  for k in range(len(hours))]
        prices = TimeSeries(tuple(hours), tuple(round(v, 5) for v in values))
        with (work / "prices.csv").open("w") as handle:
            handle.write("time,price_per_kwh\n" + "".join(f"{t:.0f},{v}\n" for t, v in zip(hours, prices.values,
                                                                                        strict=True)))
        (work / "report.yaml").write_text(SETTINGS)
        ledger = work / "ledger.db"
        write_ledger(ledger, runs, prices)
        common = ("report", "--ledger", str(ledger), "--month", month, "--run", "2", "--aggregate", aggregate,
                  "--share-idle", share, "--baseline", "1")
        # The ledger's own pricing, then the settings' (another PUE, an hourly tariff, market-based, embodied).
        for extra in ((), ("--settings", str(work / "report.yaml"))):
            payload = json.loads(cli(*common, *extra, "--json"))
            assert_adds_up(payload["rows"], payload["idle"], payload["totals"])
            if share != "none" and payload["tenants"]:  # shared by the same rule: the tenants alone add up
                assert_adds_up(payload["tenants"], dict.fromkeys(UNITS, 0.0), payload["totals"])
            elif aggregate == "tenant":
                assert payload["tenants"] == [{"tenant": r.pop("name"), **r} for r in json.loads(
                    json.dumps(payload["rows"]))]
            if share != "none" and payload["rows"] and aggregate != "node":
                assert all(payload["idle"][k] in (0.0, None) for k in UNITS if k != "gpu_hours_allocated")
            start, end = month_bounds_s(month)
            with contextlib.closing(sqlite3.connect(ledger)) as db:
                site_kwh, site_gpu_h = db.execute(
                    "SELECT SUM(energy_kwh), SUM(gpu_hours) FROM node_hours WHERE run_id = 2 AND hour_start_s >= ? "
                    "AND hour_start_s < ?", (start, end)).fetchone()
                hourly = db.execute("SELECT hour_start_s, SUM(energy_kwh) FROM node_hours WHERE run_id = 2 AND "
                                    "hour_start_s >= ? AND hour_start_s < ? GROUP BY hour_start_s",
                                    (start, end)).fetchall()
            factor = 1.25 / 1.4 if extra else 1.0
            assert abs(payload["totals"]["energy_kwh"] - (site_kwh or 0.0) * factor) <= 0.0005 + 1e-9
            assert abs(payload["totals"]["gpu_hours"] - (site_gpu_h or 0.0)) <= 0.0005 + 1e-9
            if extra:  # the settings' hourly tariff, hour by hour, at the settings' PUE
                cost = sum(kwh * factor * prices.value_at(hour) for hour, kwh in hourly)
                assert abs(payload["totals"]["cost"] - cost) <= 0.005 + 1e-9
            assert_idle_shared_by_rule(payload, share, aggregate)
            baseline = payload["baseline"]
            for key in ("energy_kwh", "cost", "co2_kg"):
                digits = UNITS[key]
                assert round(sum(r[key] for r in baseline["rows"]), digits) == baseline["totals"][key]
            assert_csv_matches(cli(*common, *extra, "--format", "csv"), payload)


def assert_idle_shared_by_rule(payload: dict, share: str, aggregate: str) -> None:
    """Each row's idle is its share by the rule: in proportion to its allocated GPU-hours, or equal parts."""
    rows = payload["rows"]
    if share == "none" or aggregate == "node" or not rows:
        return
    idle_kwh = sum(r["idle_energy_kwh"] for r in rows)
    allocated = sum(r["gpu_hours_allocated"] for r in rows)
    for row in rows:
        expected = idle_kwh / len(rows) if share == "even" or allocated <= 0 else \
            idle_kwh * row["gpu_hours_allocated"] / allocated
        # Rounding: the allocated GPU-hours to a thousandth and the idle to a thousandth of a kWh.
        assert abs(row["idle_energy_kwh"] - expected) <= 0.002 + idle_kwh * 0.0005 * len(rows) / max(allocated, 1.0)


def assert_csv_matches(text: str, payload: dict) -> None:
    rows = list(csv.DictReader(io.StringIO(text)))
    named = {r[payload["aggregate"]]: r for r in rows}
    expected = {r["name"]: r for r in payload["rows"]}
    expected["TOTAL"] = payload["totals"]
    if "(idle)" in named:
        expected["(idle)"] = payload["idle"]
    assert set(named) == set(expected)
    for name, figures in expected.items():
        row = named[name]
        for key in UNITS:
            if key in figures:
                cell = row[key] if key in row else row[{"energy_kwh": "energy_consumed"}.get(key, key)]
                assert (float(cell) if cell else None) == figures[key], (name, key)
        assert float(row["energy_consumed"]) == figures["energy_kwh"]
        assert float(row["emissions"]) == figures["co2_kg"]
        assert float(row["pue"]) == payload["pricing"]["pue"]["value"]
