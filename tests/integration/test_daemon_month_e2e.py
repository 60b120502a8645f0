"""Issue 36 end to end: the daemon on the fake cluster with cloud pools and a GPU that turns failing, over
loopback HTTP, metering into a ledger, then `greengpu report` in every format (docs/LEDGER.md).

The daemon runs in this process on a manual clock (five simulated hours in seconds; a daemon process runs on
the wall clock); its HTTP server, the agents' report channel and `greengpu report` are the real ones. The
agent's reports are posted as `greengpu agent` posts them, with an energy counter of exactly 1 kW per node so
that the ledger's measured energy can be checked to the joule."""

from __future__ import annotations

import csv
import io
import json
import sqlite3
import urllib.request
from dataclasses import replace
from pathlib import Path
from typing import Any

from inventories import SITE
from manual_clock import ManualClock

from greengpu.cli import main
from greengpu.config.inventory import load_cluster
from greengpu.config.policy import load_policy
from greengpu.control.daemon.audit import Alerts, AuditLog
from greengpu.control.daemon.daemon_main import STOP_WAIT_S
from greengpu.control.daemon.daemon_meter import DaemonMeter
from greengpu.control.daemon.http_api import REPORTS_PER_MINUTE, DaemonServer, RateLimit
from greengpu.control.daemon.meter_facts import facts_of
from greengpu.control.daemon.service import Daemon
from greengpu.control.daemon.store import DaemonStore
from greengpu.control.fakes.fake_cluster import FakeCluster
from greengpu.model import Job

T0 = 1_700_000_000.0  # 2023-11-14
DECEMBER = 1_701_700_000.0  # 2023-12-04
HOUR = 3600.0
TOKEN = "report-token-of-sixteen+"
A100X4 = ("{gpus: 4, gpu_model: A100, gpu_idle_w: 52, gpu_max_w: 400, gpu_min_limit_w: 100, host_idle_w: 300, "
          "host_sleep_w: 8, boot_s: 180, gpu_max_clock_mhz: 1410}")
POOLS = ("pools:\n"
         "  aws-spot: {type: a100x4, spot: true, price_per_hour: 8.0, interruptions_per_hour: 0.05, max_nodes: 4,"
         " region: us-east-1}\n"
         "  aws-od: {type: a100x4, price_per_hour: 16.0, max_nodes: 2}\n")
PRICE = {"aws-spot": 8.0, "aws-od": 16.0}
# Two nodes busy for 20 h with work that cannot move; a checkpointing job on the third, whose GPU 0 fails; then a
# training job and an inference service arrive with nowhere on-premises to run.
JOBS = [Job(job_id=f"big{i}", tenant="b", gpus=4, duration_s=20 * HOUR, submit_time_s=T0 + 10, interruptible=False,
            gpus_per_node=4) for i in (1, 2)] + [
    Job(job_id="train", tenant="a", gpus=4, duration_s=3 * HOUR, submit_time_s=T0 + 20, checkpoint_interval_s=600.0,
        gpus_per_node=4),
    Job(job_id="ns/spotty", tenant="a", gpus=4, duration_s=2 * HOUR, submit_time_s=T0 + 100,
        checkpoint_interval_s=1800.0, gpus_per_node=4),
    Job(job_id="serve", tenant="c", gpus=4, duration_s=2 * HOUR, submit_time_s=T0 + 100, job_class="inference",
        interruptible=False, gpus_per_node=4)]
NODE_W = 1000.0  # what the agent's counters say each reporting node's GPUs draw


def daemon_on(tmp_path: Path, name: str, pools: str, jobs: list[Job], start_s: float,
              ledger: Path) -> tuple[Daemon, FakeCluster, ManualClock]:
    path = tmp_path / f"{name}.yaml"
    path.write_text(SITE + f"node_types:\n  a100x4: {A100X4}\nnodes:\n  - {{name: \"n[1-3]\", type: a100x4}}\n"
                    "tenants:\n  a: {quota_gpus: 32}\n  b: {quota_gpus: 32}\n  c: {quota_gpus: 32}\n" + pools)
    cluster = load_cluster(path)
    state = tmp_path / name
    state.mkdir()
    clock = ManualClock(start_s)
    body = FakeCluster(cluster, jobs, state, start_s=start_s)
    audit = AuditLog(state / "audit.jsonl")
    daemon = Daemon(body, load_policy("default"), DaemonStore(state), audit, Alerts(audit), clock=clock)
    daemon.meter = DaemonMeter.open(cluster, ledger, None, "default", "fake")
    daemon.meter.facts = facts_of(body, str(path))  # as daemon_main.open_meter does
    return daemon, body, clock


def post(base: str, report: dict[str, Any]) -> int:
    request = urllib.request.Request(base + "/v1/report", data=json.dumps(report).encode(), method="POST",
                                     headers={"Authorization": f"Bearer {TOKEN}"})
    with urllib.request.urlopen(request, timeout=5) as answer:
        return int(answer.status)


def report(ledger: Path, month: str, run: int, fmt: str, out: Path) -> str:
    assert main(["report", "--ledger", str(ledger), "--month", month, "--run", str(run), "--format", fmt,
                 "--out", str(out)]) == 0
    return out.read_text()


FIGURES = ("cost", "co2_kg", "cloud_cost", "cloud_co2_kg", "energy_kwh")


def assert_adds_up(bill: dict[str, Any]) -> None:
    for key in FIGURES:
        rows = sum(t[key] for t in bill["tenants"]) + bill["idle"][key]
        assert abs(rows - bill["totals"][key]) <= (0.01 if "cost" in key else 0.001), (key, rows, bill["totals"])


def test_a_month_on_the_fake_cluster_with_cloud_pools_and_a_failing_gpu_is_billed_truthfully(tmp_path: Path) -> None:
    ledger = tmp_path / "ledger.db"
    daemon, body, clock = daemon_on(tmp_path, "cloudy", POOLS, JOBS, T0, ledger)
    server = DaemonServer(daemon, "127.0.0.1", 0, lambda: None, TOKEN,
                          report_limit=RateLimit(REPORTS_PER_MINUTE, clock=clock)).start()
    base = "http://{}:{}".format(*server.address)
    counter_mj, node = 0, ""
    try:
        clock.now_s += 60
        assert daemon.tick().ok  # the jobs start; metering begins with the first report
        node = body.running["train"].slots[0].node
        first_report_s = None
        for step in range(300):  # five hours, a tick, a report and a metering a minute
            clock.now_s += 60
            running = "train" in body.running and node in body.running["train"].nodes
            counter_mj += int(NODE_W * 60 * 1000)
            gpus = [{"index": i, "utilization": 0.9 if running else 0.0, "energy_mj": counter_mj // 4,
                     "health": "failing" if i == 0 and step >= 10 else "healthy",
                     "jobs": ["train"] if running else []} for i in range(4)]
            jobs = {"train": {"tenant": "a", "last_checkpoint_s": T0 + 90.0, "checkpoint_duration_s": 42.0}}
            assert post(base, {"node": node, "time_s": clock.now_s, "gpus": gpus,
                               "jobs": jobs if running else {}}) == 200
            first_report_s = first_report_s or clock.now_s
            assert daemon.tick().ok
            daemon.meter_energy()
        with urllib.request.urlopen(base + "/v1/status", timeout=5) as answer:
            status = json.loads(answer.read())
        with urllib.request.urlopen(base + "/metrics", timeout=5) as answer:
            metrics = answer.read().decode()
    finally:
        server.stop()
    # Spot placements: the training job that arrived to a full cluster went to spot, the service on demand.
    placements = status["capacity"]["placements"]
    assert placements.get("spot/aws-spot", 0) >= 1 and placements.get("on-demand/aws-od", 0) >= 1
    assert body.cloud.finished["ns/spotty"].capacity == "spot" and body.cloud.finished["serve"].capacity == "on-demand"
    assert 'greengpu_daemon_cloud_placements_total{capacity="spot",pool="aws-spot"}' in metrics
    # The drain, and the alert naming node, job, tenant and last checkpoint.
    records = daemon.audit.records()
    failing = [r for r in records if r.get("alert") == "gpu_failing"]
    assert len(failing) == 1 and failing[0]["node"] == node
    assert failing[0]["message"].startswith(f"{node}: GPU 0 failing; no new work, drained once empty; jobs still "
                                            "there: job train (tenant a, last checkpoint ")
    assert failing[0]["message"].endswith("(at 1700000090))")
    assert [r["node"] for r in records if r.get("alert") == "node_drained"] == [node] and body.nodes[node].drained
    assert "greengpu_daemon_drained_nodes 1.0" in metrics
    assert "train" in body.finished  # resumed from its checkpoint and ran to its end

    run = daemon.meter.run_id if daemon.meter is not None else 0
    with sqlite3.connect(ledger) as db:
        segments = db.execute("SELECT outcome, submit_s, checkpoint_s, pool FROM job_runs WHERE run_id = ? AND "
                              "job_id = 'train' ORDER BY end_s", (run,)).fetchall()
        node_kwh = db.execute("SELECT SUM(gpu_energy_kwh), MIN(basis) FROM node_hours WHERE run_id = ? AND node = ?",
                              (run, node)).fetchone()
        metered = db.execute("SELECT MIN(start_s), MAX(end_s) FROM metered_periods WHERE run_id = ?",
                             (run,)).fetchone()
    # How the job ended, on its last segment; its stop for the failing GPU; submit and checkpoint times.
    outcomes = [s[0] for s in segments if s[0]]
    assert outcomes[0] == "preempted" and outcomes[-1] == "completed" and segments[-1][0] == "completed"
    assert {s[1] for s in segments} == {T0 + 20} and {s[2] for s in segments} == {42.0}
    # The failing node's GPU energy is the agent's counters, to the joule: every period from its first report on.
    assert node_kwh[1] == "measured"
    assert metered[0] == first_report_s
    assert abs(node_kwh[0] - NODE_W * (metered[1] - first_report_s) / 3.6e6) < 1e-9

    month = report(ledger, "2023-11", run, "json", tmp_path / "nov.json")
    bill = json.loads(month)
    tenants = {t["tenant"]: t for t in bill["tenants"]}
    # Cloud spend per tenant: what the pools were paid, node by node, from request to end.
    paid = sum(len(r.nodes) * (r.end_s - r.requested_s) / HOUR * PRICE[r.pool] for r in body.cloud.finished.values())
    assert abs(bill["totals"]["cloud_cost"] - paid) <= 0.01
    assert tenants["c"]["cloud_cost"] == 2 * PRICE["aws-od"]  # the service's two hours on one on-demand node
    assert tenants["a"]["cloud_cost"] > 0 and tenants["b"]["cloud_cost"] == 0 and tenants["b"]["cloud_co2_kg"] == 0
    assert all(tenants[t]["cloud_co2_kg"] > 0 for t in ("a", "c"))
    assert all(t["basis"] in ("measured", "modelled") or t["basis"].startswith("partly") for t in bill["tenants"])
    assert bill["basis"] == "measured"
    assert_adds_up(bill)
    table = list(csv.DictReader(io.StringIO(report(ledger, "2023-11", run, "csv", tmp_path / "nov.csv"))))
    by_name = {row["tenant"]: row for row in table}
    assert float(by_name["c"]["cloud_cost"]) == 32.0 and float(by_name["TOTAL"]["cloud_cost"]) == bill[
        "totals"]["cloud_cost"]
    assert all(row["basis"] for row in table)
    text = report(ledger, "2023-11", run, "text", tmp_path / "nov.txt")
    assert "cloud USD" in text and "cloud CO2 kg" in text and "32.00" in text
    page = report(ledger, "2023-11", run, "html", tmp_path / "nov.html")
    assert "cloud" in page.lower() and "32.00" in page

    # A month without cloud: a second daemon run with no pools, in December, carries zero cloud columns.
    quiet, _, quiet_clock = daemon_on(tmp_path, "quiet", "", [Job(job_id="small", tenant="b", gpus=4,
                                                                  duration_s=HOUR, submit_time_s=DECEMBER + 30,
                                                                  gpus_per_node=4)], DECEMBER, ledger)
    for _ in range(90):
        quiet_clock.now_s += 60
        assert quiet.tick().ok
        quiet.meter_energy()
    second = quiet.meter.run_id if quiet.meter is not None else 0
    december = json.loads(report(ledger, "2023-12", second, "json", tmp_path / "dec.json"))
    assert december["totals"]["energy_kwh"] > 0 and {t["tenant"] for t in december["tenants"]} == {"b"}
    for row in (december["totals"], december["idle"], *december["tenants"]):
        assert row["cloud_cost"] == 0 and row["cloud_co2_kg"] == 0
    assert_adds_up(december)
    for row in csv.DictReader(io.StringIO(report(ledger, "2023-12", second, "csv", tmp_path / "dec.csv"))):
        assert float(row["cloud_cost"]) == 0 and float(row["cloud_co2_kg"]) == 0 and row["basis"]
    assert "cloud USD" in report(ledger, "2023-12", second, "text", tmp_path / "dec.txt")
    assert "cloud" in report(ledger, "2023-12", second, "html", tmp_path / "dec.html").lower()


PROCESS_CLUSTER = """site: {pue: 1.2, price_per_kwh: 0.1, carbon_g_per_kwh: 300}
node_types:
  a100x4: {gpus: 4, gpu_model: A100, gpu_idle_w: 52, gpu_max_w: 400, gpu_min_limit_w: 100, host_idle_w: 300,
           host_sleep_w: 8, boot_s: 1, gpu_max_clock_mhz: 1410}
nodes:
  - {name: n1, type: a100x4}
tenants:
  a: {quota_gpus: 32}
  b: {quota_gpus: 32}
pools:
  aws-spot: {type: a100x4, spot: true, price_per_hour: 8.0, interruptions_per_hour: 0.05, max_nodes: 4,
             region: us-east-1}
"""
PROCESS_TRACE = """job_id,submit_time,duration_s,gpus,tenant,priority,class,checkpoint_interval_s,gpu_profile
big,2024-03-04T07:00:00Z,72000,4,b,0,inference,,
spotty,2024-03-04T07:00:01Z,5,4,a,0,training,1800,
"""


def test_the_daemon_process_meters_its_cloud_runs_into_the_ledger(tmp_path: Path) -> None:
    """`greengpu daemon --backend fake` as a process (wall clock, metering every 0.2 s): the job that finds the one
    node taken goes to spot, and its cloud node time and outcome reach the ledger and the report."""
    import datetime as dt
    import os
    import signal
    import subprocess
    import sys
    import time

    (tmp_path / "cluster.yaml").write_text(PROCESS_CLUSTER)
    (tmp_path / "trace.csv").write_text(PROCESS_TRACE)
    ledger = tmp_path / "state" / "ledger.db"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[2]), "GREENGPU_METER_INTERVAL_S": "0.2"}
    daemon = subprocess.Popen([sys.executable, "-m", "greengpu.cli", "-q", "daemon", "--backend", "fake", "--cluster",
                               str(tmp_path / "cluster.yaml"), "--state", str(tmp_path / "state"), "--interval-s",
                               "1", "--listen", "127.0.0.1:0", "--trace", str(tmp_path / "trace.csv")],
                              env=env, stderr=subprocess.PIPE, text=True)
    ended: tuple[float] | None = None
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and ended is None:
            time.sleep(0.5)
            if ledger.exists():
                with sqlite3.connect(ledger) as db:
                    try:
                        ended = db.execute("SELECT end_s FROM job_runs WHERE job_id = 'spotty' AND pool = 'aws-spot' "
                                           "AND outcome = 'completed'").fetchone()
                    except sqlite3.OperationalError:  # the file is there, its tables not yet: ask again
                        continue
        daemon.send_signal(signal.SIGTERM)
        assert daemon.wait(timeout=STOP_WAIT_S + 30) == 0  # a tick in flight may hold the stop
    finally:
        if daemon.poll() is None:
            daemon.kill()
    assert ended is not None, "the spot job's end never reached the ledger"
    with sqlite3.connect(ledger) as db:
        (used_h, cost), = db.execute("SELECT SUM(node_hours), SUM(cost) FROM cloud_hours WHERE tenant = 'a' AND "
                                     "pool = 'aws-spot' AND region = 'us-east-1'").fetchall()
    assert abs(used_h - 5.0 / HOUR) < 1e-9 and abs(cost - 8.0 * 5.0 / HOUR) < 1e-9  # its five seconds on spot
    month = dt.datetime.fromtimestamp(ended[0], dt.UTC).strftime("%Y-%m")
    bill = json.loads(report(ledger, month, 1, "json", tmp_path / "bill.json"))
    tenants = {t["tenant"]: t for t in bill["tenants"]}
    assert tenants["a"]["cloud_cost"] == round(8.0 * 5.0 / HOUR, 2) and bill["totals"]["cloud_co2_kg"] > 0
    assert_adds_up(bill)


def test_a_fleet_ledger_takes_the_same_cloud_rows_and_outcomes(tmp_path: Path) -> None:
    """The meter's new writes (a period's cloud rows, a job's outcome on its last segment) on PostgreSQL."""
    import psycopg
    from pg_server import pg_server

    from greengpu.accounting.ledger_url import parse_ledger
    from greengpu.model import GpuSlot, RunningJob

    _, body, _ = daemon_on(tmp_path, "fleet", POOLS, [], T0, tmp_path / "unused.db")
    job = Job(job_id="j", tenant="a", gpus=4, duration_s=1200.0, submit_time_s=T0 - 50, gpus_per_node=4)
    with pg_server() as server:
        url = server.create_database()
        meter = DaemonMeter.open(body.cluster, parse_ledger(url), None, "default", "fake")
        meter.facts = facts_of(body, str(tmp_path / "fleet.yaml"))
        body.cloud.start(job, "spot", "aws-spot", T0)
        seen = body.observe(T0, 0, 0)
        on_prem = RunningJob(replace(job, job_id="p"), tuple(GpuSlot("n1", i) for i in range(4)), T0 - 30, T0 + 60)
        body.finished["p"] = T0 + 60  # the on-premises job ran to its end: settled when it has left
        for now_s, running in ((T0, (on_prem,)), (T0 + 900, (on_prem,)), (T0 + 1800, ())):
            meter.record(replace(seen, snapshot=replace(seen.snapshot, time_s=now_s, running=running)))
        with psycopg.connect(url) as db:
            cloud = db.execute("SELECT tenant, region, SUM(cost) FROM cloud_hours GROUP BY tenant, region "
                               "ORDER BY tenant").fetchall()
            ended = db.execute("SELECT job_id, outcome, pool FROM job_runs WHERE outcome <> '' "
                               "ORDER BY job_id").fetchall()
    # 180 s of boot paid to no one, the job's 1200 s to its tenant, at 8.0 a node-hour.
    assert [(t, r, round(c, 9)) for t, r, c in cloud] == [("", "us-east-1", round(8.0 * 180 / HOUR, 9)),
                                                         ("a", "us-east-1", round(8.0 * 1200 / HOUR, 9))]
    assert ended == [("j", "completed", "aws-spot"), ("p", "completed", "")]
