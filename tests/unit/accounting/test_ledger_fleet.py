"""One ledger for several clusters, on the SQLite file (the PostgreSQL server's tests are in
tests/integration/test_fleet_ledger_pg.py): schema migrations, a metering period charged once, and a fleet
report whose rows and totals add up to the per-cluster reports to the cent and the gram."""

from __future__ import annotations

import contextlib
import datetime as dt
import sqlite3
from pathlib import Path

import pytest
from fleet_inputs import report_json, run_cli, units, write_cluster, write_trace

from greengpu.accounting.attribution import Attribution
from greengpu.accounting.ledger import runs
from greengpu.accounting.ledger_schema import SCHEMA_VERSION, statements
from greengpu.accounting.ledger_sqlite import schema_version
from greengpu.accounting.ledger_write import append_usage, open_metered_run
from greengpu.accounting.meter import EnergyMeter
from greengpu.model import Site

MONTH = "2024-03"
FIRST = dt.datetime(2024, 3, 4, tzinfo=dt.UTC)
KEYS = ("gpu_hours", "energy_kwh", "cost", "co2_kg")


def replay(folder: Path, ledger: str, cluster: str, *policies: str, seed: int = 1) -> None:
    trace = write_trace(folder / f"{cluster}-{seed}.trace.csv", FIRST, seed=seed)
    args = ["-q", "simulate", "--trace", str(trace), "--cluster", str(write_cluster(folder, cluster)),
            "--ledger", ledger, "--json"]
    for policy in policies or ("default",):
        args += ["--policy", policy]
    code, _, err = run_cli(*args)
    assert code == 0, err


def test_a_version_1_ledger_is_read_as_it_is_and_migrated_by_the_next_writer(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    with contextlib.closing(sqlite3.connect(path)) as db:
        for statement in statements(1, "sqlite"):
            db.execute(statement)
        db.execute("INSERT INTO meta VALUES ('schema_version', '1')")
        db.execute("INSERT INTO runs VALUES (1, 'simulate', 'default', 't', '2024-03-01', 'USD', 1.2)")
        db.execute("INSERT INTO node_hours VALUES (1, ?, 'n1', 2, 1, 2, 0.5, 0.7, 0)", (FIRST.timestamp(),))
        db.execute("INSERT INTO tenant_hours VALUES (1, ?, 'a', 1, 0.5, 1, 0.25, 0.3)", (FIRST.timestamp(),))
        db.commit()
    before = path.read_bytes()
    assert [r["cluster"] for r in runs(path)] == [""]
    payload = report_json("--ledger", str(path), "--month", MONTH)
    assert payload["totals"]["cost"] == 0.5 and path.read_bytes() == before  # read, never migrated by a reader
    assert schema_version(path) == 1
    unnamed = report_json("--ledger", str(path), "--month", MONTH, "--aggregate", "cluster")
    assert [(r["name"], r["cost"]) for r in unnamed["rows"]] == [("(unnamed)", 0.25)]
    open_metered_run(path, Site(), policy="p", source="s", cluster="east")
    assert schema_version(path) == SCHEMA_VERSION == 3
    assert [(r["run_id"], r["cluster"]) for r in runs(path)] == [(1, ""), (2, "east")]
    assert report_json("--ledger", str(path), "--month", MONTH, "--run", "1")["totals"]["cost"] == 0.5


def test_a_metering_period_sent_twice_is_charged_once(tmp_path: Path) -> None:
    path = tmp_path / "ledger.db"
    site = Site(pue=1.5, price_per_kwh=0.2, carbon_g_per_kwh=400)
    run_id = open_metered_run(path, site, policy="default", source="fake", cluster="east")
    attribution = Attribution(EnergyMeter(site))
    start_s = FIRST.timestamp()
    attribution.node_draw("n1", 2, start_s, start_s + 60, 500.0, 300.0, False)
    assert append_usage(path, run_id, attribution, start_s=start_s, end_s=start_s + 60)
    assert not append_usage(path, run_id, attribution, start_s=start_s, end_s=start_s + 60)  # a retry: no-op
    with contextlib.closing(sqlite3.connect(path)) as db:
        (energy, periods), = db.execute("SELECT SUM(energy_kwh), (SELECT COUNT(*) FROM metered_periods) "
                                        "FROM node_hours").fetchall()
    assert periods == 1
    assert energy == pytest.approx((500 + 300) * 60 / 3600 / 1000 * 1.5)


def test_the_fleet_report_adds_up_to_the_per_cluster_reports(tmp_path: Path) -> None:
    ledger = str(tmp_path / "fleet.db")
    for cluster in ("east", "west", "burst"):
        replay(tmp_path, ledger, cluster)
    fleet = report_json("--ledger", ledger, "--month", MONTH, "--aggregate", "cluster")
    assert [r["name"] for r in fleet["rows"]] == ["burst", "east", "west"]
    assert all(r["cluster"] == r["name"] for r in fleet["rows"])
    per_cluster = {c: report_json("--ledger", ledger, "--month", MONTH, "--cluster-name", c)
                   for c in ("east", "west", "burst")}
    for key in KEYS:
        assert units(fleet["totals"][key], key) == sum(units(p["totals"][key], key) for p in per_cluster.values())
        assert units(fleet["totals"][key], key) == (sum(units(r[key], key) for r in fleet["rows"])
                                                    + units(fleet["idle"][key], key))
        for row in fleet["rows"]:  # a cluster's row is its report's rows, its idle kept apart
            assert units(row[key], key) == sum(units(t[key], key) for t in per_cluster[row["name"]]["tenants"])
    shared = report_json("--ledger", ledger, "--month", MONTH, "--aggregate", "cluster", "--share-idle",
                         "proportional")
    for row in shared["rows"]:
        assert row["cost"] == per_cluster[row["name"]]["totals"]["cost"]
        assert row["co2_kg"] == per_cluster[row["name"]]["totals"]["co2_kg"]
    tenants = report_json("--ledger", ledger, "--month", MONTH, "--fleet")
    assert {t["name"] for t in tenants["rows"]} == {"a", "b"}  # one row per tenant across the clusters
    assert sorted(tenants["rows"][0]["clusters"]) == ["burst", "east", "west"]
    assert tenants["totals"]["cost"] == fleet["totals"]["cost"]
    nodes = report_json("--ledger", ledger, "--month", MONTH, "--fleet", "--aggregate", "node")
    assert "east/n1" in {r["name"] for r in nodes["rows"]}  # a node's name is its cluster's own
    for output in ("text", "csv", "html"):
        code, out, err = run_cli("report", "--ledger", ledger, "--month", MONTH, "--aggregate", "cluster",
                                 "--format", output)
        assert code == 0, err  # (stderr may hold matplotlib's log lines, through handlers earlier tests left)
        assert "west" in out and "None" not in out.replace("none", "")
        if output != "csv":
            assert ("Runs 1, 2, 3" if output == "html" else "runs 1, 2, 3") in out and "PUE of each run" in out


def test_two_policies_of_one_cluster_are_not_added_up(tmp_path: Path) -> None:
    ledger = str(tmp_path / "fleet.db")
    replay(tmp_path, ledger, "east", "always-on", "default")
    code, _, err = run_cli("report", "--ledger", ledger, "--month", MONTH, "--aggregate", "cluster")
    assert code == 2 and err.count("\n") == 1 and "alternatives cannot be added up" in err, err
    code, _, err = run_cli("report", "--ledger", ledger, "--month", MONTH, "--cluster-name", "nowhere")
    assert code == 2 and "no run of cluster 'nowhere'" in err and "'east'" in err, err
    code, _, err = run_cli("report", "--ledger", ledger, "--month", MONTH, "--run", "1", "--run", "2",
                           "--baseline", "1")
    assert code == 2 and "--baseline" in err, err
    assert report_json("--ledger", ledger, "--month", MONTH, "--run", "2", "--baseline", "1")["baseline"]


@pytest.mark.parametrize(("url", "words"), [
    ("postgresql://u@/", "names no database"),
    ("postgresql://u@/db", "names no server"),
    ("postgresql://u@host:99999/db", "not a PostgreSQL URI"),
    ("postgresql://u@host/db;drop", "is not a database name"),
    ("postgres://u@host/db#x", "no #fragment"),
])
def test_a_bad_postgresql_uri_is_one_line_before_any_connection(tmp_path: Path, url: str, words: str) -> None:
    for args in (("report", "--ledger", url, "--month", MONTH),
                 ("simulate", "--trace", str(write_trace(tmp_path / "t.csv", FIRST)), "--cluster",
                  str(write_cluster(tmp_path, "east")), "--policy", "default", "--ledger", url)):
        code, _, err = run_cli(*args)
        assert code == 2 and err.count("\n") == 1 and words in err and "Traceback" not in err, err
