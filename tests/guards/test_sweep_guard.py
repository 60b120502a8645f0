"""Sweep guard: the reduced tests/benchmarks/test_bench_sweep.py. A local pool of two workers must not take more
than 1.5 times the serial run of the same grid measured a moment before (wall time: the pool's cost is forking
and shipping results, which CPU time would not show). Each sweep runs as a process of its own, as a user runs
it; the pair is measured a second time only when the first misses. Measured on two cores shared with other work
(load average 5 to 7.5): in process 0.48 to 1.24 of the serial time, as processes (interpreter start included)
1.00 to 1.11 (docs/FLEET.md)."""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from fleet_inputs import write_cluster, write_trace

from greengpu.sim.sweep import timed_free

MAX_RATIO = 1.5
REPO = Path(__file__).resolve().parents[2]


def _timed(args: list[str]) -> tuple[float, list[dict]]:
    """`greengpu sweep` as a user runs it, in a process of its own: the test process may hold other tests'
    threads, and then the pool starts its workers by forkserver, not fork (greengpu/sim/sweep_run.py)."""
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "greengpu.cli", "-q", "sweep", *args, "--json"],
                          capture_output=True, text=True, timeout=300, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.returncode == 0, done.stderr
    return time.perf_counter() - started, [timed_free(r) for r in json.loads(done.stdout)["results"]]


def test_a_process_pool_is_not_slower_than_the_serial_sweep(tmp_path: Path) -> None:
    trace = write_trace(tmp_path / "g.trace.csv", dt.datetime(2024, 3, 1, tzinfo=dt.UTC), jobs=400, seed=2,
                        spread_s=7 * 86_400)
    grid = ["--trace", str(trace), "--cluster", str(write_cluster(tmp_path, "lab", nodes=8)), "--policy",
            "default", "--policy", "always-on", "--seed", "1", "--seed", "2"]
    # Measured again, interleaved, only when the first pair misses: a burst of other work on a shared machine
    # slows one run, rarely both pairs. The best of each is compared.
    serial_runs, pool_runs = [], []
    for attempt in range(2):
        serial_s, serial = _timed([*grid, "--workers", "1", "--store", str(tmp_path / f"serial{attempt}.db")])
        pool_s, pooled = _timed([*grid, "--workers", "2", "--store", str(tmp_path / f"pool{attempt}.db")])
        assert pooled == serial
        serial_runs.append(serial_s)
        pool_runs.append(pool_s)
        if min(pool_runs) <= MAX_RATIO * min(serial_runs):
            break
    serial_s, pool_s = min(serial_runs), min(pool_runs)
    print(f"sweep guard: pool {pool_s:.2f} s, serial {serial_s:.2f} s, ratio {pool_s / serial_s:.2f}")
    assert pool_s <= MAX_RATIO * serial_s, f"pool {pool_runs} s against serial {serial_runs} s"
