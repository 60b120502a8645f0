"""The daemon's HTTP server under 200 concurrent scrapes of /metrics with 200 idle and half-sent connections
open (issue 38: a backlog of 5 and a thread per connection gave 20 client timeouts at 30 s). On demand:
`python3 -m pytest tests/benchmarks/test_bench_daemon_http.py -s`; docs/DAEMON.md quotes its figures."""

from __future__ import annotations

from pathlib import Path

import pytest
from http_load import drive, served_daemon

from greengpu.control.daemon.http_api import HTTP_WORKERS


@pytest.mark.benchmark
def test_bench_200_scrapes_beside_200_idle_connections(tmp_path: Path) -> None:
    server = served_daemon(tmp_path)
    try:
        load = drive(server, scrapes=200, idle=200)
    finally:
        server.stop()
    print(f"\n{load.scrapes} concurrent GET /metrics beside {load.idle} idle connections (half with half a "
          f"request sent): {load.timeouts} timeouts, {load.errors} errors, slowest {load.slowest_s:.2f} s, all "
          f"done in {load.wall_s:.2f} s; server threads {load.server_threads} (1 dispatcher + {HTTP_WORKERS} "
          f"workers), threads gained for the idle ones {load.idle_threads}, "
          f"RSS +{load.rss_growth_mib:.1f} MiB (clients included)")
    assert load.timeouts == 0 and load.errors == 0
    assert load.server_threads <= 1 + HTTP_WORKERS and load.idle_threads <= HTTP_WORKERS
