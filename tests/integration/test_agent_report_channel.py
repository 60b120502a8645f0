"""The report channel agent -> daemon over real loopback HTTP: a real `greengpu agent` process posts its node's
report; a failing GPU reported for a node keeps new work off it, alerts with the job, tenant and last checkpoint,
and drains the node once its job is done (fake cluster); idle by measured use; the daemon's new metrics."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from manual_clock import ManualClock
from test_daemon import T0, make

from greengpu.control.daemon.http_api import DaemonServer
from greengpu.model import Job, PowerState

TOKEN = "report-token-of-sixteen+"


def post(base: str, value: Any, token: str | None = TOKEN, raw: bytes | None = None) -> tuple[int, dict[str, Any]]:
    data = raw if raw is not None else json.dumps(value).encode()
    request = urllib.request.Request(base + "/v1/report", data=data, method="POST",
                                     headers={"Authorization": f"Bearer {token}"} if token else {})
    try:
        with urllib.request.urlopen(request, timeout=5) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read() or b"{}")


def gpu(index: int, util: float, health: str = "healthy", jobs: tuple[str, ...] = ()) -> dict[str, Any]:
    return {"index": index, "utilization": util, "health": health, "score": 0.9 if health == "failing" else 0.0,
            "energy_mj": 1000 * index, "pids": [100 + index] if jobs else [], "jobs": list(jobs)}


def alerts(tmp_path: Path, kind: str) -> list[dict[str, Any]]:
    lines = (tmp_path / "state" / "audit.jsonl").read_text().splitlines()
    return [r for r in map(json.loads, lines) if r.get("alert") == kind]


def test_a_real_agent_process_reports_its_node_to_the_daemon(tmp_path: Path) -> None:
    clock = ManualClock(T0)
    daemon, _, _ = make(tmp_path, clock, jobs=[])
    server = DaemonServer(daemon, "127.0.0.1", 0, lambda: None, TOKEN).start()
    base = "http://{}:{}".format(*server.address)
    (tmp_path / "token").write_text(TOKEN + "\n")
    classes = tmp_path / "classes.yaml"
    classes.write_text("default_class: training\n")
    try:
        done = subprocess.run(
            [sys.executable, "-m", "greengpu", "agent", "--backend", "fake", "--fake-gpus", "4xA100", "--fake-busy",
             "1", "--classes", str(classes), "--journal", str(tmp_path / "journal.jsonl"), "--listen",
             "127.0.0.1:0", "--node", "n2", "--once", "--report-to", base, "--report-token-file",
             str(tmp_path / "token")], capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        fresh = daemon.reports.reports.fresh(T0)
        assert set(fresh) == {"n2"}
        report = fresh["n2"].report
        assert [g.index for g in report.gpus] == [0, 1, 2, 3]
        assert report.gpus[1].pids and report.gpus[1].utilization > 0.5 and report.gpus[1].jobs
        assert not report.gpus[0].pids and report.gpus[0].utilization == 0.0
        assert report.energy_j() is not None  # the fake GPUs have NVML's energy counter
        # A wrong token is refused before anything is read; the agent says so and goes on (exit 0).
        (tmp_path / "token").write_text("another-token-of-sixteen\n")
        again = subprocess.run(
            [sys.executable, "-m", "greengpu", "agent", "--backend", "fake", "--fake-gpus", "4xA100", "--classes",
             str(classes), "--journal", str(tmp_path / "journal2.jsonl"), "--listen", "127.0.0.1:0", "--node",
             "n2", "--once", "--report-to", base, "--report-token-file", str(tmp_path / "token")],
            capture_output=True, text=True, timeout=60)
        assert again.returncode == 0 and "report not delivered" in again.stderr and "401" in again.stderr
        text = urllib.request.urlopen(base + "/metrics", timeout=5).read().decode()
        assert 'greengpu_daemon_agent_reports_total{outcome="ok"} 1.0' in text
    finally:
        server.stop()


def test_bad_reports_are_refused_in_one_line_and_never_stored(tmp_path: Path) -> None:
    clock = ManualClock(T0)
    daemon, _, _ = make(tmp_path, clock, jobs=[])
    server = DaemonServer(daemon, "127.0.0.1", 0, lambda: None, TOKEN).start()
    base = "http://{}:{}".format(*server.address)
    good = {"node": "n1", "time_s": T0, "gpus": [gpu(0, 0.5)]}
    try:
        assert post(base, good, token=None)[0] == 401
        assert post(base, good, token="wrong-token-wrong-token")[0] == 401
        status, answer = post(base, {**good, "gpus": [gpu(9, 0.5)]})
        assert status == 400 and answer["error"].startswith("report.gpus[0].index")
        assert post(base, None, raw=b"x" * (300 * 1024))[0] == 413
        assert post(base, None, raw=b"[1,2")[0] == 400
        assert daemon.reports.reports.fresh(T0) == {}
        assert post(base, good) == (200, {"node": "n1", "ok": True})
    finally:
        server.stop()


def test_a_failing_gpu_keeps_work_off_alerts_and_drains_the_node_after_its_job_checkpoints(tmp_path: Path) -> None:
    clock = ManualClock(T0)
    jobs = [Job(job_id="train", tenant="a", gpus=4, duration_s=1500, submit_time_s=T0 + 30, gpus_per_node=4,
                checkpoint_interval_s=600.0),
            Job(job_id="later", tenant="b", gpus=4, duration_s=600, submit_time_s=T0 + 400, gpus_per_node=4)]
    daemon, body, _ = make(tmp_path, clock, jobs=jobs)
    server = DaemonServer(daemon, "127.0.0.1", 0, lambda: None, TOKEN).start()
    base = "http://{}:{}".format(*server.address)
    try:
        clock.now_s += 60
        assert daemon.tick().ok
        node = body.running["train"].slots[0].node
        drained_at = None
        ran_on: set[str] = set()
        for _ in range(40):
            clock.now_s += 60
            running = "train" in body.running and node in body.running["train"].nodes
            report = {"node": node, "time_s": clock.now_s,
                      "gpus": [gpu(0, 0.9, "failing", ("train",) if running else ())]
                      + [gpu(i, 0.9 if running else 0.0, jobs=("train",) if running else ()) for i in (1, 2, 3)],
                      "jobs": {"train": {"tenant": "a", "last_checkpoint_s": T0 + 90.0}} if running else {}}
            assert post(base, report)[0] == 200
            assert daemon.tick().ok
            ran_on.update(body.running["train"].nodes if "train" in body.running else ())
            assert all(node not in r.nodes for r in body.running.values() if r.job.job_id != "train")
            if drained_at is None and alerts(tmp_path, "node_drained"):
                drained_at = clock.now_s
        failing = alerts(tmp_path, "gpu_failing")
        assert len(failing) == 1  # once, not once a tick
        assert failing[0]["message"] == (
            f"{node}: GPU 0 failing; no new work, drained once empty; jobs still there: job train (tenant a, "
            "last checkpoint 30 s ago (at 1700000090))")
        # The training job was asked to checkpoint and stop, stopped after its grace and requeued; the node was
        # drained only once it had left, and the job finished elsewhere from its checkpoint.
        records = [json.loads(line) for line in (tmp_path / "state" / "audit.jsonl").read_text().splitlines()]
        asked = [r for r in records if r.get("kind") == "checkpoint" and r.get("job") == "train"]
        stopped = [r for r in records if r.get("kind") == "kill" and r.get("job") == "train"]
        assert len(asked) == 1 and asked[0]["outcome"] == "done" and len(stopped) == 1
        assert drained_at is not None and asked[0]["time_s"] < stopped[0]["time_s"] <= drained_at
        assert "train" in body.finished and ran_on - {node}  # resumed on another node, to the end
        assert "later" in body.finished  # the other job ran elsewhere
        assert daemon.last_observation is not None
        assert daemon.last_observation.snapshot.node_states[node].drained
        assert body.nodes[node].drained  # the fake cluster's own drained state, written down
        assert json.loads((tmp_path / "state" / "fake-cluster.json").read_text())["nodes"][
            int(node[1:]) - 1]["drained"]
        assert body.nodes[node].power == PowerState.AWAKE.value  # a drained node is not put to sleep by the drain
        text = urllib.request.urlopen(base + "/metrics", timeout=5).read().decode()
        assert "greengpu_daemon_drained_nodes 1.0" in text
        # Repaired: the agent reports the GPU healthy and an administrator returns the node; the daemon obeys.
        body.nodes[node].drained = False
        clock.now_s += 60
        assert post(base, {"node": node, "time_s": clock.now_s, "gpus": [gpu(i, 0.0) for i in range(4)]})[0] == 200
        assert daemon.tick().ok
        assert node not in daemon.last_observation.snapshot.node_states or not (
            daemon.last_observation.snapshot.node_states[node].drained)
        text = urllib.request.urlopen(base + "/metrics", timeout=5).read().decode()
        assert "greengpu_daemon_drained_nodes 0.0" in text and len(alerts(tmp_path, "node_drained")) == 1
        assert 'greengpu_daemon_queue_wait_seconds{quantile="0.5"}' in text
        assert "greengpu_daemon_job_failure_ratio 0.0" in text
    finally:
        server.stop()


def test_a_training_job_below_half_its_baseline_alerts_once_with_where_to_look(tmp_path: Path) -> None:
    clock = ManualClock(T0)
    jobs = [Job(job_id="big", tenant="vision", gpus=4, duration_s=7200, submit_time_s=T0 + 30, gpus_per_node=4,
                job_class="training")]
    daemon, body, _ = make(tmp_path, clock, jobs=jobs)
    server = DaemonServer(daemon, "127.0.0.1", 0, lambda: None, TOKEN).start()
    base = "http://{}:{}".format(*server.address)
    try:
        clock.now_s += 60
        assert daemon.tick().ok
        node = body.running["big"].slots[0].node
        for minute in range(45):
            clock.now_s += 60
            util = 0.8 if minute < 12 else 0.2 if minute < 40 else 0.75
            report = {"node": node, "time_s": clock.now_s, "gpus": [gpu(i, util, jobs=("big",)) for i in range(4)],
                      "jobs": {"big": {"tenant": "vision", "last_checkpoint_s": None}}}
            assert post(base, report)[0] == 200
            assert daemon.tick().ok
        stalled = alerts(tmp_path, "job_stalled")
        assert len(stalled) == 1 and len(alerts(tmp_path, "job_recovered")) == 1
        assert stalled[0]["message"] == (f"job big (tenant vision) on {node} stalled: GPU utilisation 20%, below half "
                                         "its baseline 80% for 900 s; last checkpoint: none seen since start")
        assert (stalled[0]["job"], stalled[0]["tenant"], stalled[0]["node"]) == ("big", "vision", node)
        text = urllib.request.urlopen(base + "/metrics", timeout=5).read().decode()
        assert "greengpu_daemon_stalled_jobs 0.0" in text  # recovered
    finally:
        server.stop()


def test_a_stale_report_keeps_an_idle_node_awake_and_a_busy_gpu_too(tmp_path: Path) -> None:
    from dataclasses import replace

    from greengpu.policy import SleepPolicy, SleepWindow

    clock = ManualClock(T0)
    daemon, body, _ = make(tmp_path, clock, jobs=[])
    daemon.policy = replace(daemon.policy, sleep=SleepPolicy(
        enabled=True, idle_timeout_s=300.0, windows=(SleepWindow(),), min_awake_s=0.0, warm_reserve_gpus=0,
        max_suspends_per_min=10))
    server = DaemonServer(daemon, "127.0.0.1", 0, lambda: None, TOKEN).start()
    base = "http://{}:{}".format(*server.address)
    try:
        # n1: a process busy outside the scheduler's books; n2: reported once, then silent; n3: no agent.
        assert post(base, {"node": "n2", "time_s": clock.now_s, "gpus": [gpu(0, 0.0)]})[0] == 200
        for _ in range(15):
            clock.now_s += 60
            assert post(base, {"node": "n1", "time_s": clock.now_s,
                               "gpus": [gpu(0, 0.95, jobs=("outside",))]})[0] == 200
            assert daemon.tick().ok
        assert body.nodes["n1"].power == PowerState.AWAKE.value  # busy by its report
        assert body.nodes["n2"].power == PowerState.AWAKE.value  # its report went stale: unknown, awake
        assert body.nodes["n3"].power in (PowerState.SUSPENDING.value, PowerState.ASLEEP.value)  # as before
    finally:
        server.stop()


def test_queue_wait_quantiles_and_the_failure_ratio_over_the_jobs_seen(tmp_path: Path) -> None:
    from dataclasses import replace

    from prometheus_client import generate_latest

    from greengpu.model import GpuSlot, NodeState, RunningJob

    clock = ManualClock(T0)
    daemon, body, _ = make(tmp_path, clock, jobs=[])
    seen = body.observe(T0, 0, 0)

    def running(job_id: str, node: str, wait_s: float) -> RunningJob:
        job = Job(job_id=job_id, tenant="a", gpus=1, duration_s=600, submit_time_s=T0 - wait_s)
        return RunningJob(job=job, slots=(GpuSlot(node, 0),), start_time_s=T0, expected_end_s=T0 + 600)

    jobs = tuple(running(f"j{i}", "n1" if i < 2 else "n2", 100.0 * i) for i in range(5))
    first = replace(seen, snapshot=replace(seen.snapshot, running=jobs))
    daemon.reports.after_tick(daemon, first, T0, act=False)
    # n1 fails: its two jobs end with it; of the others one ends as it should.
    failed = replace(seen, snapshot=replace(seen.snapshot, running=jobs[2:4],
                                            node_states={"n1": NodeState(power=PowerState.FAILED)}))
    daemon.reports.after_tick(daemon, failed, T0 + 60, act=False)
    text = generate_latest(daemon.metrics.registry).decode()
    assert 'greengpu_daemon_queue_wait_seconds{quantile="0.5"} 200.0' in text  # waits 0..400 s
    assert 'greengpu_daemon_queue_wait_seconds{quantile="0.95"} 380.0' in text
    assert "greengpu_daemon_job_failure_ratio 0.6666666666666666" in text  # 2 of the 3 that ended


def test_a_gpu_the_agent_finds_failing_drains_its_node_end_to_end(tmp_path: Path) -> None:
    """A real agent process reads a fake GPU whose row remapping failed (a critical event: `failing`) through
    NVML's seam, reports it, and the daemon drains that idle node on the fake cluster."""
    clock = ManualClock(T0)
    daemon, body, _ = make(tmp_path, clock, jobs=[])
    server = DaemonServer(daemon, "127.0.0.1", 0, lambda: None, TOKEN).start()
    base = "http://{}:{}".format(*server.address)
    (tmp_path / "token").write_text(TOKEN + "\n")
    classes = tmp_path / "classes.yaml"
    classes.write_text("default_class: training\n")
    gpus = tmp_path / "gpus.json"

    def agent(*extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "greengpu", "agent", "--backend", "fake", "--fake-gpus", "4xA100", "--fake-state",
             str(gpus), "--classes", str(classes), "--journal", str(tmp_path / "journal.jsonl"), "--listen",
             "127.0.0.1:0", "--node", "n3", "--once", *extra], capture_output=True, text=True, timeout=60)

    try:
        assert agent().returncode == 0  # writes the fake GPUs' state
        saved = json.loads(gpus.read_text())
        saved["gpus"][2]["remap_failure"] = True
        gpus.write_text(json.dumps(saved))
        done = agent("--report-to", base, "--report-token-file", str(tmp_path / "token"))
        assert done.returncode == 0, done.stderr
        assert "GPU health failing: n3 GPU 2" in done.stderr
        clock.now_s += 30
        assert daemon.tick().ok
        assert body.nodes["n3"].drained and not body.nodes["n1"].drained
        failing = alerts(tmp_path, "gpu_failing")
        assert [a["message"] for a in failing] == ["n3: GPU 2 failing; no new work, drained once empty; no job left"]
    finally:
        server.stop()


def test_reports_take_the_agents_token_which_changes_nothing_else(tmp_path: Path) -> None:
    clock = ManualClock(T0)
    daemon, _, store = make(tmp_path, clock, jobs=[])
    agents = "agents-token-of-sixteen+"
    server = DaemonServer(daemon, "127.0.0.1", 0, lambda: None, TOKEN, report_token=agents).start()
    base = "http://{}:{}".format(*server.address)
    try:
        assert post(base, {"node": "n1", "time_s": T0, "gpus": [gpu(0, 0.5)]}, token=agents)[0] == 200
        request = urllib.request.Request(base + "/v1/pause", data=b"", method="POST",
                                         headers={"Authorization": f"Bearer {agents}"})
        try:
            urllib.request.urlopen(request, timeout=5)
            raise AssertionError("the agents' token paused the daemon")
        except urllib.error.HTTPError as error:
            assert error.code == 401
        assert not store.paused()
    finally:
        server.stop()
    # Without --token-file, reports with the agents' token still come in; nothing else changes over HTTP.
    only = DaemonServer(daemon, "127.0.0.1", 0, lambda: None, None, report_token=agents).start()
    try:
        base = "http://{}:{}".format(*only.address)
        assert post(base, {"node": "n2", "time_s": T0, "gpus": [gpu(0, 0.5)]}, token=agents)[0] == 200
        assert post(base, {"node": "n2", "time_s": T0, "gpus": [gpu(0, 0.5)]}, token=TOKEN)[0] == 401
    finally:
        only.stop()
