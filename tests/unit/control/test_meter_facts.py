"""What the daemon's meter takes beyond one observation (issue 36): the fake cloud's node time as cloud rows, the
agents' counters as measured energy over the meter's own period, and a period's cloud rows counted once."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from greengpu.accounting.cloud_rows import CloudSpan
from greengpu.config.inventory import load_cluster_text
from greengpu.control.bodies.body import Observation
from greengpu.control.daemon.agent_reports import AgentReport, AgentReports, GpuReport
from greengpu.control.daemon.daemon_meter import DaemonMeter
from greengpu.control.daemon.meter_facts import FakeClusterFacts, facts_of
from greengpu.control.fakes.fake_cloud import FakeCloud
from greengpu.control.fakes.fake_cluster import FakeCluster
from greengpu.health.score import HealthState
from greengpu.model import ClusterSnapshot, Job
from greengpu.sleep.sleep_wake import SleepObservation

CLUSTER = """
site: {pue: 1.0, price_per_kwh: 0.5, carbon_g_per_kwh: 100}
node_types:
  g4: {gpus: 4, gpu_model: A100, gpu_idle_w: 50, gpu_max_w: 400, gpu_min_limit_w: 100, host_idle_w: 200,
       host_sleep_w: 0, boot_s: 300}
nodes:
  - {name: "n1", type: g4}
tenants:
  a: {quota_gpus: 16}
pools:
  spot: {type: g4, spot: true, price_per_hour: 6.0, max_nodes: 4}
"""
T0 = 1_700_000_400.0  # 400 s into an hour


def test_a_cloud_run_is_paid_from_its_request_and_its_job_charged_its_gpus_while_it_ran(tmp_path: Path) -> None:
    cloud = FakeCloud(load_cluster_text(CLUSTER), tmp_path)
    run = cloud.start(Job(job_id="j", tenant="a", gpus=6, duration_s=1200.0, submit_time_s=T0 - 50), "spot", "spot",
                      T0)
    assert run.nodes == ["spot-1", "spot-2"] and run.start_s == T0 + 300
    spans = cloud.spans(T0 + 100, T0 + 2000)  # a window that starts after the request and ends after the run
    paid = [s for s in spans if s.tenant == ""]
    used = [s for s in spans if s.tenant == "a"]
    assert paid == [CloudSpan("spot", "", T0 + 100, T0 + 1500, 1.0)] * 2
    assert used == [CloudSpan("spot", "a", T0 + 300, T0 + 1500, 0.75, 3.0)] * 2
    assert cloud.spans(T0 + 1500, T0 + 1600) == []  # over once its job ended
    (segment,) = cloud.segments(T0 + 1400, T0 + 1600)
    assert (segment.outcome, segment.pool, segment.submit_s, segment.start_s) == ("completed", "spot", T0 - 50,
                                                                                  T0 + 1400)
    assert cloud.segments(T0 + 600, T0 + 700)[0].outcome == ""  # still running at that period's end


def report(node: str, energy_mj: int | None) -> AgentReport:
    return AgentReport(node, 0.0, (GpuReport(0, 0.5, HealthState.HEALTHY, 0.0, energy_mj, (), ()),), {})


def test_the_agents_energy_over_the_meters_period_is_measured_only_where_their_reports_cover_it() -> None:
    reports = AgentReports(0.1, stale_after_s=120.0)
    for at_s, mj in ((100.0, 0), (160.0, 60_000), (220.0, 180_000)):  # 1 kW, then 2 kW
        reports.put(report("n1", mj), at_s)
    reports.put(report("n2", 0), 150.0)
    reports.put(report("n2", 50_000), 200.0)
    got = reports.energy_between(130.0, 250.0)
    # n1: 30 s at 1 kW, 60 s at 2 kW, and 30 s since its last report at that last power.
    assert got == {"n1": 30.0 + 120.0 + 60.0}  # n2's reports began after the period did: modelled
    assert reports.energy_between(130.0, 400.0) == {}  # n1's last report is stale by then
    assert reports.energy_between(230.0, 300.0) == {}  # no report within the period: nothing measured in it
    reports.put(report("n1", 10), 280.0)  # a counter reset (a reboot) breaks the run
    assert reports.energy_between(230.0, 290.0) == {}


def look(cluster, time_s: float, running: tuple = (), pending: tuple = ()) -> Observation:  # type: ignore[no-untyped-def]
    return Observation(snapshot=ClusterSnapshot(time_s=time_s, cluster=cluster, running=running, pending=pending),
                       gpus=(), sleep=SleepObservation(now_s=time_s), gpu_energy_j={}, gpu_settings={})


def test_the_meter_writes_a_periods_cloud_rows_once_and_settles_how_a_job_ended(tmp_path: Path) -> None:
    cluster = load_cluster_text(CLUSTER)
    (tmp_path / "state").mkdir()
    job = Job(job_id="j", tenant="a", gpus=4, duration_s=1200.0, submit_time_s=T0 - 50, gpus_per_node=4)
    body = FakeCluster(cluster, [job], tmp_path / "state", start_s=T0 - 60)
    meter = DaemonMeter.open(cluster, tmp_path / "ledger.db", None, "default", "test")
    meter.facts = FakeClusterFacts(body, {})
    body.cloud.start(job, "spot", "spot", T0)
    for now_s in (T0, T0 + 900, T0 + 1800):
        meter.record(look(cluster, now_s))
    meter._then_s = T0 + 900  # the last period again, as after a restart that lost its mark: counted once
    meter.record(look(cluster, T0 + 1800))
    with sqlite3.connect(tmp_path / "ledger.db") as db:
        rows = db.execute("SELECT tenant, SUM(node_hours), SUM(cost) FROM cloud_hours GROUP BY tenant").fetchall()
        outcome = db.execute("SELECT outcome FROM job_runs WHERE job_id = 'j' ORDER BY end_s DESC").fetchone()
    paid_h = 1500.0 / 3600.0  # requested at T0, ended at T0 + 300 + 1200
    assert {t: (round(h, 9), round(c, 9)) for t, h, c in rows} == {
        "a": (round(1200.0 / 3600.0, 9), round(1200.0 / 3600.0 * 6.0, 9)),
        "": (round(300.0 / 3600.0, 9), round(300.0 / 3600.0 * 6.0, 9))}
    assert abs(sum(c for _, _, c in rows) - paid_h * 6.0) < 1e-9
    assert outcome == ("completed",)


def test_only_the_fake_cluster_tells_the_meter_more(tmp_path: Path) -> None:
    path = tmp_path / "cluster.yaml"
    path.write_text(CLUSTER.replace("max_nodes: 4", "max_nodes: 4, region: eu-west-1"))
    cluster = load_cluster_text(path.read_text())
    body = FakeCluster(cluster, [], tmp_path, start_s=T0)
    facts = facts_of(body, str(path))
    assert isinstance(facts, FakeClusterFacts) and facts.regions == {"spot": "eu-west-1"}
    assert facts_of(object(), str(path)) is None


def test_a_job_that_ended_while_the_meter_was_away_is_settled_at_its_next_period(tmp_path: Path) -> None:
    from greengpu.model import GpuSlot, PendingJob, RunningJob

    cluster = load_cluster_text(CLUSTER)
    (tmp_path / "state").mkdir()
    job = Job(job_id="j", tenant="a", gpus=4, duration_s=7200.0, submit_time_s=T0 - 50, gpus_per_node=4,
              gpu_profile="3g.20gb")
    other = Job(job_id="k", tenant="a", gpus=4, duration_s=7200.0, submit_time_s=T0 - 40, gpus_per_node=4)
    body = FakeCluster(cluster, [], tmp_path / "state", start_s=T0 - 60)
    meter = DaemonMeter.open(cluster, tmp_path / "ledger.db", None, "default", "test")
    meter.facts = FakeClusterFacts(body, {})
    running = tuple(RunningJob(j, tuple(GpuSlot("n1", i) for i in range(4)), T0 - 30, T0 + 7200) for j in (job,))
    meter.record(look(cluster, T0, running))
    meter.record(look(cluster, T0 + 60, running + (RunningJob(other, (), T0 + 30, T0 + 7200),)),
                 checkpoint_s={"j": 42.0, "k": float("nan")})
    body.finished["j"] = T0 + 100.0
    meter.record(look(cluster, T0 + 2000))  # after a gap: not charged, j and k gone
    meter.record(look(cluster, T0 + 2060, pending=(PendingJob(other),)))  # k waits again
    with sqlite3.connect(tmp_path / "ledger.db") as db:
        rows = db.execute("SELECT job_id, outcome, submit_s, checkpoint_s, gpu_profile FROM job_runs "
                          "ORDER BY job_id").fetchall()
    assert rows == [("j", "completed", T0 - 50, 42.0, "3g.20gb"), ("k", "preempted", T0 - 40, None, "")]
