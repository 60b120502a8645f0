"""The fleet ledger on a real PostgreSQL server (started by the test from Debian's packages, tests/helpers/
pg_server.py): four writers at once, two daemons on the fake backend and two replays, then a fleet report whose
rows add up to the per-cluster reports to the cent and the gram; and a daemon killed with SIGKILL while it
meters, restarted, killed again, that loses and doubles nothing."""

from __future__ import annotations

import datetime as dt
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from fleet_inputs import report_json, units, write_cluster, write_fast_trace, write_trace
from pg_server import PgServer, pg_server

REPO = Path(__file__).resolve().parents[2]
KEYS = ("gpu_hours", "energy_kwh", "cost", "co2_kg")
ENV = {**os.environ, "PYTHONPATH": str(REPO), "GREENGPU_METER_INTERVAL_S": "0.25"}


@pytest.fixture(scope="module")
def server() -> Iterator[PgServer]:
    with pg_server() as started:
        yield started


def daemon(folder: Path, cluster: str, ledger: str, state: Path) -> subprocess.Popen[str]:
    """`greengpu daemon` on the fake backend metering into `ledger` every 0.25 s."""
    argv = [sys.executable, "-m", "greengpu.cli", "-q", "daemon", "--backend", "fake", "--source", "fake",
            "--cluster", str(write_cluster(folder, cluster)), "--policy", "default",
            "--trace", str(write_fast_trace(folder / f"{cluster}-fast.csv")), "--state", str(state),
            "--interval-s", "1", "--listen", "127.0.0.1:0", "--ledger", ledger]
    return subprocess.Popen(argv, env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def replay(folder: Path, cluster: str, ledger: str, first: dt.datetime) -> subprocess.Popen[str]:
    argv = [sys.executable, "-m", "greengpu.cli", "-q", "simulate", "--trace",
            str(write_trace(folder / f"{cluster}.trace.csv", first, jobs=60, seed=len(cluster))),
            "--cluster", str(write_cluster(folder, cluster)), "--policy", "default", "--ledger", ledger, "--json"]
    return subprocess.Popen(argv, env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def stop(process: subprocess.Popen[str], how: int = signal.SIGTERM) -> str:
    process.send_signal(how)
    _, err = process.communicate(timeout=60)
    return err


def fetch(url: str, sql: str, *parameters: object) -> list[tuple]:
    import psycopg

    with psycopg.connect(url) as connection:
        return connection.execute(sql, parameters).fetchall()


def kill_inside_a_write(url: str, process: subprocess.Popen[str]) -> str:
    """SIGKILL the daemon while its metering transaction is open for certain: the test holds a lock on
    node_hours, so the daemon's write waits inside its transaction (its period already inserted) until killed."""
    import psycopg

    with psycopg.connect(url) as holder:
        holder.execute("LOCK TABLE node_hours IN SHARE ROW EXCLUSIVE MODE")
        deadline = time.monotonic() + 30
        while not fetch(url, "SELECT 1 FROM pg_stat_activity WHERE application_name = 'greengpu' "
                             "AND wait_event_type = 'Lock' AND state = 'active'"):
            assert time.monotonic() < deadline, "the daemon never reached its write"
            time.sleep(0.02)
        err = stop(process, signal.SIGKILL)
        holder.rollback()
    return err


def periods(url: str) -> int:
    (count,), = fetch(url, "SELECT COUNT(*) FROM metered_periods") if _has_periods(url) else [(0,)]
    return int(count)


def _has_periods(url: str) -> bool:
    return bool(fetch(url, "SELECT 1 FROM information_schema.tables WHERE table_name = 'metered_periods'"))


def assert_periods_are_the_hours(url: str, run_id: int) -> int:
    """The run's hour rows hold exactly its recorded metering periods, which never overlap: no period is in
    twice, none is in by halves. The number of periods."""
    periods = fetch(url, "SELECT start_s, end_s, energy_kwh, cost, co2_kg FROM metered_periods WHERE run_id = %s "
                         "ORDER BY end_s", run_id)
    for (_, end_before, *_), (start, _, *_) in zip(periods, periods[1:], strict=False):
        assert start >= end_before, f"run {run_id}: periods overlap at {start}"
    (energy, cost, co2), = fetch(url, "SELECT SUM(energy_kwh), SUM(cost), SUM(co2_kg) FROM node_hours "
                                      "WHERE run_id = %s", run_id)
    assert energy == pytest.approx(sum(p[2] for p in periods), rel=1e-9, abs=1e-12)
    assert cost == pytest.approx(sum(p[3] for p in periods), rel=1e-9, abs=1e-12)
    assert co2 == pytest.approx(sum(p[4] for p in periods), rel=1e-9, abs=1e-12)
    doubled = fetch(url, "SELECT job_id, start_s, end_s, COUNT(*) FROM job_runs WHERE run_id = %s "
                         "GROUP BY job_id, start_s, end_s HAVING COUNT(*) > 1", run_id)
    assert doubled == [], f"run {run_id}: job segments written twice: {doubled[:3]}"
    return len(periods)


def test_four_writers_at_once_and_a_fleet_report_that_adds_up(server: PgServer, tmp_path: Path) -> None:
    url = server.create_database()
    now = dt.datetime.now(dt.UTC)
    month = f"{now:%Y-%m}"
    first = now.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    daemons = [daemon(tmp_path, name, url, tmp_path / f"state-{name}") for name in ("east", "west")]
    replays = [replay(tmp_path, name, url, first) for name in ("burst", "lab")]
    for process in replays:
        _, err = process.communicate(timeout=300)
        assert process.returncode == 0, err
    deadline = time.monotonic() + 90
    while True:  # the daemons meter a few more periods after the replays are in
        counts = fetch(url, "SELECT r.run_id, COUNT(p.end_s) FROM runs r LEFT JOIN metered_periods p ON "
                            "p.run_id = r.run_id WHERE r.kind = 'daemon' GROUP BY r.run_id")
        if len(counts) == 2 and all(count >= 5 for _, count in counts):
            break
        assert time.monotonic() < deadline and all(p.poll() is None for p in daemons), counts
        time.sleep(0.1)
    for process in daemons:
        err = stop(process)
        assert process.returncode == 0 and "Traceback" not in err, err
    stored = fetch(url, "SELECT run_id, kind, cluster FROM runs ORDER BY cluster")
    assert [(kind, cluster) for _, kind, cluster in stored] == [
        ("simulate", "burst"), ("daemon", "east"), ("simulate", "lab"), ("daemon", "west")]
    for run_id, kind, _ in stored:
        if kind == "daemon":
            assert assert_periods_are_the_hours(url, run_id) >= 5
    # Each replay wrote exactly what it writes alone: nothing lost or doubled by the writers beside it.
    for name in ("burst", "lab"):
        alone = tmp_path / f"{name}-alone.db"
        code = subprocess.run([sys.executable, "-m", "greengpu.cli", "-q", "simulate", "--trace",
                               str(tmp_path / f"{name}.trace.csv"), "--cluster", str(tmp_path / f"{name}.cluster.yaml"),
                               "--policy", "default", "--ledger", str(alone), "--json"], env=ENV,
                              capture_output=True, text=True, timeout=300)
        assert code.returncode == 0, code.stderr
        shared = report_json("--ledger", url, "--month", month, "--cluster-name", name, "--aggregate", "job")
        own = report_json("--ledger", str(alone), "--month", month, "--aggregate", "job")
        assert shared["totals"] == own["totals"] and len(shared["rows"]) == len(own["rows"]) == 60
        for mine, theirs in zip(shared["rows"], own["rows"], strict=True):
            assert {k: v for k, v in mine.items() if k not in ("cluster", "clusters")} == theirs
    fleet = report_json("--ledger", url, "--month", month, "--aggregate", "cluster")
    assert [r["name"] for r in fleet["rows"]] == ["burst", "east", "lab", "west"]
    per_cluster = {name: report_json("--ledger", url, "--month", month, "--cluster-name", name)
                   for name in ("burst", "east", "lab", "west")}
    for key in KEYS:
        assert units(fleet["totals"][key], key) == sum(units(p["totals"][key], key) for p in per_cluster.values())
        assert units(fleet["totals"][key], key) == (sum(units(r[key], key) for r in fleet["rows"])
                                                    + units(fleet["idle"][key], key))
    shared_idle = report_json("--ledger", url, "--month", month, "--aggregate", "cluster", "--share-idle",
                              "proportional")
    for row in shared_idle["rows"]:
        assert row["cost"] == per_cluster[row["name"]]["totals"]["cost"]
        assert row["co2_kg"] == per_cluster[row["name"]]["totals"]["co2_kg"]
    assert per_cluster["east"]["basis"] == "measured" and per_cluster["lab"]["basis"] == "modelled"


def test_a_daemon_killed_mid_write_and_restarted_loses_and_doubles_nothing(server: PgServer,
                                                                          tmp_path: Path) -> None:
    url = server.create_database()
    state = tmp_path / "state"
    rng = random.Random(3)
    counts = []
    for _ in range(6):
        before = counts[-1] if counts else 0
        process = daemon(tmp_path, "east", url, state)
        deadline = time.monotonic() + 60
        while periods(url) <= before:  # past start-up: metering again, a period each 0.25 s
            assert process.poll() is None and time.monotonic() < deadline, process.communicate()[1]
            time.sleep(0.05)
        if len(counts) % 2:
            time.sleep(rng.uniform(0.0, 0.6))  # a random point of the next periods, writes included
            err = stop(process, signal.SIGKILL)
        else:
            err = kill_inside_a_write(url, process)
        assert "Traceback" not in err, err
        counts.append(periods(url))
    process = daemon(tmp_path, "east", url, state)
    deadline = time.monotonic() + 60
    while periods(url) <= counts[-1] + 2:  # metering again after the last kill, undisturbed
        assert process.poll() is None and time.monotonic() < deadline, process.communicate()[1]
        time.sleep(0.05)
    err = stop(process)
    assert process.returncode == 0 and "Traceback" not in err, err
    (run_id,), = fetch(url, "SELECT run_id FROM runs")  # every restart continued the one run
    total = assert_periods_are_the_hours(url, run_id)
    assert counts == sorted(counts) and total > counts[-1] > 0, counts


def test_a_report_reads_through_a_read_only_session_and_bad_databases_are_one_line(server: PgServer,
                                                                                   tmp_path: Path) -> None:
    import psycopg
    from fleet_inputs import run_cli

    from greengpu.accounting.ledger_pg import connect
    from greengpu.accounting.ledger_url import parse_ledger

    url = server.create_database()
    session = connect(parse_ledger(url), read_only=True)
    with pytest.raises(psycopg.errors.ReadOnlySqlTransaction):
        session.execute("CREATE TABLE notes (body TEXT)")
    session.close()
    fetch(url, "SELECT 1")
    with psycopg.connect(url, autocommit=True) as other:
        other.execute("CREATE TABLE meta (key TEXT, value TEXT)")  # another application's database
    cases = [(url, "ledger schema version 'none'"),
             (server.url("no_such_db"), "cannot connect to the ledger database"),
             (f"postgresql://greengpu@/x?host={tmp_path}", "cannot connect to the ledger database")]
    for ledger, words in cases:
        code, _, err = run_cli("report", "--ledger", ledger, "--month", "2024-01")
        assert code == 2 and err.count("\n") == 1 and words in err and "Traceback" not in err, err
    code, _, err = run_cli("simulate", "--trace", str(write_trace(tmp_path / "t.csv", dt.datetime(2024, 1, 2,
                                                                                    tzinfo=dt.UTC))),
                           "--cluster", str(write_cluster(tmp_path, "lab")), "--policy", "default", "--ledger", url)
    assert code == 2 and "ledger schema version 'none'" in err, err
    assert fetch(url, "SELECT COUNT(*) FROM meta") == [(0,)]  # refused, and nothing written to it
    assert [t for (t,) in fetch(url, "SELECT table_name FROM information_schema.tables WHERE table_schema = "
                                     "'public'")] == ["meta"]
    # PostgreSQL's double precision holds NaN and infinities: a hand-edited one is one line, as in SQLite.
    billed = server.create_database()
    code, _, err = run_cli("-q", "simulate", "--trace", str(tmp_path / "t.csv"), "--cluster",
                           str(tmp_path / "lab.cluster.yaml"), "--policy", "default", "--ledger", billed)
    assert code == 0, err
    for value in ("NaN", "Infinity", "1e300"):
        with psycopg.connect(billed, autocommit=True) as editor:
            editor.execute("UPDATE node_hours SET cost = %s::float8 WHERE ctid = (SELECT MIN(ctid) FROM node_hours)",
                           (value,))
        code, _, err = run_cli("report", "--ledger", billed, "--month", "2024-01")
        assert code == 2 and err.count("\n") == 1 and "node_hours.cost" in err, err


def test_a_version_2_database_is_read_as_it_is_and_migrated_to_3_in_place(server: PgServer, tmp_path: Path) -> None:
    """Ledger schema 3 on PostgreSQL: a version 2 database reads as it is (no cloud, modelled), and the next
    writer migrates it in place, keeping its runs; a replay with cloud pools then writes its cloud rows."""
    import psycopg

    from greengpu.accounting.ledger_schema import SCHEMA_VERSION, statements

    url = server.create_database()
    first = dt.datetime(2024, 3, 4, tzinfo=dt.UTC).timestamp()
    with psycopg.connect(url) as connection:
        for version in (1, 2):
            for statement in statements(version, "postgresql"):
                connection.execute(statement)
        connection.execute("INSERT INTO meta VALUES ('schema_version', '2')")
        connection.execute("INSERT INTO runs (kind, policy, source, created_utc, currency, pue, cluster) VALUES "
                           "('daemon', 'default', 't', '2024-03-01', 'USD', 1.2, 'east')")
        connection.execute("INSERT INTO node_hours VALUES (1, %s, 'n1', 2, 1, 2, 0.5, 0.7, 0)", (first,))
        connection.execute("INSERT INTO tenant_hours VALUES (1, %s, 'a', 1, 0.5, 1, 0.25, 0.3)", (first,))
    old = report_json("--ledger", url, "--month", "2024-03")
    assert old["basis"] == "modelled" and old["totals"]["cloud_cost"] == 0.0 and old["totals"]["cost"] == 0.5
    assert fetch(url, "SELECT value FROM meta") == [("2",)]  # a reader never migrates
    from fleet_inputs import run_cli

    code, _, err = run_cli("-q", "simulate", "--trace", str(write_trace(tmp_path / "t.csv", dt.datetime(
        2024, 3, 4, tzinfo=dt.UTC))), "--cluster", str(write_cluster(tmp_path, "lab")), "--policy", "default",
        "--ledger", url)
    assert code == 0, err
    assert fetch(url, "SELECT value FROM meta") == [(str(SCHEMA_VERSION),)] and SCHEMA_VERSION == 3
    assert fetch(url, "SELECT DISTINCT basis FROM node_hours WHERE run_id = 1") == [("modelled",)]
    again = report_json("--ledger", url, "--month", "2024-03", "--run", "1")
    assert again["totals"]["cost"] == 0.5
    fresh = report_json("--ledger", url, "--month", "2024-03", "--run", "2")
    assert fresh["totals"]["cloud_cost"] == 0.0 and fresh["queue"]["total"]["jobs_started"] > 0
    from greengpu.accounting.attribution import Attribution
    from greengpu.accounting.cloud_rows import CloudUsage
    from greengpu.accounting.ledger_url import parse_ledger
    from greengpu.accounting.ledger_write import write_run
    from greengpu.accounting.meter import EnergyMeter
    from greengpu.model import Site

    books = Attribution(EnergyMeter(Site(price_per_kwh=0.1)))
    books.node_draw("n1", 2, first, first + 3600, 100.0, 0.0, False)
    cloud = {(first, "aws", "a"): CloudUsage("us-east-1", 0.75, 1.0, 24.5, 0.38),
             (first, "aws", ""): CloudUsage("us-east-1", 0.25, 0.2, 8.17, 0.07)}
    run_id = write_run(parse_ledger(url), books, kind="simulate", policy="p", source="t", cloud=cloud)
    billed = report_json("--ledger", url, "--month", "2024-03", "--run", str(run_id))
    assert billed["totals"]["cloud_cost"] == 32.67 and billed["idle"]["cloud_cost"] == 8.17
    assert [(t["tenant"], t["cloud_cost"], t["cloud_co2_kg"]) for t in billed["tenants"]] == [("a", 24.5, 0.38)]
