"""Every failure of a daemon tick is counted, alerted and failed safe (issue 38): an observation that hangs
(the tick deadline), a `daemon.db` another process holds, an alert webhook that is wrong or slow (the
GPUs go back first); `/v1/status` answers while the store is held; the systemd watchdog is not fed while
every tick fails. Real SQLite files, a real second process holding the lock, real HTTP on loopback."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest
from inventories import SITE
from manual_clock import ManualClock

from greengpu.config.inventory import load_cluster
from greengpu.config.policy import load_policy
from greengpu.control.bodies.body import Observation
from greengpu.control.daemon.audit import Alerts, AuditLog
from greengpu.control.daemon.service import Daemon
from greengpu.control.daemon.store import DaemonStore
from greengpu.control.daemon.tick_deadline import DeadlineTicks
from greengpu.control.fakes.fake_cluster import FakeCluster
from greengpu.model import Job

T0 = 1_700_000_000.0
A100X4 = ("{gpus: 4, gpu_model: A100, gpu_idle_w: 52, gpu_max_w: 400, gpu_min_limit_w: 100, host_idle_w: 300, "
          "host_sleep_w: 8, boot_s: 180, gpu_max_clock_mhz: 1410}")
JOBS = [Job(job_id="train", tenant="a", gpus=4, duration_s=3600, submit_time_s=T0 + 30, gpus_per_node=4)]


class HangingCluster(FakeCluster):
    """A fake cluster whose observation can be made to hang (a stuck squeue, an NFS mount gone)."""

    hang = threading.Event()
    released = threading.Event()

    def observe(self, now_s: float, suspends_last_minute: int, wakes_last_minute: int) -> Observation:
        if self.hang.is_set():
            self.released.wait(30)
        return super().observe(now_s, suspends_last_minute, wakes_last_minute)


def make(tmp_path: Path, clock: ManualClock, webhook: str | None = None,
         body_class: type[FakeCluster] = FakeCluster) -> tuple[Daemon, FakeCluster, DaemonStore]:
    path = tmp_path / "cluster.yaml"
    path.write_text(SITE + f"node_types:\n  a100x4: {A100X4}\nnodes:\n  - {{name: \"n[1-3]\", type: a100x4}}\n"
                    "tenants:\n  a: {quota_gpus: 8}\n")
    state = tmp_path / "state"
    state.mkdir(exist_ok=True)
    body = body_class(load_cluster(path), JOBS, state, start_s=T0)
    store = DaemonStore(state)
    audit = AuditLog(state / "audit.jsonl")
    return Daemon(body, load_policy("default"), store, audit, Alerts(audit, webhook, sleep=lambda s: None),
                  clock=clock), body, store


def capped(body: FakeCluster) -> list[float]:
    return [body.gpu_limit_w(n, i) for n in body.nodes for i in range(4) if body.gpu_limit_w(n, i) != 400.0]


def failed_ticks(daemon: Daemon) -> float:
    return daemon.metrics.ticks.labels("failed")._value.get()


def test_a_tick_that_hangs_is_a_failed_tick_alerted_once_and_the_gpus_go_back(tmp_path: Path) -> None:
    clock = ManualClock(T0 + 60)
    daemon, body, _ = make(tmp_path, clock, body_class=HangingCluster)
    ticks = DeadlineTicks(daemon, deadline_s=0.5)
    assert ticks.tick().ok and capped(body)  # idle GPUs at their minimum
    HangingCluster.released.clear()
    HangingCluster.hang.set()
    try:
        clock.now_s += 60
        started = time.monotonic()
        report = ticks.tick()
        assert time.monotonic() - started < 5 and not report.ok and "deadline" in report.message
        assert capped(body) == []  # fail safe while the tick hangs
        from greengpu.control.daemon.http_api import DaemonServer

        server = DaemonServer(daemon, "127.0.0.1", 0, lambda: None).start()
        try:  # /v1/status answers from what the last good tick saw, at once
            with urllib.request.urlopen("http://{}:{}/v1/status".format(*server.address), timeout=3) as answer:
                assert set(json.loads(answer.read())["nodes"]) == {"n1", "n2", "n3"}
        finally:
            server.stop()
        assert ticks.busy and not ticks.settle(0.1)
        clock.now_s += 60
        again = ticks.tick()  # the stuck tick has not returned: no second tick runs beside it
        assert not again.ok and "still not returned" in again.message
        assert failed_ticks(daemon) == 2
        alerts = [r for r in daemon.audit.records() if r.get("alert") == "tick_stalled"]
        assert len(alerts) == 1  # one alert per stall, not one per turn of the loop
    finally:
        HangingCluster.released.set()
    deadline = time.monotonic() + 10
    while ticks._busy and time.monotonic() < deadline:
        time.sleep(0.05)
    HangingCluster.hang.clear()
    clock.now_s += 60
    assert ticks.tick().ok  # ticks work again once the observation returns


HOLD = """
import sqlite3, sys, time
db = sqlite3.connect(sys.argv[1], isolation_level=None)
db.execute("BEGIN EXCLUSIVE")
print("held", flush=True)
time.sleep(float(sys.argv[2]))
"""


def test_a_daemon_db_another_process_holds_is_a_failed_tick_alerted_and_status_still_answers(
        tmp_path: Path) -> None:
    from greengpu.control.daemon.http_api import DaemonServer

    clock = ManualClock(T0 + 60)
    daemon, body, store = make(tmp_path, clock)
    assert daemon.tick().ok and capped(body)
    server = DaemonServer(daemon, "127.0.0.1", 0, lambda: None).start()
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(store.path), "30"], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        started = time.monotonic()
        with urllib.request.urlopen("http://{}:{}/v1/status".format(*server.address), timeout=5) as answer:
            status = json.loads(answer.read())
        assert time.monotonic() - started < 3  # not the 30 s it hung for
        assert "locked" in status["store_error"] and status["paused"] is False and set(status["nodes"]) == {
            "n1", "n2", "n3"}
        clock.now_s += 60
        report = daemon.tick()
        assert not report.ok and "daemon.db" in report.message and "locked" in report.message
        assert failed_ticks(daemon) == 1
        assert capped(body) == []  # caps released
        assert [r["alert"] for r in daemon.audit.records() if "alert" in r] == ["store_failed"]
    finally:
        holder.kill()
        holder.wait(timeout=10)
        server.stop()
    clock.now_s += 60
    assert daemon.tick().ok


def test_a_webhook_that_is_not_a_url_is_refused_at_start(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from greengpu.cli import main

    make(tmp_path, ManualClock())
    for url in ("not a url", "ftp://example.org/x", "http://", "http://[::1", "https://h:99999/"):
        code = main(["daemon", "--backend", "fake", "--cluster", str(tmp_path / "cluster.yaml"), "--state",
                     str(tmp_path / "fresh"), "--once", "--webhook", url])
        err = capsys.readouterr().err
        assert code == 2 and "--webhook" in err and len(err.strip().splitlines()) == 1, (url, err)
    assert not (tmp_path / "fresh").exists()  # refused before anything was made


def test_an_alert_that_cannot_be_posted_never_holds_or_skips_the_release(tmp_path: Path) -> None:
    """The release comes first, and an alert that fails to post does not raise (46 tracebacks, GPUs capped)."""
    clock = ManualClock(T0 + 60)
    daemon, body, _ = make(tmp_path, clock, webhook="http://127.0.0.1:9/alerts")  # discard port: refused
    assert daemon.tick().ok and capped(body)
    order: list[str] = []
    release = body.release_gpus
    post = daemon.alerts._post

    def released(reason: str) -> list[str]:
        order.append("release")
        return release(reason)

    def posted(record: dict[str, object]) -> None:
        order.append("alert")
        post(record)

    body.release_gpus = released  # type: ignore[method-assign]
    daemon.alerts._post = posted  # type: ignore[method-assign]

    def broken(now_s: float, sleeps: int, wakes: int) -> Observation:
        raise OSError("squeue: connection refused")

    body.observe = broken  # type: ignore[method-assign]
    clock.now_s += 60
    report = daemon.tick()
    assert not report.ok and capped(body) == []
    assert order == ["release", "alert"] and daemon.alerts.undelivered == 1


def test_the_watchdog_is_fed_only_while_ticks_succeed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A daemon whose every tick fails stops pinging systemd (which then restarts it); a real datagram socket."""
    import socket

    from greengpu.control.daemon.daemon_main import loop_turn

    notify = tmp_path / "notify.sock"
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    listener.bind(str(notify))
    listener.settimeout(0.2)
    monkeypatch.setenv("NOTIFY_SOCKET", str(notify))
    clock = ManualClock(T0 + 60)
    daemon, body, _ = make(tmp_path, clock)
    ticks = DeadlineTicks(daemon, deadline_s=10)
    problem: dict[str, str | None] = {"now": None}
    ready: dict[str, bool] = {}
    try:
        assert loop_turn(ticks, lambda: problem["now"], ready).ok
        assert _collect(listener, 0.5) == ["READY=1", "WATCHDOG=1"]

        def broken(now_s: float, sleeps: int, wakes: int) -> Observation:
            raise OSError("squeue: connection refused")

        body.observe = broken  # type: ignore[method-assign]
        problem["now"] = "last good tick 200 s ago"
        for _ in range(3):
            clock.now_s += 60
            assert not loop_turn(ticks, lambda: problem["now"], ready).ok
        assert _collect(listener, 0.5) == []  # not fed while every tick fails
    finally:
        listener.close()


def _collect(listener: object, seconds: float) -> list[str]:
    import socket

    assert isinstance(listener, socket.socket)
    messages: list[str] = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            messages.extend(listener.recv(4096).decode().split("\n"))
        except TimeoutError:
            continue
    return messages
