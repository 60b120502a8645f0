"""The daemon's HTTP server under clients that misbehave (issue 38), real sockets on loopback: idle and
half-sent connections cost no thread and do not hold up a scrape, a client that hangs up is no traceback,
a wrong method is 405, a wrong token is told so, and refused changes do not flood the log."""

from __future__ import annotations

import logging
import socket
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from inventories import SITE
from manual_clock import ManualClock

from greengpu.config.inventory import load_cluster
from greengpu.config.policy import load_policy
from greengpu.control.daemon.audit import Alerts, AuditLog
from greengpu.control.daemon.http_api import DaemonServer
from greengpu.control.daemon.service import Daemon
from greengpu.control.daemon.store import DaemonStore
from greengpu.control.fakes.fake_cluster import FakeCluster

T0 = 1_700_000_000.0
TOKEN = "s3cret-token-of-sixteen+"
A100X4 = ("{gpus: 4, gpu_model: A100, gpu_idle_w: 52, gpu_max_w: 400, gpu_min_limit_w: 100, host_idle_w: 300, "
          "host_sleep_w: 8, boot_s: 180, gpu_max_clock_mhz: 1410}")


@pytest.fixture
def served(tmp_path: Path) -> Iterator[DaemonServer]:
    path = tmp_path / "cluster.yaml"
    path.write_text(SITE + f"node_types:\n  a100x4: {A100X4}\nnodes:\n  - {{name: \"n[1-2]\", type: a100x4}}\n"
                    "tenants:\n  a: {quota_gpus: 8}\n")
    state = tmp_path / "state"
    state.mkdir()
    body = FakeCluster(load_cluster(path), [], state, start_s=T0)
    audit = AuditLog(state / "audit.jsonl")
    daemon = Daemon(body, load_policy("default"), DaemonStore(state), audit, Alerts(audit), clock=ManualClock(T0))
    daemon.tick()
    server = DaemonServer(daemon, "127.0.0.1", 0, lambda: None, TOKEN, read_timeout_s=2.0).start()
    yield server
    server.stop()


def call(server: DaemonServer, path: str, method: str = "GET", token: str | None = None) -> tuple[int, str, dict[
        str, str]]:
    request = urllib.request.Request("http://{}:{}{}".format(*server.address, path), method=method,
                                     data=b"" if method == "POST" else None,
                                     headers={"Authorization": f"Bearer {token}"} if token else {})
    try:
        with urllib.request.urlopen(request, timeout=5) as answer:
            return answer.status, answer.read().decode(), dict(answer.headers)
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode(), dict(error.headers)


def test_the_wrong_method_is_405_and_a_wrong_token_is_told_so(served: DaemonServer) -> None:
    status, _, headers = call(served, "/v1/pause")
    assert status == 405 and headers["Allow"] == "POST"
    status, _, headers = call(served, "/metrics", "POST", TOKEN)
    assert status == 405 and headers["Allow"] == "GET"
    status, text, _ = call(served, "/v1/pause", "POST", "wrong-token-wrong-token")
    assert status == 401 and "wrong" in text and "required" not in text
    status, text, _ = call(served, "/v1/pause", "POST")
    assert status == 401 and "required" in text


def test_refused_changes_are_logged_once_a_minute_not_once_each(served: DaemonServer,
                                                                 caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="greengpu"):
        for _ in range(20):
            assert call(served, "/v1/pause", "POST", "wrong-token-wrong-token")[0] == 401
    refused = [r for r in caplog.records if "refused" in r.getMessage()]
    assert len(refused) == 1, [r.getMessage() for r in refused]


def test_a_client_that_hangs_up_is_no_traceback(served: DaemonServer, capfd: pytest.CaptureFixture[str]) -> None:
    for _ in range(20):
        with socket.create_connection(served.address, timeout=5) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
            sock.sendall(b"GET /metrics HTTP/1.0\r\n\r\n")
    time.sleep(0.5)
    assert call(served, "/healthz")[0] == 200
    assert "Traceback" not in capfd.readouterr().err


def test_idle_and_half_sent_connections_hold_no_thread_and_are_dropped(served: DaemonServer) -> None:
    before = threading.active_count()
    idle = [socket.create_connection(served.address, timeout=10) for _ in range(100)]
    for sock in idle[:50]:
        sock.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")  # half a request, never finished
    try:
        started = time.monotonic()
        for _ in range(20):
            assert call(served, "/metrics")[0] == 200
        assert time.monotonic() - started < 5
        assert threading.active_count() - before <= 8 + 1  # the workers, whatever the clients do
        time.sleep(3.0)  # past the read timeout (2 s here): the server closed them
        closed = 0
        for sock in idle:
            sock.settimeout(1)
            try:
                closed += sock.recv(1) == b""
            except OSError:
                closed += 1
        assert closed == len(idle)
        assert served.server.dropped_idle >= len(idle)
    finally:
        for sock in idle:
            sock.close()
