"""`greengpu simulate`: the JSON contract, side-by-side policies, and bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from greengpu.cli import main
from greengpu.config.inventory import load_cluster
from greengpu.config.policy import load_policy

REPO = Path(__file__).resolve().parents[3]
CONTRACT_KEYS = {
    "policy", "jobs", "jobs_completed", "makespan_s", "energy_kwh", "gpu_energy_kwh", "cost", "co2_kg", "wait_s",
    "wait_s_by_class", "gpu_hours_allocated", "gpu_hours_capacity", "slowdown_mean", "preemptions",
    "lost_gpu_hours", "node_sleep_hours", "wakes", "sla_violations", "invariant_violations", "sim_wall_s",
}

TRACE = """\
job_id,submit_time,duration_s,gpus,tenant,priority,class
a,2024-01-02T00:00:00Z,3600,4,phd-students,0,training
b,2024-01-02T00:05:00Z,600,1,postdocs,0,inference
c,2024-01-02T03:00:00Z,7200,2,postdocs,1,training
d,2024-01-03T12:00:00Z,900,0.5,phd-students,0,interactive
"""


def test_simulate_json_has_every_contract_key(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = tmp_path / "jobs.csv"
    trace.write_text(TRACE)
    code = main(["simulate", "--trace", str(trace), "--cluster", str(REPO / "examples" / "lab-a100.cluster.yaml"),
                 "--policy", "always-on", "--policy", "idle-timeout", "--policy", "default", "--json"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    payload = json.loads(captured.out)
    assert [r["policy"] for r in payload["results"]] == ["always-on", "idle-timeout", "default"]
    for result in payload["results"]:
        assert result.keys() >= CONTRACT_KEYS
        assert set(result["wait_s"]) == {"p50", "p95", "p99", "mean"}
        assert result["invariant_violations"] == 0
        assert result["jobs"] == 4
    always_on, idle, _ = payload["results"]
    assert idle["energy_kwh"] < always_on["energy_kwh"]
    assert idle["node_sleep_hours"] > 0


def test_simulate_table(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = tmp_path / "jobs.csv"
    trace.write_text(TRACE)
    code = main(["simulate", "--trace", str(trace), "--cluster", str(REPO / "examples" / "lab-a100.cluster.yaml"),
                 "--policy", "always-on", "--policy", "idle-timeout"])
    out = capsys.readouterr().out
    assert code == 0
    assert "facility energy (kWh)" in out and "idle-timeout vs always-on" in out


def test_simulate_bad_trace_row_exits_2_with_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = tmp_path / "jobs.csv"
    trace.write_text(TRACE.replace("c,2024-01-02T03:00:00Z,7200", "c,2024-01-02T03:00:00Z,forever"))
    args = ["simulate", "--trace", str(trace), "--cluster", str(REPO / "examples" / "lab-a100.cluster.yaml"),
            "--policy", "always-on", "--json"]
    assert main(args) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.count("\n") == 1
    assert f"{trace}:4: duration_s: not a number: 'forever'" in captured.err
    assert main([*args, "--skip-bad-rows"]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["results"][0]["jobs"] == 3
    assert "skipped 1 bad row" in captured.err


def test_simulate_unknown_policy_is_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = tmp_path / "jobs.csv"
    trace.write_text(TRACE)
    assert main(["simulate", "--trace", str(trace), "--cluster", str(REPO / "examples" / "lab-a100.cluster.yaml"),
                 "--policy", "nope"]) == 2


def test_readme_example_week_of_the_lab(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["simulate", "--trace", str(REPO / "examples" / "lab-a100.week.trace.csv"),
                 "--cluster", str(REPO / "examples" / "lab-a100.cluster.yaml"), "--policy", "always-on",
                 "--policy", str(REPO / "policies" / "lab-a100.yaml"), "--json"])
    assert code == 0
    always_on, lab = json.loads(capsys.readouterr().out)["results"]
    assert lab["invariant_violations"] == 0 and always_on["invariant_violations"] == 0
    assert lab["jobs_completed"] == always_on["jobs_completed"] == always_on["jobs"]
    assert lab["energy_kwh"] < 0.8 * always_on["energy_kwh"]  # nights and the weekend asleep
    # At most one boot more, plus the longer checkpoint grace the lab gives a victim (its jobs preempt
    # their own group's lower-priority work to start, and wait for it to checkpoint).
    boot_s = max(t.boot_s for t in load_cluster(REPO / "examples" / "lab-a100.cluster.yaml").node_types.values())
    extra_grace_s = (load_policy(str(REPO / "policies" / "lab-a100.yaml")).scheduler.preemption.grace_s
                     - load_policy("always-on").scheduler.preemption.grace_s)
    assert lab["wait_s"]["p95"] <= always_on["wait_s"]["p95"] + boot_s + extra_grace_s
