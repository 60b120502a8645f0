"""The replay of MIG and time-slice jobs: reconfiguration cost, shares in the figures, the a100-lab example."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from schedkit import job
from sharingkit import a100, lab

from greengpu.cli import main
from greengpu.config.inventory import load_cluster
from greengpu.config.policy import load_policy
from greengpu.model import TIMESLICE, Tenant
from greengpu.sim.engine import Simulation
from greengpu.sim.traces import read_trace


def test_a_job_that_needs_a_repartition_waits_reconfigure_s() -> None:
    cluster = lab(a100("mig", mig=1, reconfigure_s=600.0))
    jobs = [job("m", gpu_profile="3g.20gb", duration_s=3600.0, submit_time_s=0.0),
            job("n", gpu_profile="3g.20gb", duration_s=3600.0, submit_time_s=0.0)]
    sim = Simulation(cluster, load_policy("always-on"), jobs)
    result = sim.run()
    assert result.mig_reconfigurations == 1  # one partition (two 3g.20gb) for both
    assert sim.first_start == {"m": 600.0, "n": 600.0}
    assert result.invariant_violations == 0
    assert result.to_json()["mig_reconfigurations"] == 1


def test_a_fitting_partition_costs_no_reconfiguration() -> None:
    cluster = lab(a100("mig", mig=1, reconfigure_s=600.0))
    jobs = [job("first", gpu_profile="1g.5gb", duration_s=600.0, submit_time_s=0.0),
            job("later", gpu_profile="1g.5gb", duration_s=600.0, submit_time_s=3600.0)]
    sim = Simulation(cluster, load_policy("always-on"), jobs)
    result = sim.run()
    assert result.mig_reconfigurations == 1
    assert sim.first_start["later"] == 3600.0  # the 1g.5gb partition is still there: no wait
    assert result.invariant_violations == 0


def test_gpu_hours_count_the_share_of_a_gpu() -> None:
    cluster = lab(a100("mixed", mig=1, sliced=1, replicas=4, reconfigure_s=0.0), tenants=(Tenant("t", 4.0),))
    jobs = [job("m", gpu_profile="1g.5gb", duration_s=7 * 3600.0),
            job("r", gpu_profile=TIMESLICE, job_class="interactive", duration_s=4 * 3600.0)]
    result = Simulation(cluster, load_policy("always-on"), jobs).run()
    # 7 h of 1/7 GPU (rounded down to 142 milli-GPUs) and 4 h of 1/4 GPU: about 2 GPU-hours, not 11
    assert result.gpu_hours_allocated == pytest.approx(7 * 0.142 + 4 * 0.25)
    assert result.invariant_violations == 0


def test_a_cluster_without_mig_keeps_its_json_keys() -> None:
    cluster = lab(a100("plain"))
    result = Simulation(cluster, load_policy("always-on"), [job("a", gpus=2)]).run()
    assert result.mig_reconfigurations is None
    assert "mig_reconfigurations" not in result.to_json()


@pytest.mark.parametrize("policy", ["always-on", "idle-timeout", "default"])
def test_the_a100_lab_day_replays(repo: Path, policy: str) -> None:
    cluster = load_cluster(repo / "examples" / "a100-lab.cluster.yaml")
    jobs = read_trace(repo / "examples" / "a100-lab.day.trace.csv").jobs
    assert {j.gpu_profile for j in jobs} >= {"", "1g.5gb", "2g.10gb", "3g.20gb", TIMESLICE}
    sim = Simulation(cluster, load_policy(policy), jobs)
    sim.check_known_cycles = True  # every cycle a known result skipped is asked anyway and must agree
    result = sim.run()
    assert result.jobs_completed == len(jobs) and result.invariant_violations == 0
    assert result.mig_reconfigurations is not None and result.mig_reconfigurations >= 3
    for j in jobs:  # every MIG and time-slice job ran on a GPU of its kind
        assert j.job_id in sim.first_start


def test_simulate_prints_the_reconfigurations(repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["simulate", "--cluster", str(repo / "examples" / "a100-lab.cluster.yaml"),
                 "--trace", str(repo / "examples" / "a100-lab.day.trace.csv"), "--policy", "default", "--json"])
    assert code == 0
    out = json.loads(capsys.readouterr().out)
    results = out["results"] if isinstance(out, dict) else out
    assert results[0]["mig_reconfigurations"] >= 3 and results[0]["invariant_violations"] == 0


def test_the_table_shows_reconfigurations_only_with_mig(repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", "--cluster", str(repo / "examples" / "a100-lab.cluster.yaml"),
                 "--trace", str(repo / "examples" / "a100-lab.day.trace.csv"), "--policy", "always-on"]) == 0
    assert "MIG reconfigurations" in capsys.readouterr().out
    assert main(["simulate", "--cluster", str(repo / "examples" / "lab-a100.cluster.yaml"),
                 "--trace", str(repo / "examples" / "lab-a100.week.trace.csv"), "--policy", "always-on"]) == 0
    assert "MIG reconfigurations" not in capsys.readouterr().out


def test_a_month_of_the_year_example_keeps_notebooks_and_services_waiting_minutes_not_hours(repo: Path) -> None:
    """January of examples/a100-lab.year.trace.csv under the default: every job of the month starts, nothing
    breaks an invariant, and the example's design holds (docs/EXAMPLE-A100-LAB.md): the notebooks' pool is a
    tenant of its own, so a notebook (which may not borrow) never waits behind a group's borrowed training."""
    cluster = load_cluster(repo / "examples" / "a100-lab.cluster.yaml")
    jobs = [j for j in read_trace(repo / "examples" / "a100-lab.year.trace.csv").jobs
            if j.submit_time_s < 1_738_368_000.0]  # 2025-02-01T00:00Z
    assert 1_000 < len(jobs) < 3_000
    sim = Simulation(cluster, load_policy("default"), jobs)
    result = sim.run()
    assert result.invariant_violations == 0 and result.jobs_completed == len(jobs)
    notebooks = [sim.first_start[j.job_id] - j.submit_time_s for j in jobs if j.gpu_profile == TIMESLICE]
    services = [sim.first_start[j.job_id] - j.submit_time_s for j in jobs if j.job_class == "inference"]
    assert notebooks and services
    assert max(notebooks) <= 15 * 60 and sorted(services)[len(services) // 2] <= 15 * 60
