"""Sweep benchmark: the wall time of one grid of replays (3 policies x 4 seeds of a 30-day, 1,500-job trace on a
32-GPU cluster) in this process, on a local pool of 2 and of every core, and on a local Ray cluster of every
core when the ray extra is installed; every run's figures identical to the serial one's.

Run on demand:  python3 -m pytest tests/benchmarks/test_bench_sweep.py -s
Figures in docs/FLEET.md.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import time
from pathlib import Path

import pytest
from fleet_inputs import run_cli, write_cluster, write_trace

from greengpu.sim.sweep import timed_free

pytestmark = pytest.mark.benchmark
FIRST = dt.datetime(2024, 3, 1, tzinfo=dt.UTC)


def _grid(folder: Path) -> list[str]:
    trace = write_trace(folder / "bench.trace.csv", FIRST, jobs=1500, seed=11, spread_s=30 * 86_400)
    return ["--trace", str(trace), "--cluster", str(write_cluster(folder, "lab", nodes=16)), "--policy", "always-on",
            "--policy", "default", "--policy", "idle-timeout", "--seed", "1", "--seed", "2", "--seed", "3",
            "--seed", "4"]


def _timed(args: list[str]) -> tuple[float, list[dict]]:
    started = time.perf_counter()
    code, out, err = run_cli("-q", "sweep", *args, "--json")
    wall_s = time.perf_counter() - started
    assert code == 0, err
    return wall_s, [timed_free(r) for r in json.loads(out)["results"]]


def test_sweep_wall_time_by_workers(tmp_path: Path) -> None:
    grid = _grid(tmp_path)
    cores = os.cpu_count() or 1
    serial_s, serial = _timed([*grid, "--workers", "1", "--store", str(tmp_path / "w1.db")])
    lines = [f"sweep of {len(serial)} replays, {cores} cores: 1 worker {serial_s:.2f} s"]
    for workers in dict.fromkeys((2, cores)):
        wall_s, results = _timed([*grid, "--workers", str(workers), "--store", str(tmp_path / f"w{workers}.db")])
        assert results == serial
        lines.append(f"  {workers} workers {wall_s:.2f} s (x{serial_s / wall_s:.2f})")
    rerun_s, results = _timed([*grid, "--workers", str(cores), "--store", str(tmp_path / f"w{cores}.db")])
    assert results == serial
    lines.append(f"  rerun from the store {rerun_s:.2f} s")
    try:
        from ray_head import ray_head

        with ray_head(cpus=cores) as address:
            wall_s, results = _timed([*grid, "--ray", address, "--store", str(tmp_path / "ray.db")])
            assert results == serial
            lines.append(f"  Ray cluster of {cores} CPUs {wall_s:.2f} s (x{serial_s / wall_s:.2f}, workers start "
                         "included)")
    except pytest.skip.Exception as skipped:
        lines.append(f"  Ray: not measured ({skipped})")
    print("\n" + "\n".join(lines))
