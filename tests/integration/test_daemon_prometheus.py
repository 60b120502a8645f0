"""A real Prometheus (Debian's package) scrapes the daemon on loopback: the target is up and the daemon's
series are stored, queried back through Prometheus's own HTTP API. Needs `prometheus` (installed by
.ci/run)."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest
from manual_clock import ManualClock
from test_daemon import make

from greengpu.control.daemon.http_api import DaemonServer


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def query(base: str, expression: str) -> list[dict[str, object]]:
    with urllib.request.urlopen(f"{base}/api/v1/query?query={urllib.request.quote(expression)}", timeout=5) as answer:
        return list(json.loads(answer.read())["data"]["result"])


def test_prometheus_scrapes_the_daemon(tmp_path: Path) -> None:
    binary = shutil.which("prometheus")
    if binary is None:
        if os.environ.get("CI"):
            pytest.fail("prometheus is missing in CI (.ci/run installs Debian's package)")
        pytest.skip("prometheus is not installed (apt-get install prometheus)")
    daemon, _, _ = make(tmp_path, ManualClock(time.time()), jobs=[])
    daemon.tick()
    server = DaemonServer(daemon, "127.0.0.1", 0, lambda: None).start()
    port = free_port()
    config = tmp_path / "prometheus.yml"
    config.write_text("global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
                      "scrape_configs:\n  - job_name: greengpu-daemon\n    static_configs:\n"
                      f"      - targets: ['127.0.0.1:{server.address[1]}']\n")
    prometheus = subprocess.Popen([binary, f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                                   f"--web.listen-address=127.0.0.1:{port}"],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        ticks: list[dict[str, object]] = []
        while time.monotonic() < deadline:
            try:
                ticks = query(base, 'greengpu_daemon_ticks_total{job="greengpu-daemon",outcome="ok"}')
                if ticks:
                    break
            except OSError:
                pass  # Prometheus still starting
            time.sleep(0.5)
        assert ticks, "Prometheus never stored the daemon's tick counter"
        assert float(ticks[0]["value"][1]) >= 1.0  # type: ignore[index]
        up = query(base, 'up{job="greengpu-daemon"}')
        assert up and up[0]["value"][1] == "1"  # type: ignore[index]
        nodes = query(base, "greengpu_daemon_nodes")
        assert {n["metric"]["state"] for n in nodes} >= {"awake", "asleep"}  # type: ignore[index]
    finally:
        prometheus.terminate()
        prometheus.wait(timeout=30)
        server.stop()
