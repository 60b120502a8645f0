"""Daemon benchmark: the time and memory of the control tick at 1,000 nodes / 8,000 GPUs with 10,000
pending jobs on the fake backend, over an hour of ticks (one a minute).

Each tick is observe (the fake cluster's jobs and nodes, and the GPUs it must read again through the NVML
adapter: those something changed), decide (`control_tick`) and act (journal, audit and carrying out).
The first tick places the backlog (thousands of jobs started at once) and is printed on its own; the
percentiles are over every tick, the first included. The metering job (every GPU's energy counter read
and charged to tenants, once a minute) runs between ticks and is timed apart. Times are wall-clock and
CPU (process) time: on a shared machine the second is the tick's own work.

Run on demand:  python3 -m pytest tests/benchmarks/test_bench_daemon.py -s
Targets (issue 17): tick p95 <= 100 ms, memory <= 200 MB.
"""

from __future__ import annotations

import math
import resource
import statistics
import time
from pathlib import Path

from inventories import submitted_jobs, write_gpu_site
from manual_clock import ManualClock

from greengpu.config.inventory import load_cluster
from greengpu.config.policy import load_policy
from greengpu.control.daemon.audit import Alerts, AuditLog
from greengpu.control.daemon.daemon_meter import DaemonMeter
from greengpu.control.daemon.service import Daemon, freeze_long_lived_heap
from greengpu.control.daemon.store import DaemonStore
from greengpu.control.fakes.fake_cluster import FakeCluster

NODES = 1000
PENDING = 10_000
TICKS = 60
T0 = 1_700_000_000.0


def percentile(values: list[float], fraction: float) -> float:
    """The nearest-rank percentile: the smallest value at or above `fraction` of the values."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(fraction * len(ordered)) - 1)]


def test_tick_time_and_memory_at_1000_nodes_and_10000_pending_jobs(tmp_path: Path) -> None:
    cluster = load_cluster(write_gpu_site(tmp_path / "cluster.yaml", NODES, quota_gpus=400))
    jobs = submitted_jobs(PENDING, T0)
    started = time.perf_counter()
    body = FakeCluster(cluster, jobs, tmp_path, start_s=T0)
    build_s = time.perf_counter() - started
    clock = ManualClock(T0 + 60)
    store = DaemonStore(tmp_path)
    audit = AuditLog(tmp_path / "audit.jsonl")
    ledger = tmp_path / "ledger.db"
    meter = DaemonMeter.open(cluster, ledger, None, "default", "fake")
    daemon = Daemon(body, load_policy("default"), store, audit, Alerts(audit), clock=clock, meter=meter)
    freeze_long_lived_heap()  # as `greengpu daemon` does once it has started
    walls, cpus, meters, actions = [], [], [], 0
    for _ in range(TICKS):
        clock.now_s += 60
        began, began_cpu = time.perf_counter(), time.process_time()
        report = daemon.tick()
        walls.append(time.perf_counter() - began)
        cpus.append(time.process_time() - began_cpu)
        actions += len(report.actions)
        assert report.ok
        clock.now_s += 1
        began = time.perf_counter()
        daemon.meter_energy()
        meters.append(time.perf_counter() - began)
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    steady = walls[1:]
    print(f"\n{NODES} nodes / {NODES * 8} GPUs, {PENDING} jobs submitted at once, {TICKS} ticks a minute apart "
          f"(fake cluster built in {build_s:.1f} s); {actions} actions carried out")
    print(f"tick wall: median {statistics.median(walls) * 1000:.0f} ms, p95 {percentile(walls, 0.95) * 1000:.0f} ms, "
          f"max after the first {max(steady) * 1000:.0f} ms; first tick {walls[0] * 1000:.0f} ms (places the backlog)")
    print(f"tick CPU:  median {statistics.median(cpus) * 1000:.0f} ms, p95 {percentile(cpus, 0.95) * 1000:.0f} ms")
    print(f"metering job (8000 energy counters read, charged to tenants in the ledger): median "
          f"{statistics.median(meters) * 1000:.0f} ms, p95 {percentile(meters, 0.95) * 1000:.0f} ms")
    print(f"peak memory of the process: {peak_mb:.0f} MB")
    print(f"jobs running {len(body.running)}, pending {len(body.pending)}, finished {len(body.finished)}; "
          f"journal entries {len(store.entries(limit=1_000_000))}")
    assert store.open_entries() == []
    assert meter.measured_nodes  # the counters were read and charged
