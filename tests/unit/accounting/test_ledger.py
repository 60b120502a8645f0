"""The SQLite ledger: exact attribution on hand-computable cases, monthly reports that add up, bad input."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from schedkit import job

from greengpu.accounting.ledger import month_report
from greengpu.accounting.ledger_write import write_run
from greengpu.config.policy import load_policy
from greengpu.model import Cluster, Node, NodeType, Site, TimeSeries
from greengpu.sim.engine import Simulation

REPO = Path(__file__).resolve().parents[3]
# 2024-01-31 23:00 UTC: a job started here crosses into February.
JAN_31_23H = 1_706_742_000.0
TWO_GPU = NodeType(name="two", gpus=2, gpu_model="A100", gpu_idle_w=50, gpu_max_w=300, gpu_min_limit_w=100,
                   host_idle_w=100, host_sleep_w=10, boot_s=180)


def cluster(site: Site) -> Cluster:
    return Cluster(site=site, node_types={"two": TWO_GPU}, nodes=(Node("n1", "two"),), tenants={})


def replay(site: Site, jobs: list[object], tmp_path: Path, policy: str = "always-on") -> tuple[dict, Path]:
    simulation = Simulation(cluster(site), load_policy(policy), jobs, attribute=True)  # type: ignore[arg-type]
    result = simulation.run().to_json()
    assert simulation.attribution is not None
    path = tmp_path / "ledger.db"
    write_run(path, simulation.attribution, kind="simulate", policy=policy, source="test")
    return result, path


def test_one_job_on_half_a_node_is_charged_its_gpu_and_half_the_host(tmp_path: Path) -> None:
    site = Site(pue=1.5, price_per_kwh=0.2, carbon_g_per_kwh=400, currency="EUR")
    result, path = replay(site, [job("j", gpus=1, duration_s=1800, tenant="lab", submit_time_s=JAN_31_23H)], tmp_path)
    with sqlite3.connect(path) as db:
        (energy, cost, co2, gpus, nodes), = db.execute(
            "SELECT energy_kwh, cost, co2_kg, gpus, nodes FROM job_runs").fetchall()
        node_total = db.execute("SELECT SUM(energy_kwh), SUM(cost), SUM(co2_kg) FROM node_hours").fetchone()
    job_kwh = (300 + 100 / 2) * 0.5 / 1000 * 1.5  # its GPU busy + half the host, half an hour, x PUE
    assert energy == pytest.approx(job_kwh)
    assert cost == pytest.approx(job_kwh * 0.2)
    assert co2 == pytest.approx(job_kwh * 0.4)
    assert (gpus, nodes) == (1.0, "n1")
    # Per-node metering adds up to the simulator's site figures.
    assert node_total == pytest.approx((result["energy_kwh"], result["cost"], result["co2_kg"]))
    report = month_report(path, "2024-01")
    node_kwh = (300 + 50 + 100) * 0.5 / 1000 * 1.5
    # Rounded to a gram and a cent (a thousandth of a kWh and of a GPU-hour).
    assert report["totals"] == pytest.approx({"gpu_hours": 1.0, "energy_kwh": node_kwh, "cost": node_kwh * 0.2,
                                              "co2_kg": node_kwh * 0.4}, abs=0.005)
    assert report["totals"]["cost"] == round(report["totals"]["cost"], 2)
    (tenant,) = report["tenants"]
    assert tenant.pop("tenant") == "lab"
    assert tenant == pytest.approx({"gpu_hours": 0.5, "energy_kwh": job_kwh, "cost": job_kwh * 0.2,
                                    "co2_kg": job_kwh * 0.4}, abs=0.005)
    assert report["idle"]["energy_kwh"] == pytest.approx(node_kwh - job_kwh, abs=0.0015)
    assert report["currency"] == "EUR"
    assert month_report(path, "2024-02")["totals"]["energy_kwh"] == 0.0


def test_a_job_across_a_month_end_and_a_price_change_is_split_exactly(tmp_path: Path) -> None:
    feb = JAN_31_23H + 3600
    tariff = TimeSeries(times_s=(JAN_31_23H - 3600, JAN_31_23H + 1800), values=(0.10, 0.40))
    site = Site(pue=1.0, tariff=tariff, carbon_g_per_kwh=0)
    _, path = replay(site, [job("long", gpus=2, duration_s=7200, tenant="lab", submit_time_s=JAN_31_23H)], tmp_path)
    draw_kw = (2 * 300 + 100) / 1000  # both GPUs and the whole host
    jan, feb_report = month_report(path, "2024-01"), month_report(path, "2024-02")
    assert jan["tenants"][0]["energy_kwh"] == pytest.approx(draw_kw * 1.0)
    assert jan["tenants"][0]["cost"] == pytest.approx(round(draw_kw * 0.5 * 0.10 + draw_kw * 0.5 * 0.40, 2))
    assert feb_report["tenants"][0]["cost"] == pytest.approx(round(draw_kw * 0.40, 2))
    assert feb_report["tenants"][0]["gpu_hours"] == pytest.approx(2.0)
    assert feb == pytest.approx(JAN_31_23H + 3600)


def test_sleeping_hosts_and_idle_gpus_are_idle_and_rows_add_up(tmp_path: Path) -> None:
    site = Site(pue=1.2, price_per_kwh=0.13, carbon_g_per_kwh=350)
    jobs = [job(f"j{i}", gpus=1 if i % 3 else 0.5, duration_s=900 + 60 * i, tenant=f"t{i % 3}",
                submit_time_s=JAN_31_23H - 86_400 * 3 + 5000 * i) for i in range(12)]
    result, path = replay(site, jobs, tmp_path, policy="idle-timeout")
    assert result["node_sleep_hours"] > 0
    report = month_report(path, "2024-01")
    assert report["node_sleep_hours"] > 0
    for key, places in (("gpu_hours", 3), ("energy_kwh", 3), ("cost", 2), ("co2_kg", 3)):
        summed = sum(t[key] for t in report["tenants"]) + report["idle"][key]
        assert round(summed, places) == report["totals"][key], key
    assert report["idle"]["energy_kwh"] > 0


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "greengpu", *args], capture_output=True, text=True, cwd=REPO,
                          timeout=120)


def test_simulate_ledger_then_report_over_the_cli(tmp_path: Path) -> None:
    ledger = tmp_path / "lab.db"
    sim = run_cli("simulate", "--trace", "examples/lab-a100.week.trace.csv", "--cluster",
                  "examples/lab-a100.cluster.yaml", "--policy", "always-on", "--policy", "default",
                  "--ledger", str(ledger), "--json")
    assert sim.returncode == 0, sim.stderr
    results = json.loads(sim.stdout)["results"]
    assert [r["ledger_run_id"] for r in results] == [1, 2]
    several = run_cli("report", "--ledger", str(ledger), "--month", "2024-01")
    assert several.returncode == 2 and "--run" in several.stderr and "Traceback" not in several.stderr
    for result in results:
        out = run_cli("report", "--ledger", str(ledger), "--month", "2024-01", "--run", str(result["ledger_run_id"]),
                      "--format", "json")
        assert out.returncode == 0, out.stderr
        report = json.loads(out.stdout)
        assert report["policy"] == result["policy"]
        # The week lies inside January: the month's totals are the replay's totals.
        assert report["totals"]["energy_kwh"] == pytest.approx(result["energy_kwh"], abs=0.001)
        assert report["totals"]["cost"] == pytest.approx(result["cost"], abs=0.005)
        assert report["totals"]["co2_kg"] == pytest.approx(result["co2_kg"], abs=0.001)
        assert {t["tenant"] for t in report["tenants"]} == {"phd-students", "postdocs"}
    csv_out = tmp_path / "jan.csv"
    out = run_cli("report", "--ledger", str(ledger), "--month", "2024-01", "--run", "2", "--format", "csv",
                  "--out", str(csv_out))
    assert out.returncode == 0 and csv_out.read_text().splitlines()[0].startswith("period,tenant,gpu_hours")


@pytest.mark.parametrize(("args", "message"), [
    (("--month", "2024-13"), "--month: '2024-13' is not a month"),
    (("--month", "2024-01", "--run", "7"), "--run: no run 7"),
])
def test_report_bad_input_is_one_line_exit_2(tmp_path: Path, args: tuple[str, ...], message: str) -> None:
    site = Site(pue=1.0, price_per_kwh=0.1)
    _, path = replay(site, [job("j", submit_time_s=JAN_31_23H)], tmp_path)
    out = run_cli("report", "--ledger", str(path), *args)
    assert out.returncode == 2
    assert out.stderr.strip().count("\n") == 0 and message in out.stderr


def test_a_file_that_is_not_a_ledger_is_refused_before_any_replay(tmp_path: Path) -> None:
    bogus = tmp_path / "notes.db"
    bogus.write_text("not sqlite at all\n" * 100)
    out = run_cli("simulate", "--trace", "examples/lab-a100.week.trace.csv", "--cluster",
                  "examples/lab-a100.cluster.yaml", "--policy", "default", "--ledger", str(bogus))
    assert out.returncode == 2
    assert out.stderr.strip() == f"greengpu: {bogus}: not a greengpu ledger (file is not a database)"
    assert bogus.read_text().startswith("not sqlite")
