"""Crash safety: the daemon on the fake backend is killed with SIGKILL at random points (mid-tick, while it
caps, suspends and wakes), restarted, killed again. After every kill, no GPU holds a limit that no
journal entry explains; after every restart, what the dead daemon left open is reconciled; and once
the daemon has run undisturbed again, no node stays asleep while a job waits and every action in the
journal is complete or reconciled. GREENGPU_CRASH_KILLS changes the number of kills (50; with far fewer
the run may not reach a wake, which the last checks expect)."""

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
        time.sleep(rng.uniform(0.6, 2.5))  # past start-up (about half a second), into the ticks
        process.send_signal(signal.SIGKILL)
        _, err = process.communicate(timeout=30)
        assert "Traceback" not in err, err
        assert gpus_without_explanation(state) == []
        reconciled_any = reconciled_any or "reconciled" in err
    # Run undisturbed for a while: the restart reconciles, then the ticks settle the cluster.
    calm = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    time.sleep(8)
    calm.send_signal(signal.SIGTERM)
    _, err = calm.communicate(timeout=30)
    assert calm.returncode == 0, err
    store = DaemonStore(state)
    entries = store.entries(limit=100_000)
    assert store.open_entries() == []  # every action complete, failed with a reason, or reconciled
    assert {e.kind for e in entries} >= {"sleep", "wake", "place", "set_power_limit"}  # the kills hit real work
    assert any(e.state == "reconciled" for e in entries) or not reconciled_any
    fake = json.loads((state / "fake-cluster.json").read_text())
    asleep = [n["name"] for n in fake["nodes"] if n["power"] == "asleep"]
    offsets = {row.split(",")[0]: float(row.split(",")[1]) for row in trace.read_text().splitlines()[1:]}
    first = min(offsets.values())
    ended_s = (state / "fake-cluster.json").stat().st_mtime
    # A job that arrived in the last ticks may still be waiting for a node to boot; none waits longer.
    waited = {job_id: ended_s - (fake["origin_s"] + offsets[job_id] - first) for job_id in fake["pending"]}
    assert not (asleep and any(w > 6.0 for w in waited.values())), (asleep, waited)
    assert gpus_without_explanation(state) == []
