"""Crash safety: the daemon on the fake backend is killed with SIGKILL at random points after its first tick
(mid-tick, while it caps, suspends and wakes), restarted, killed again. After every kill, no GPU holds a limit
that no journal entry explains; after every restart, what the dead daemon left open is reconciled; and once the
daemon has run undisturbed again, no node stays asleep while a job waits and every action in the journal is
complete or reconciled. GREENGPU_CRASH_KILLS changes the number of kills (50; with far fewer the run may not
reach a wake, which the last checks expect)."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

from inventories import SITE

from greengpu.backends.fake_nvml import FakeNvml
from greengpu.control.daemon.store import DaemonStore

KILLS = int(os.environ.get("GREENGPU_CRASH_KILLS", "50"))
NODE_TYPE = ("{gpus: 2, gpu_model: A100, gpu_idle_w: 52, gpu_max_w: 400, gpu_min_limit_w: 100, host_idle_w: 300, "
             "host_sleep_w: 8, boot_s: 2, gpu_max_clock_mhz: 1410}")


def write_inputs(root: Path) -> tuple[Path, Path, Path]:
    cluster = root / "cluster.yaml"
    cluster.write_text(SITE + f"node_types:\n  g2: {NODE_TYPE}\nnodes:\n  - {{name: \"n[1-4]\", type: g2}}\n"
                       "tenants:\n  a: {quota_gpus: 8}\n  b: {quota_gpus: 8}\n")
    shipped = (Path(__file__).parents[2] / "policies" / "default.yaml").read_text()
    policy = root / "policy.yaml"
    fast = {"idle_timeout_s: 300": "idle_timeout_s: 2", "min_awake_s: 300": "min_awake_s: 0",
            "min_asleep_s: 600": "min_asleep_s: 0", "warm_reserve_busy_fraction: 0.35": "warm_reserve_busy_fraction: 0"}
    for old, new in fast.items():
        assert old in shipped, old
        shipped = shipped.replace(old, new)
    policy.write_text(shipped)
    rng = random.Random(7)
    rows, at = ["job_id,submit_time,duration_s,gpus,tenant,class"], 0.0
    for index in range(400):  # short jobs in bursts, with idle gaps in which nodes sleep
        at += rng.choice((0.5, 1.0, 2.0, 6.0))
        rows.append(f"j{index:04d},{at:.1f},{rng.randint(2, 6)},{rng.choice((1, 2))},{rng.choice('ab')},"
                    f"{rng.choice(('training', 'batch', 'inference'))}")
    trace = root / "trace.csv"
    trace.write_text("\n".join(rows) + "\n")
    return cluster, policy, trace


def gpus_without_explanation(state: Path) -> list[str]:
    """GPUs whose limit is not their default and that no journal entry (open or done) set to that limit."""
    journal = DaemonStore(state).entries(limit=100_000)
    explained = {(e.node, e.gpu, e.detail.get("limit_w")) for e in journal if e.kind == "set_power_limit"}
    problems = []
    for path in sorted(state.glob("nvml-*.json")):
        node = path.stem.removeprefix("nvml-")
        for index, gpu in enumerate(FakeNvml.stored_gpus(path)):  # the file and its write log
            if gpu.limit_w != gpu.default_limit_w and (node, index, gpu.limit_w) not in explained:
                problems.append(f"{node} GPU {index} at {gpu.limit_w} W")
    return problems


def test_sigkill_at_random_points_leaves_nothing_unexplained_or_stuck(tmp_path: Path) -> None:
    cluster, policy, trace = write_inputs(tmp_path)
    state = tmp_path / "state"
    argv = [sys.executable, "-m", "greengpu.cli", "-q", "daemon", "--backend", "fake", "--cluster", str(cluster),
            "--policy", str(policy), "--trace", str(trace), "--state", str(state), "--interval-s", "1",
            "--listen", "127.0.0.1:0"]
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[2])}
    rng = random.Random(1)
    reconciled_any = False
    for _ in range(KILLS):
        process = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        # Past start-up and into the ticks, however slow the machine: the kill comes a random moment after the
        # daemon's first tick has written the fake cluster, not at a wall-clock guess of when that happens.
        wait_for_tick(process, state)
        time.sleep(rng.uniform(0.1, 2.0))
        process.send_signal(signal.SIGKILL)
        _, err = process.communicate(timeout=30)
        assert "Traceback" not in err, err
        assert gpus_without_explanation(state) == []
        reconciled_any = reconciled_any or "reconciled" in err
    # Run undisturbed for a while: the restart reconciles, then the ticks settle the cluster.
    calm = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    started_s = time.monotonic()
    wait_for_tick(calm, state)
    time.sleep(8)  # at least eight ticks' worth; then until settled, or the verdict below on a loaded machine
    while time.monotonic() - started_s < CALM_LIMIT_S and stuck_waits(state, trace):
        time.sleep(1)
    calm.send_signal(signal.SIGTERM)
    _, err = calm.communicate(timeout=30)
    assert calm.returncode == 0, err
    store = DaemonStore(state)
    entries = store.entries(limit=100_000)
    assert store.open_entries() == []  # every action complete, failed with a reason, or reconciled
    assert {e.kind for e in entries} >= {"sleep", "wake", "place", "set_power_limit"}  # the kills hit real work
    assert any(e.state == "reconciled" for e in entries) or not reconciled_any
    assert stuck_waits(state, trace) == []
    assert gpus_without_explanation(state) == []


CALM_LIMIT_S = 90.0
"""How long the undisturbed run may take to settle: far more than the few ticks it needs on an idle machine."""


def wait_for_tick(process: subprocess.Popen[str], state: Path, limit_s: float = 60.0) -> None:
    """Until the daemon started as `process` has written the fake cluster once (its first tick ran)."""
    cluster_file = state / "fake-cluster.json"
    before_ns = cluster_file.stat().st_mtime_ns if cluster_file.exists() else 0
    deadline_s = time.monotonic() + limit_s
    while time.monotonic() < deadline_s:
        if cluster_file.exists() and cluster_file.stat().st_mtime_ns > before_ns:
            return
        assert process.poll() is None, process.communicate(timeout=30)[1]
        time.sleep(0.05)
    raise AssertionError(f"the daemon wrote no tick within {limit_s:.0f} s")


def stuck_waits(state: Path, trace: Path) -> list[str]:
    """Pending jobs that have waited more than 6 s while a node sleeps (none once the daemon has settled).

    A job that arrived in the last ticks may still be waiting for a node to boot; none waits longer."""
    fake = json.loads((state / "fake-cluster.json").read_text())
    if not any(n["power"] == "asleep" for n in fake["nodes"]):
        return []
    offsets = {row.split(",")[0]: float(row.split(",")[1]) for row in trace.read_text().splitlines()[1:]}
    first = min(offsets.values())
    ended_s = (state / "fake-cluster.json").stat().st_mtime
    waited = {job_id: ended_s - (fake["origin_s"] + offsets[job_id] - first) for job_id in fake["pending"]}
    return sorted(f"{job_id} waited {w:.1f} s" for job_id, w in waited.items() if w > 6.0)
