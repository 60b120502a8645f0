"""`greengpu report`'s refusals of issue 38: a month in other digits, an empty settings file, a refused foreign
database left as it was found (no -wal/-shm beside it), and text in a ledger's number columns. Each is one line on
stderr and exit 2, never a traceback."""

from __future__ import annotations

import contextlib
import io
import sqlite3
from pathlib import Path

import pytest
from schedkit import job

from greengpu.accounting.ledger_write import write_run
from greengpu.cli import main
from greengpu.config.policy import load_policy
from greengpu.model import Cluster, Node, NodeType, Site
from greengpu.sim.engine import Simulation

JAN_2024_S = 1_704_067_200.0
TWO_GPU = NodeType(name="two", gpus=2, gpu_model="A100", gpu_idle_w=50, gpu_max_w=300, gpu_min_limit_w=100,
                   host_idle_w=100, host_sleep_w=10, boot_s=180)


def run_cli(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(args))
    return code, out.getvalue(), err.getvalue()


def refused(code: int, err: str) -> str:
    assert "Traceback" not in err, err
    assert code == 2, err
    assert err.count("\n") == 1 and err.startswith("greengpu"), err
    return err


@pytest.fixture
def ledger(tmp_path: Path) -> Path:
    site = Site(pue=1.2, price_per_kwh=0.2, carbon_g_per_kwh=400, currency="EUR")
    cluster = Cluster(site=site, node_types={"two": TWO_GPU}, nodes=(Node("n1", "two"),), tenants={})
    jobs = [job(f"j{i}", gpus=1, duration_s=5400, tenant="lab", submit_time_s=JAN_2024_S + 3600 * i) for i in range(3)]
    simulation = Simulation(cluster, load_policy("always-on"), jobs, attribute=True)  # type: ignore[arg-type]
    simulation.run()
    assert simulation.attribution is not None
    path = tmp_path / "ledger.db"
    write_run(path, simulation.attribution, kind="simulate", policy="always-on", source="test")
    return path


@pytest.mark.parametrize("month", ["٢٠٢٤-01", "٢٠٢٤-٠١", "２０２４-０１", "2024-1", "2024-00", "0000-01"])
def test_a_month_not_written_yyyy_mm_in_ascii_digits_is_refused(ledger: Path, month: str) -> None:
    assert run_cli("report", "--ledger", str(ledger), "--month", "2024-01", "--json")[0] == 0
    err = refused(*run_cli("report", "--ledger", str(ledger), "--month", month, "--json")[::2])
    assert "--month" in err


@pytest.mark.parametrize("text", ["", "# only a comment\n", "{}\n", "---\n"])
def test_an_empty_settings_file_is_refused_naming_it(ledger: Path, tmp_path: Path, text: str) -> None:
    settings = tmp_path / "report.yaml"
    settings.write_text(text, encoding="utf-8")
    err = refused(*run_cli("report", "--ledger", str(ledger), "--month", "2024-01", "--settings",
                           str(settings))[::2])
    assert str(settings) in err and "no settings" in err


def test_a_foreign_wal_database_is_refused_and_left_without_sidecars(tmp_path: Path) -> None:
    foreign = tmp_path / "app.db"
    with contextlib.closing(sqlite3.connect(foreign)) as db:
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("CREATE TABLE notes (body TEXT)")
        db.execute("INSERT INTO notes VALUES ('keep me')")
        db.commit()
    before = sorted(p.name for p in tmp_path.iterdir())
    assert before == ["app.db"]
    content = foreign.read_bytes()
    for args in (("report", "--ledger", str(foreign), "--month", "2024-01"),
                 ("simulate", "--trace", "x.csv", "--cluster", "y.yaml", "--policy", "default", "--ledger",
                  str(foreign))):
        code, _, err = run_cli(*args)
        assert code == 2 and "Traceback" not in err
        assert sorted(p.name for p in tmp_path.iterdir()) == before, "a refused database got sidecar files"
    report_err = run_cli("report", "--ledger", str(foreign), "--month", "2024-01")[2]
    assert "not a greengpu ledger" in refused(2, report_err)
    assert foreign.read_bytes() == content


@pytest.mark.parametrize(("table", "column"), [
    ("runs", "pue"), ("node_hours", "asleep_h"), ("node_hours", "hour_start_s"), ("node_hours", "cost"),
    ("tenant_hours", "co2_kg"), ("tenant_hours", "hour_start_s"), ("job_runs", "end_s"), ("job_runs", "gpus"),
])
@pytest.mark.parametrize("value", ["abc", "1.5x", float("inf"), 1.797693134862316e305, -2e15])
def test_text_in_a_number_column_is_one_line_naming_table_and_column(ledger: Path, table: str, column: str,
                                                                     value: str | float) -> None:
    with contextlib.closing(sqlite3.connect(ledger)) as db:
        db.execute(f"UPDATE {table} SET {column} = ? WHERE rowid = (SELECT MAX(rowid) FROM {table})", (value,))
        db.commit()
    err = refused(*run_cli("report", "--ledger", str(ledger), "--month", "2024-01", "--json")[::2])
    assert str(ledger) in err and column in err, err
