"""The example files the docs tell users to pass run as they are (docs/REPORT.md, docs/AGENT.md), and a report of a
month the run has no hours in says so."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from greengpu.cli import main

ROOT = Path(__file__).resolve().parents[2]


def lab_ledger(tmp_path: Path, policy: str) -> Path:
    """A ledger of the bundled lab week replayed under `policy` (run 1)."""
    ledger = tmp_path / "lab.db"
    assert main(["simulate", "--trace", str(ROOT / "examples/lab-a100.week.trace.csv"), "--cluster",
                 str(ROOT / "examples/lab-a100.cluster.yaml"), "--policy", policy, "--ledger", str(ledger)]) == 0
    return ledger


def test_the_report_settings_example_prices_a_lab_replay_at_the_virginia_rate(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ledger = lab_ledger(tmp_path, "default")
    capsys.readouterr()
    assert main(["report", "--ledger", str(ledger), "--run", "1", "--month", "2024-01", "--format", "json",
                 "--settings", str(ROOT / "examples/report-virginia.yaml")]) == 0
    bill = json.loads(capsys.readouterr().out)
    assert "Virginia Electric & Power" in json.dumps(bill)
    assert bill["region"] == "Virginia" and bill["pricing"]
    assert bill["totals"]["cost"] > 0 and bill["totals"]["co2_kg"] > 0
    # The example's chargeback: the lab's GPU-hours billed per tenant, adding up to the total to the cent.
    assert bill["totals"]["chargeback"] > 0 and bill["idle"]["chargeback"] == 0.0
    assert round(sum(t["chargeback"] for t in bill["tenants"]) * 100) == round(bill["totals"]["chargeback"] * 100)


def test_the_agent_class_file_example_caps_gpu_0_as_inference(tmp_path: Path) -> None:
    journal = tmp_path / "journal.jsonl"
    assert main(["agent", "--backend", "fake", "--fake-gpus", "4xA100", "--fake-busy", "0,1", "--listen",
                 "127.0.0.1:0", "--classes", str(ROOT / "examples/agent-classes.yaml"), "--journal", str(journal),
                 "--once"]) == 0
    said = journal.read_text()
    assert "inference" in said and "training" in said


def test_a_month_the_run_has_no_hours_in_is_an_empty_bill_with_a_note(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ledger = lab_ledger(tmp_path, "always-on")
    capsys.readouterr()
    assert main(["report", "--ledger", str(ledger), "--month", "2024-03", "--json"]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["totals"]["gpu_hours"] == 0
    assert captured.err == (f"greengpu: run 1 of {ledger} has no hours in 2024-03 (its hours run from 2024-01-01 "
                            "09:00 to 2024-01-07 20:00 UTC): the bill is empty\n")
    assert main(["-q", "report", "--ledger", str(ledger), "--month", "2024-03", "--json"]) == 0
    assert capsys.readouterr().err == ""
    assert main(["report", "--ledger", str(ledger), "--month", "2024-01", "--json"]) == 0
    assert capsys.readouterr().err == ""  # a month with hours: nothing to remark


@pytest.mark.parametrize("damage", [9e18, 99999999999999999999, -1e15, "noon", b"\x00"])
def test_the_empty_month_note_reads_or_refuses_a_damaged_ledger_without_a_traceback(
        damage: object, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import sqlite3

    ledger = lab_ledger(tmp_path, "always-on")
    with sqlite3.connect(ledger) as connection:
        connection.execute("UPDATE node_hours SET hour_start_s = ? WHERE rowid = (SELECT MAX(rowid) FROM node_hours)",
                           (str(damage) if isinstance(damage, int) and damage > 2**63 else damage,))
    capsys.readouterr()
    code = main(["report", "--ledger", str(ledger), "--month", "2031-01", "--json"])
    err = capsys.readouterr().err
    assert "Traceback" not in err and err.count("\n") == 1, err
    if damage == -1e15:  # a number in range, only far in the past: the month simply has no hours
        assert code == 0 and ("has no metered hours" in err or "no hours in 2031-01" in err)
    else:  # text, a blob or a number out of range: refused in one line naming where (issue 38)
        assert code == 2 and "node_hours" in err and "hour_start_s" in err, err
