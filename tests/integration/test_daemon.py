"""The daemon's loop on the fake cluster (fake NVML behind the real adapter, nodes that take time to
suspend and boot, a job stream): it sleeps idle nodes, wakes them for work, caps running GPUs, journals
every action before and after, meters energy to tenants, fails safe when it cannot see the cluster,
reconciles what a dead daemon left open, and never runs twice on one state directory."""

from __future__ import annotations

from pathlib import Path

import pytest
from inventories import SITE
from manual_clock import ManualClock

from greengpu.config.inventory import load_cluster
from greengpu.config.policy import load_policy
from greengpu.control.daemon.audit import Alerts, AuditLog
from greengpu.control.daemon.daemon_main import STOP_WAIT_S
from greengpu.control.daemon.service import Daemon
from greengpu.control.daemon.store import DaemonLocked, DaemonStore
from greengpu.control.fakes.fake_cluster import FakeCluster
from greengpu.model import Cluster, Job, PowerState

T0 = 1_700_000_000.0
A100X4 = ("{gpus: 4, gpu_model: A100, gpu_idle_w: 52, gpu_max_w: 400, gpu_min_limit_w: 100, host_idle_w: 300, "
          "host_sleep_w: 8, boot_s: 180, gpu_max_clock_mhz: 1410}")


def three_nodes(tmp_path: Path) -> Cluster:
    path = tmp_path / "cluster.yaml"
    path.write_text(SITE + f"node_types:\n  a100x4: {A100X4}\nnodes:\n  - {{name: \"n[1-3]\", type: a100x4}}\n"
                    "tenants:\n  a: {quota_gpus: 8}\n  b: {quota_gpus: 4}\n")
    return load_cluster(path)


JOBS = [Job(job_id="train", tenant="a", gpus=4, duration_s=1500, submit_time_s=T0 + 30, gpus_per_node=4),
        Job(job_id="wide", tenant="b", gpus=8, duration_s=600, submit_time_s=T0 + 1260, gpus_per_node=4)]


def make(tmp_path: Path, clock: ManualClock, dry_run: bool = False, jobs: list[Job] | None = None,
         never_wake: frozenset[str] = frozenset()) -> tuple[Daemon, FakeCluster, DaemonStore]:
    cluster = three_nodes(tmp_path)
    state = tmp_path / "state"
    state.mkdir(exist_ok=True)
    body = FakeCluster(cluster, JOBS if jobs is None else jobs, state, start_s=T0, never_wake=never_wake)
    store = DaemonStore(state)
    audit = AuditLog(state / "audit.jsonl")
    daemon = Daemon(body, load_policy("default"), store, audit, Alerts(audit), dry_run=dry_run, clock=clock)
    return daemon, body, store


def power(body: FakeCluster) -> dict[str, str]:
    return {name: node.power for name, node in body.nodes.items()}


def test_the_loop_sleeps_idle_nodes_wakes_them_for_work_and_caps_what_runs(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import json

    from greengpu.cli import main
    from greengpu.control.daemon.daemon_meter import DaemonMeter

    clock = ManualClock(T0)
    daemon, body, store = make(tmp_path, clock)
    ledger = tmp_path / "ledger.db"
    daemon.meter = DaemonMeter.open(body.cluster, ledger, None, "default", "fake")
    seen_asleep = False
    for _ in range(40):  # 40 minutes, one tick a minute
        clock.now_s += 60
        assert daemon.tick().ok
        daemon.meter_energy()  # the loop's metering job, once a minute
        seen_asleep = seen_asleep or PowerState.ASLEEP.value in power(body).values()
        if "train" in body.running and clock.now_s > T0 + 120:
            node = body.running["train"].slots[0].node
            limits = {body.gpu_limit_w(node, i) for i in range(4)}
            assert all(100.0 < w < 400.0 for w in limits) or daemon.last_result is not None and \
                daemon.last_result.scheduled.waiting.waiting  # capped for efficiency unless work waits
    assert seen_asleep  # idle nodes went to sleep (the default keeps a warm reserve awake)
    kinds = [e.kind for e in store.entries()]
    assert "sleep" in kinds and "wake" in kinds and "place" in kinds and "set_power_limit" in kinds
    assert set(body.finished) == {"train", "wide"}  # both ran to the end
    assert store.open_entries() == []  # every action closed after it was carried out
    audit = daemon.audit.records()
    places = [r for r in audit if r.get("kind") == "place"]
    assert {r["job"] for r in places} >= {"train", "wide"} and all(r["tenant"] in ("a", "b") for r in places)
    assert daemon.energy_by_tenant_j.get("a", 0.0) > 0  # measured GPU energy charged to the tenant that ran
    assert not [r for r in audit if r.get("alert")]  # no action was refused: each was decided on the right state
    # The metered month, billed: both tenants that ran, GPU energy measured from the fake GPUs' counters.
    assert daemon.meter is not None and daemon.meter.measured_nodes
    assert main(["report", "--ledger", str(ledger), "--month", "2023-11", "--run", str(daemon.meter.run_id),
                 "--format", "json"]) == 0
    bill = json.loads(capsys.readouterr().out)
    rows = {row["name"]: row for row in bill["rows"]}
    assert {"a", "b"} <= set(rows), bill.keys()
    assert rows["a"]["energy_kwh"] > 0 and rows["b"]["energy_kwh"] > 0
    # On the first of the next month the loop writes last month's report in every format.
    from datetime import UTC, datetime

    from greengpu.control.daemon.daemon_main import monthly_reports
    from greengpu.report.monthly_main import SCHEDULED_FORMATS, write_scheduled_reports

    written = monthly_reports(daemon, tmp_path / "reports", write_scheduled_reports,
                              datetime(2023, 12, 1, 0, 10, tzinfo=UTC))

    assert sorted(p.name for p in written) == sorted(f"greengpu-2023-11.{f}" for f in SCHEDULED_FORMATS)
    assert all(p.stat().st_size > 0 for p in written)


def test_dry_run_decides_and_journals_but_changes_nothing(tmp_path: Path) -> None:
    clock = ManualClock(T0)
    daemon, body, store = make(tmp_path, clock, dry_run=True)
    for _ in range(15):
        clock.now_s += 60
        daemon.tick()
    assert set(power(body).values()) == {PowerState.AWAKE.value}
    assert body.running == {} and all(body.gpu_limit_w(n, i) == 400.0 for n in body.nodes for i in range(4))
    entries = store.entries()
    assert entries and all(e.state == "done" for e in entries)
    assert {r["outcome"] for r in daemon.audit.records() if "kind" in r} == {"dry_run"}


def test_an_unobservable_cluster_releases_the_gpus_and_alerts(tmp_path: Path) -> None:
    clock = ManualClock(T0)
    daemon, body, _ = make(tmp_path, clock, jobs=[])
    clock.now_s += 60
    daemon.tick()  # idle GPUs go to their minimum limit
    assert body.gpu_limit_w("n1", 0) == 100.0

    def broken(*args: object) -> object:
        raise OSError("connection refused")

    body.observe = broken  # type: ignore[method-assign]
    clock.now_s += 60
    report = daemon.tick()
    assert not report.ok and "connection refused" in report.message
    assert all(body.gpu_limit_w(n, i) == 400.0 for n in body.nodes for i in range(4))  # back to defaults
    assert any(r.get("alert") == "observe_failed" for r in daemon.audit.records())


def test_a_restart_reconciles_writes_left_open(tmp_path: Path) -> None:
    clock = ManualClock(T0)
    daemon, body, store = make(tmp_path, clock, jobs=[])
    clock.now_s += 60
    daemon.tick()
    assert body.gpu_limit_w("n2", 1) == 100.0
    # The daemon dies between journalling a write and closing it.
    store.begin(clock.now_s, "set_power_limit", {"limit_w": 150.0}, node="n2", gpu=1)
    restarted, body2, store2 = make(tmp_path, clock, jobs=[])
    lines = restarted.reconcile()
    assert any("n2 GPU 1" in line for line in lines)
    assert store2.open_entries() == []
    assert all(body2.gpu_limit_w(n, i) == 400.0 for n in body2.nodes for i in range(4))
    assert [r for r in restarted.audit.records() if r.get("outcome") == "reconciled"]


def test_paused_releases_everything_and_sleeps_nothing(tmp_path: Path) -> None:
    clock = ManualClock(T0)
    daemon, body, store = make(tmp_path, clock, jobs=[])
    store.set_paused(True)
    for _ in range(20):
        clock.now_s += 60
        daemon.tick()
    assert set(power(body).values()) == {PowerState.AWAKE.value}
    assert all(body.gpu_limit_w(n, i) == 400.0 for n in body.nodes for i in range(4))
    store.set_paused(False)
    clock.now_s += 60
    daemon.tick()
    assert PowerState.SUSPENDING.value in power(body).values()  # idle for 21 minutes: sleeps once resumed


def test_two_daemons_never_hold_one_state_directory(tmp_path: Path) -> None:
    first, second = DaemonStore(tmp_path), DaemonStore(tmp_path)
    first.acquire()
    with pytest.raises(DaemonLocked, match="holds the lock"):
        second.acquire()
    first.release()
    second.acquire()
    second.release()


def http(url: str, method: str = "GET", token: str | None = None) -> tuple[int, str]:
    import urllib.error
    import urllib.request

    request = urllib.request.Request(url, method=method, data=b"" if method == "POST" else None,
                                     headers={"Authorization": f"Bearer {token}"} if token else {})
    try:
        with urllib.request.urlopen(request, timeout=5) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def test_http_serves_status_and_guards_every_change(tmp_path: Path) -> None:
    import json

    from greengpu.control.daemon.http_api import DaemonServer, RateLimit

    clock = ManualClock(T0)
    daemon, body, store = make(tmp_path, clock, jobs=[])
    token = "s3cret-token-of-sixteen+"
    healthy = {"problem": "no good tick yet"}
    server = DaemonServer(daemon, "127.0.0.1", 0, lambda: healthy["problem"], token, RateLimit(3)).start()
    base = "http://{}:{}".format(*server.address)
    try:
        assert http(base + "/healthz")[0] == 503
        clock.now_s += 60
        daemon.tick()
        healthy["problem"] = None
        assert http(base + "/healthz") == (200, "ok\n")
        status, text = http(base + "/metrics")
        assert status == 200 and 'greengpu_daemon_ticks_total{outcome="ok"} 1.0' in text
        assert 'greengpu_daemon_actions_total{kind="set_power_limit",outcome="done"} 12.0' in text  # idle: minimum
        state = json.loads(http(base + "/v1/status")[1])
        assert state["source"] == "fake" and set(state["nodes"]) == {"n1", "n2", "n3"} and not state["paused"]

        assert http(base + "/v1/pause", "POST")[0] == 401  # no token
        assert http(base + "/v1/pause", "POST", token="wrong-token-wrong-token")[0] == 401
        assert not store.paused()
        assert http(base + "/v1/pause", "POST", token=token)[0] == 200 and store.paused()
        clock.now_s += 60
        daemon.tick()
        assert all(body.gpu_limit_w(n, i) == 400.0 for n in body.nodes for i in range(4))  # paused: released
        assert http(base + "/v1/exempt?node=n9", "POST", token=token)[0] == 400
        assert http(base + "/v1/exempt?node=n2", "POST", token=token)[0] == 200 and store.exempt() == {"n2"}
        assert http(base + "/v1/resume", "POST", token=token)[0] == 429  # the fourth change this minute
        assert token not in (tmp_path / "state" / "audit.jsonl").read_text()
    finally:
        server.stop()
    without = DaemonServer(daemon, "127.0.0.1", 0, lambda: None, None).start()
    try:
        assert http("http://{}:{}/v1/pause".format(*without.address), "POST", token=token)[0] == 403
    finally:
        without.stop()


def test_the_command_runs_serves_refuses_a_second_daemon_and_stops_on_sigterm(tmp_path: Path) -> None:
    import os
    import signal
    import socket
    import subprocess
    import sys
    import time

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    three_nodes(tmp_path)
    argv = [sys.executable, "-m", "greengpu.cli", "daemon", "--backend", "fake", "--cluster",
            str(tmp_path / "cluster.yaml"), "--state", str(tmp_path / "state"), "--interval-s", "1"]
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[2])}
    first = subprocess.Popen([*argv, "--listen", f"127.0.0.1:{port}"], env=env, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                if http(f"http://127.0.0.1:{port}/healthz")[0] == 200:
                    break
            except OSError:
                pass
            time.sleep(0.2)
        else:
            raise AssertionError("the daemon never reported healthy")
        second = subprocess.run([*argv, "--listen", "127.0.0.1:0", "--once"], env=env, capture_output=True,
                                text=True, timeout=60)
        assert second.returncode == 1 and "holds the lock" in second.stderr
        time.sleep(2.5)  # a few more ticks
        first.send_signal(signal.SIGTERM)
        # A tick in flight may hold the stop for up to STOP_WAIT_S (the release must not race it); a busy CI
        # machine once took longer than the 20 s this waited before.
        assert first.wait(timeout=STOP_WAIT_S + 30) == 0
        assert first.stderr is not None
        said = first.stderr.read()
        # The daemon says what it does; the job scheduler under it does not add two lines a tick.
        assert "greengpu daemon: set_power_limit" in said and "Running job" not in said, said
    finally:
        if first.poll() is None:
            first.kill()
    from greengpu.backends.fake_nvml import FakeNvml

    for name in ("n1", "n2", "n3"):  # stopping released the fake GPUs it had capped
        saved = FakeNvml.stored_gpus(tmp_path / "state" / f"nvml-{name}.json")
        assert saved and [g.limit_w for g in saved] == [g.default_limit_w for g in saved]


def test_quiet_leaves_stderr_to_errors(tmp_path: Path) -> None:
    import os
    import signal
    import subprocess
    import sys
    import time

    three_nodes(tmp_path)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[2])}
    daemon = subprocess.Popen([sys.executable, "-m", "greengpu.cli", "-q", "daemon", "--backend", "fake", "--cluster",
                               str(tmp_path / "cluster.yaml"), "--state", str(tmp_path / "state"), "--interval-s", "1",
                               "--listen", "127.0.0.1:0"], env=env, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not AuditLog(tmp_path / "state" / "audit.jsonl").records():
            time.sleep(0.2)
        time.sleep(2.5)  # a few ticks past the first actions
        daemon.send_signal(signal.SIGTERM)
        assert daemon.wait(timeout=STOP_WAIT_S + 30) == 0  # a tick in flight may hold the stop
        assert daemon.stderr is not None and daemon.stderr.read() == ""
        assert AuditLog(tmp_path / "state" / "audit.jsonl").records()  # it did act: quiet, not idle
    finally:
        if daemon.poll() is None:
            daemon.kill()


@pytest.mark.parametrize("extra, says", [
    (["--listen", "nowhere"], "--listen"),
    (["--token-file", "/nonexistent/token"], "--token-file"),
    (["--lease-name", "other"], "use them with --source kubernetes"),
    (["--interval-s", "nan"], "finite"),
])
def test_bad_options_are_one_line_and_exit_2_before_anything_changes(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: list[str], says: str) -> None:
    from greengpu.cli import main

    three_nodes(tmp_path)
    code = main(["daemon", "--backend", "fake", "--cluster", str(tmp_path / "cluster.yaml"), "--state",
                 str(tmp_path / "state"),
                 "--once", *extra])
    err = capsys.readouterr().err
    assert code == 2 and says in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "state" / "daemon.db").exists() or not DaemonStore(tmp_path / "state").entries()


def test_agents_take_work_waiting_from_the_daemon_and_lift_caps_when_it_is_gone(tmp_path: Path) -> None:
    from greengpu.backends.fake_nvml import FakeNvml, make_gpus
    from greengpu.backends.nvml import NvmlBackend
    from greengpu.control.agent.jobclass import DaemonWaiting, LocalMap
    from greengpu.control.agent.journal import Journal
    from greengpu.control.agent.node_agent import Agent
    from greengpu.control.daemon.http_api import DaemonServer

    clock = ManualClock(T0)
    # Twelve GPUs, a 16-GPU job: it waits for capacity at every tick.
    daemon, _, _ = make(tmp_path, clock, jobs=[Job(job_id="huge", tenant="a", gpus=16, duration_s=600,
                                                   submit_time_s=T0 + 10, gpus_per_node=4)])
    server = DaemonServer(daemon, "127.0.0.1", 0, lambda: None).start()
    url = "http://{}:{}".format(*server.address)
    fake = FakeNvml(make_gpus("1xA100"), clock=clock)
    source = DaemonWaiting(LocalMap({0: "training"}), url, clock=clock)
    agent = Agent(NvmlBackend(lib=fake, clock=clock), load_policy("default").capping, source,
                  Journal(tmp_path / "journal.jsonl"), clock=clock)
    agent.start()
    fake.set_load(0, 0.9, [100])
    try:
        clock.now_s += 60
        daemon.tick()
        agent.tick()
        assert agent.waiting.job_ids == ("huge",) and fake.gpus[0].limit_w == 400.0  # uncapped: work waits
        daemon.last_result = None  # the daemon sees nothing waiting now
        agent.tick()
        assert not agent.waiting.waiting and fake.gpus[0].limit_w < 400.0  # capped again
    finally:
        server.stop()
    agent.tick()  # the daemon is gone: not known whether work waits, so the cap lifts (fail safe)
    assert fake.gpus[0].limit_w == 400.0 and source.problem is not None and "cannot ask the daemon" in source.problem
    agent.stop()


def test_agents_lift_caps_when_the_daemon_sees_no_slack_left_before_anything_waits(tmp_path: Path) -> None:
    """Twelve GPUs, the default's warm reserve a third of those in use (rounded down): with 8 in use 4 are
    free and 2 are asked, so caps stay; with 11 in use 1 is free and 3 are asked: no slack, caps lift on
    every node although no job waits (greengpu.sleep.headroom)."""
    from greengpu.backends.fake_nvml import FakeNvml, make_gpus
    from greengpu.backends.nvml import NvmlBackend
    from greengpu.control.agent.jobclass import DaemonWaiting, LocalMap
    from greengpu.control.agent.journal import Journal
    from greengpu.control.agent.node_agent import Agent
    from greengpu.control.daemon.http_api import DaemonServer

    clock = ManualClock(T0)
    daemon, body, _ = make(tmp_path, clock, jobs=[
        Job(job_id="big", tenant="a", gpus=8, duration_s=7200, submit_time_s=T0 + 10, gpus_per_node=4),
        Job(job_id="more", tenant="b", gpus=3, duration_s=7200, submit_time_s=T0 + 70)])
    server = DaemonServer(daemon, "127.0.0.1", 0, lambda: None).start()
    url = "http://{}:{}".format(*server.address)
    fake = FakeNvml(make_gpus("1xA100"), clock=clock)
    agent = Agent(NvmlBackend(lib=fake, clock=clock), load_policy("default").capping,
                  DaemonWaiting(LocalMap({0: "training"}), url, clock=clock), Journal(tmp_path / "journal.jsonl"),
                  clock=clock)
    agent.start()
    fake.set_load(0, 0.9, [100])
    try:
        clock.now_s += 60
        assert daemon.tick().ok and set(body.running) == {"big"}
        assert daemon.waiting_signal()["no_slack"] is False
        agent.tick()
        assert not agent.relaxed_for_queue and fake.gpus[0].limit_w < 400.0  # slack: capped for efficiency
        clock.now_s += 60
        assert daemon.tick().ok and set(body.running) == {"big", "more"}
        signal = daemon.waiting_signal()
        assert signal["no_slack"] is True and signal["job_ids"] == []  # nothing waits, yet no slack is left
        agent.tick()
        assert agent.relaxed_for_queue and agent.waiting.job_ids == () and fake.gpus[0].limit_w == 400.0
        # The daemon's own GPUs follow the same verdict: every busy GPU at its default limit (the idle one
        # stays at its minimum).
        busy = {(slot.node, slot.gpu_index) for running in body.running.values() for slot in running.slots}
        assert len(busy) == 11 and {body.gpu_limit_w(node, index) for node, index in busy} == {400.0}
    finally:
        server.stop()
    agent.stop()


def test_a_cluster_that_only_drains_old_work_keeps_no_reserve_and_its_caps(tmp_path: Path) -> None:
    """The same 11 of 12 GPUs in use, but by a job submitted two days ago and nothing since: no GPU arrived
    over the last day, so the reserve's share of use is 0 (greengpu.sleep.arrivals) and the caps stay."""
    clock = ManualClock(T0)
    daemon, body, _ = make(tmp_path, clock, jobs=[
        Job(job_id="old", tenant="a", gpus=11, duration_s=7200, submit_time_s=T0 - 2 * 86_400)])
    clock.now_s += 60
    assert daemon.tick().ok and set(body.running) == {"old"}
    assert daemon.arrivals.gpus(clock.now_s) == 0
    assert daemon.waiting_signal()["no_slack"] is False
    busy = [(slot.node, slot.gpu_index) for slot in body.running["old"].slots]
    assert all(100.0 < body.gpu_limit_w(node, index) < 400.0 for node, index in busy)  # capped


def test_the_fake_clusters_cached_gpu_view_is_what_nvml_reads(tmp_path: Path) -> None:
    """The fake cluster reads a node's GPUs again only when something changed them; after every tick of a
    busy hour (placements, ends, caps, sleeps, wakes, preemptions) its view equals a fresh NVML reading."""
    from greengpu.control.fakes.fake_cluster import generated_jobs

    clock = ManualClock(T0)
    cluster = three_nodes(tmp_path)
    daemon, body, _ = make(tmp_path, clock, jobs=generated_jobs(cluster, T0, count=120, seed=5))
    kinds: set[str] = set()
    for _ in range(60):
        clock.now_s += 60
        kinds.update(kind for kind, _, _ in daemon.tick().actions)
        cached = body.observe(clock.now_s, 0, 0)
        body.reread_gpus()
        fresh = body.observe(clock.now_s, 0, 0)
        assert cached.gpus == fresh.gpus
        assert cached.gpu_settings == fresh.gpu_settings
    assert {"place", "set_power_limit", "sleep", "wake"} <= kinds  # the view was kept through all of these


def test_a_preempted_fake_job_is_stopped_once_after_its_grace_and_the_urgent_job_runs(tmp_path: Path) -> None:
    clock = ManualClock(T0)
    filler = [Job(job_id=f"fill{i}", tenant="a", gpus=4, duration_s=36_000, submit_time_s=T0 + 1, gpus_per_node=4,
                  checkpoint_interval_s=600.0) for i in range(3)]
    urgent = Job(job_id="urgent", tenant="b", gpus=4, duration_s=600, submit_time_s=T0 + 300, gpus_per_node=4,
                 priority=100, job_class="inference")
    daemon, body, store = make(tmp_path, clock, jobs=[*filler, urgent])
    for _ in range(20):
        clock.now_s += 60
        assert daemon.tick().ok
    entries = store.entries(limit=10_000)
    preempts = [e for e in entries if e.kind == "preempt"]
    kills = [e for e in entries if e.kind == "kill"]
    assert len(preempts) == 1 and preempts[0].state == "done"  # asked once, not again at every tick
    victim = preempts[0].job
    assert [e.job for e in kills] == [victim]  # stopped once its grace was over
    assert "urgent" in body.running or "urgent" in body.finished
    # Requeued as a replay requeues it (sim/jobs.py `kill`): the work its last checkpoint saved taken off (one
    # every 600 s from its start), the preemption on its record; started again when room came.
    started_s = min(e.time_s for e in entries if e.kind == "place" and e.job == victim)
    saved_s = (kills[0].time_s - started_s) // 600.0 * 600.0
    again = body.running.get(victim)
    requeued = body.pending.get(victim, again)
    assert requeued is not None and requeued.job.duration_s == 36_000 - saved_s
    assert [r.by_job_id for r in requeued.preemptions] == ["urgent"]
    assert again is None or again.start_time_s > kills[0].time_s
