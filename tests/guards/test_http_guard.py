"""HTTP guard, a reduced tests/benchmarks/test_bench_daemon_http.py: 40 concurrent scrapes of /metrics beside
40 idle and half-sent connections, with a 10 s client timeout, on loopback. With a thread per connection and
a backlog of 5 (before issue 38) the idle ones held threads and scrapes waited; now none times out and the
server keeps to its fixed threads."""

from __future__ import annotations

from pathlib import Path

from http_load import drive, served_daemon

from greengpu.control.daemon.http_api import HTTP_WORKERS


def test_scrapes_beside_idle_connections_never_time_out_and_threads_stay_bounded(tmp_path: Path) -> None:
    server = served_daemon(tmp_path, nodes=4)
    try:
        load = drive(server, scrapes=40, idle=40, client_timeout_s=10.0)
    finally:
        server.stop()
    assert load.timeouts == 0 and load.errors == 0, load
    assert load.server_threads <= 1 + HTTP_WORKERS and load.idle_threads <= HTTP_WORKERS, load
    assert load.slowest_s < 10.0, load
