"""`greengpu sweep`: a grid of replays on a local process pool and on a real Ray cluster (a head started by the
test on loopback, tests/helpers/ray_head.py) gives, replay for replay, the serial run's figures bit for bit (the
wall time aside), and a rerun skips what the result store holds."""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from fleet_inputs import run_cli, write_cluster, write_trace
from ray_head import ray_head

from greengpu.sim.sweep import timed_free

REPO = Path(__file__).resolve().parents[2]
FIRST = dt.datetime(2024, 3, 27, tzinfo=dt.UTC)  # the trace runs into April: months x policies


def inputs(folder: Path) -> list[str]:
    trace = write_trace(folder / "lab.trace.csv", FIRST, jobs=50, seed=5, spread_s=10 * 86_400)
    return ["--trace", str(trace), "--cluster", str(write_cluster(folder, "lab"))]


def sweep(*args: str) -> dict:
    code, out, err = run_cli("sweep", *args, "--json")
    assert code == 0, err
    return json.loads(out)  # type: ignore[no-any-return]


def sweep_process(*args: str) -> dict:
    """`greengpu sweep` in a process of its own: a Ray driver's threads stay out of the test process."""
    done = subprocess.run([sys.executable, "-m", "greengpu.cli", "sweep", *args, "--json"], capture_output=True,
                          text=True, timeout=600, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    return json.loads(done.stdout)  # type: ignore[no-any-return]


def same(one: dict, other: dict) -> None:
    assert [timed_free(r) for r in one["results"]] == [timed_free(r) for r in other["results"]]


def test_a_process_pool_sweep_is_the_serial_one_and_a_rerun_skips_what_is_stored(tmp_path: Path) -> None:
    grid = [*inputs(tmp_path), "--policy", "always-on", "--policy", "default", "--seed", "1", "--seed", "2",
            "--month", "2024-03", "--month", "2024-04"]
    serial = sweep(*grid, "--workers", "1", "--store", str(tmp_path / "serial.db"))
    pooled = sweep(*grid, "--workers", "2", "--store", str(tmp_path / "pool.db"))
    assert serial["replays"] == pooled["replays"] == pooled["ran"] == 8
    same(serial, pooled)
    assert [(r["policy"], r["month"], r["seed"]) for r in pooled["results"]][:3] == [
        ("always-on", "2024-03", 1), ("always-on", "2024-03", 2), ("always-on", "2024-04", 1)]
    assert all(r["jobs"] > 0 and r["invariant_violations"] == 0 for r in pooled["results"])
    # The same replay through greengpu simulate (the whole trace, one seed) gives the same figures.
    whole = sweep(*inputs(tmp_path), "--policy", "default", "--seed", "3", "--store", str(tmp_path / "w.db"))
    code, out, err = run_cli("simulate", *inputs(tmp_path), "--policy", "default", "--seed", "3", "--json")
    assert code == 0, err
    simulated = json.loads(out)["results"][0]
    simulated.pop("skipped_rows")
    assert timed_free({**whole["results"][0], "month": None}) == {**timed_free(simulated), "month": None}
    # A rerun with one more seed runs only the four new replays.
    again = sweep(*grid, "--seed", "4", "--workers", "2", "--store", str(tmp_path / "pool.db"))
    assert (again["replays"], again["ran"], again["from_store"]) == (12, 4, 8)
    same({"results": [r for r in again["results"] if r["seed"] != 4]}, serial)


def test_bad_sweep_input_is_one_line(tmp_path: Path) -> None:
    grid = [*inputs(tmp_path), "--policy", "default"]
    foreign = tmp_path / "app.db"
    with contextlib.closing(sqlite3.connect(foreign)) as db:
        db.execute("CREATE TABLE notes (body TEXT)")
        db.commit()
    for args, words in [((*grid, "--store", str(foreign)), "is not a sweep result store"),
                        ((*grid, "--store", str(tmp_path)), "cannot keep results"),
                        ((*grid, "--month", "٢٠٢٤-03", "--store", str(tmp_path / "s.db")), "--month"),
                        ((*grid, "--policy", str(tmp_path / "none.yaml"), "--store", str(tmp_path / "s.db")),
                         "none.yaml"),
                        ((*grid, "--ray", "127.0.0.1:1", "--workers", "2", "--store", str(tmp_path / "s.db")),
                         "give one"),
                        # Ray's own client would retry a dead address for minutes: it is probed first.
                        ((*grid, "--ray", "127.0.0.1:1", "--store", str(tmp_path / "s.db")), "nothing answers"),
                        ((*grid, "--ray", "head", "--store", str(tmp_path / "s.db")), "is not HOST:PORT")]:
        code, _, err = run_cli("sweep", *args)
        assert code == 2 and err.count("\n") == 1 and words in err and "Traceback" not in err, err
    assert foreign.read_bytes().startswith(b"SQLite format 3")


@pytest.fixture(scope="module")
def ray_cluster() -> str:
    with ray_head(cpus=2) as address:
        yield address  # type: ignore[misc]


def test_sixteen_replays_on_a_ray_cluster_are_the_serial_ones(ray_cluster: str, tmp_path: Path) -> None:
    grid = [*inputs(tmp_path), "--policy", "always-on", "--policy", "default", "--month", "2024-03", "--month",
            "2024-04", "--seed", "1", "--seed", "2", "--seed", "3", "--seed", "4"]
    serial = sweep(*grid, "--workers", "1", "--store", str(tmp_path / "serial.db"))
    on_ray = sweep_process(*grid, "--ray", ray_cluster, "--store", str(tmp_path / "ray.db"))
    assert on_ray["replays"] == on_ray["ran"] == 16
    same(serial, on_ray)
    rerun = sweep_process(*grid, "--ray", ray_cluster, "--store", str(tmp_path / "ray.db"))
    assert (rerun["ran"], rerun["from_store"]) == (0, 16)
    same(serial, rerun)
