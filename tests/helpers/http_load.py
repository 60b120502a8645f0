"""Load on the daemon's HTTP server over loopback: concurrent scrapes of /metrics while idle and half-sent
connections sit open (issue 38), for the benchmark and its guard. Real sockets, real threads."""

from __future__ import annotations

import socket
import threading
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from inventories import SITE

from greengpu.config.inventory import load_cluster
from greengpu.config.policy import load_policy
from greengpu.control.daemon.audit import Alerts, AuditLog
from greengpu.control.daemon.http_api import DaemonServer
from greengpu.control.daemon.service import Daemon
from greengpu.control.daemon.store import DaemonStore
from greengpu.control.fakes.fake_cluster import FakeCluster

NODE = ("{gpus: 8, gpu_model: A100, gpu_idle_w: 52, gpu_max_w: 400, gpu_min_limit_w: 100, host_idle_w: 300, "
        "host_sleep_w: 8, boot_s: 180, gpu_max_clock_mhz: 1410}")


@dataclass(frozen=True)
class Load:
    scrapes: int
    idle: int
    timeouts: int
    errors: int
    slowest_s: float
    wall_s: float
    server_threads: int
    """Threads named for the server while the scrapes ran."""
    idle_threads: int
    """Threads the process gained while only the idle connections were open (a thread per connection: one each)."""
    rss_growth_mib: float


def served_daemon(root: Path, nodes: int = 16) -> DaemonServer:
    """A daemon on the fake cluster after one tick, served on a free loopback port."""
    path = root / "cluster.yaml"
    path.write_text(SITE + f"node_types:\n  g8: {NODE}\nnodes:\n  - {{name: \"n[1-{nodes}]\", type: g8}}\n"
                    "tenants:\n  a: {quota_gpus: 64}\n")
    state = root / "state"
    state.mkdir(exist_ok=True)
    audit = AuditLog(state / "audit.jsonl")
    daemon = Daemon(FakeCluster(load_cluster(path), [], state, start_s=time.time()), load_policy("default"),
                    DaemonStore(state), audit, Alerts(audit))
    daemon.tick()
    return DaemonServer(daemon, "127.0.0.1", 0, lambda: None).start()


def _rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def drive(server: DaemonServer, scrapes: int, idle: int, client_timeout_s: float = 30.0) -> Load:
    """`idle` connections opened first (half of them with half a request sent), then `scrapes` concurrent
    GET /metrics; counts client timeouts and the server's threads while they run."""
    url = "http://{}:{}/metrics".format(*server.address)
    rss_before = _rss_mib()
    threads_before = threading.active_count()
    held = [socket.create_connection(server.address, timeout=client_timeout_s) for _ in range(idle)]
    for sock in held[: idle // 2]:
        sock.sendall(b"GET /metrics HTTP/1.1\r\nHost: greengpu\r\n")
    time.sleep(0.3)
    idle_threads = threading.active_count() - threads_before
    results: list[tuple[bool, bool, float]] = []
    lock = threading.Lock()
    go = threading.Event()

    def scrape() -> None:
        go.wait()
        started = time.monotonic()
        timed_out = failed = False
        try:
            with urllib.request.urlopen(url, timeout=client_timeout_s) as answer:
                failed = answer.status != 200 or b"greengpu_daemon_ticks_total" not in answer.read()
        except TimeoutError:
            timed_out = True
        except OSError as error:
            timed_out = isinstance(getattr(error, "reason", None), TimeoutError)
            failed = not timed_out
        with lock:
            results.append((timed_out, failed, time.monotonic() - started))

    clients = [threading.Thread(target=scrape) for _ in range(scrapes)]
    for client in clients:
        client.start()
    started = time.monotonic()
    go.set()
    time.sleep(0.2)
    server_threads = sum(1 for t in threading.enumerate() if t.name.startswith("greengpu-daemon-http"))
    for client in clients:
        client.join()
    wall_s = time.monotonic() - started
    rss_growth = _rss_mib() - rss_before
    for sock in held:
        sock.close()
    return Load(scrapes, idle, sum(r[0] for r in results), sum(r[1] for r in results),
                max((r[2] for r in results), default=0.0), wall_s, server_threads, idle_threads, rss_growth)
