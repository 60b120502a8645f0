"""Scheduling benchmark: decisions per second, cycle-time percentiles, and a naive baseline side by side.

Run on demand:  python3 -m pytest tests/benchmarks/test_bench_sched.py -s
Targets (issue 3): >= 5,000 placement decisions/s on 2,000 nodes x 8 GPUs with 10,000 pending jobs;
p99 cycle <= 1 s with 1,000 tenants and 50,000 pending jobs; >= 10x a naive priority-sorted greedy
best-fit that rescans every node for every job.
"""

from __future__ import annotations

import random
import statistics
import time
from dataclasses import replace

from schedkit import job, make_cluster, node_type
from transitions import apply_scheduler_actions

from greengpu.model import GPU_UNITS, ClusterSnapshot, GpuSlot, PendingJob, PlaceJob, RunningJob, Tenant
from greengpu.policy import SchedulerPolicy
from greengpu.sched.core import schedule_cycle
from greengpu.sched.invariants import check_invariants

SIZES = [1, 1, 1, 1, 2, 2, 4, 4, 8, 8, 16, 32, 64]


def _workload(rng: random.Random, count: int, tenants: int, start: int = 0) -> list[PendingJob]:
    return [
        PendingJob(job(f"p{start + i}", gpus=rng.choice(SIZES), tenant=f"t{rng.randrange(tenants)}",
                       priority=rng.choice([0, 0, 0, 1, 2]), duration_s=rng.uniform(600, 36_000),
                       submit_time_s=-rng.uniform(0, 7200)))
        for i in range(count)
    ]


def _half_full(cluster, rng: random.Random, tenants: int) -> tuple[RunningJob, ...]:  # noqa: ANN001
    running = []
    for index, node in enumerate(cluster.nodes):
        if index % 2:
            continue
        used = rng.randint(2, 8)
        running.append(RunningJob(job=job(f"r{index}", gpus=used, tenant=f"t{rng.randrange(tenants)}",
                                          duration_s=rng.uniform(600, 36_000)),
                                  slots=tuple(GpuSlot(node.name, g) for g in range(used)),
                                  start_time_s=-3600, expected_end_s=rng.uniform(60, 36_000)))
    return tuple(running)


def naive_greedy(snapshot: ClusterSnapshot) -> list[PlaceJob]:
    """The baseline: priority-sorted, and for each job a full rescan of every node for the best fit."""
    cluster = snapshot.cluster
    free = {n.name: [GPU_UNITS] * cluster.node_types[n.type_name].gpus for n in cluster.nodes}
    for r in snapshot.running:
        for s in r.slots:
            free[s.node][s.gpu_index] -= s.units
    names = [n.name for n in cluster.nodes]
    order = sorted(snapshot.pending, key=lambda p: (-p.job.priority, p.job.submit_time_s, p.job.job_id))
    placed: list[PlaceJob] = []
    for item in order:
        need = item.job.whole_gpus
        if need <= 8:
            best = None
            for name in names:  # the rescan the indexed core avoids
                count = sum(1 for f in free[name] if f == GPU_UNITS)
                if count >= need and (best is None or count < best[0]):
                    best = (count, name)
            if best is not None:
                gpus = [g for g, f in enumerate(free[best[1]]) if f == GPU_UNITS][:need]
                for g in gpus:
                    free[best[1]][g] = 0
                placed.append(PlaceJob(item.job.job_id, tuple(GpuSlot(best[1], g) for g in gpus)))
        else:
            whole = [name for name in names if all(f == GPU_UNITS for f in free[name])]
            if len(whole) * 8 >= need:
                chosen = whole[: need // 8]
                for name in chosen:
                    free[name] = [0] * 8
                placed.append(PlaceJob(item.job.job_id, tuple(GpuSlot(n, g) for n in chosen for g in range(8))))
    return placed


def test_decisions_per_second_2000_nodes_10000_pending() -> None:
    rng = random.Random(1)
    tenants = 100
    cluster = make_cluster([(2000, node_type(8), f"rack{r}") for r in range(1)],
                           [Tenant(f"t{i}", quota_gpus=160, weight=1 + i % 3) for i in range(tenants)])
    cluster = replace(cluster, nodes=tuple(replace(n, domain=f"rack{i // 40}") for i, n in enumerate(cluster.nodes)))
    snapshot = ClusterSnapshot(time_s=0.0, cluster=cluster, running=_half_full(cluster, rng, tenants),
                               pending=tuple(_workload(rng, 10_000, tenants)))
    policy = SchedulerPolicy()
    timings = []
    for _ in range(3):
        start = time.perf_counter()
        result = schedule_cycle(snapshot, policy)
        timings.append(time.perf_counter() - start)
    core_s = min(timings)
    placed = sum(1 for a in result.actions if isinstance(a, PlaceJob))
    after = apply_scheduler_actions(snapshot, result.actions)
    assert check_invariants(after) == []
    naive_timings = []
    for _ in range(2):
        start = time.perf_counter()
        naive_placed = naive_greedy(snapshot)
        naive_timings.append(time.perf_counter() - start)
    naive_s = min(naive_timings)
    decisions_per_s = len(snapshot.pending) / core_s
    naive_per_s = len(snapshot.pending) / naive_s
    print("\n[sched] 2,000 nodes x 8 GPUs, 10,000 pending, half the nodes busy:")
    print(f"[sched]   core : one cycle {core_s * 1000:.0f} ms, {placed} placed, "
          f"{decisions_per_s:,.0f} decisions/s, {placed / core_s:,.0f} placements/s")
    print(f"[sched]   naive: one pass {naive_s * 1000:.0f} ms, {len(naive_placed)} placed, "
          f"{naive_per_s:,.0f} decisions/s")
    print(f"[sched]   speed-up over naive rescanning greedy: {naive_s / core_s:.1f}x")
    assert decisions_per_s >= 5_000
    assert naive_s / core_s >= 10


def test_cycle_percentiles_1000_tenants_50000_pending() -> None:
    rng = random.Random(2)
    tenants = 1000
    cluster = make_cluster([(2000, node_type(8), "hall")],
                           [Tenant(f"t{i}", quota_gpus=16, weight=1 + i % 4) for i in range(tenants)])
    snapshot = ClusterSnapshot(time_s=0.0, cluster=cluster, running=_half_full(cluster, rng, tenants),
                               pending=tuple(_workload(rng, 50_000, tenants)))
    policy = SchedulerPolicy()
    cycle_s: list[float] = []
    counter = 50_000
    for _ in range(20):
        start = time.perf_counter()
        result = schedule_cycle(snapshot, policy)
        cycle_s.append(time.perf_counter() - start)
        snapshot = apply_scheduler_actions(snapshot, result.actions)
        # Churn: a tenth of the running jobs finish, as many new jobs arrive, the clock moves on.
        running = list(snapshot.running)
        rng.shuffle(running)
        keep = running[len(running) // 10 :]
        new = _workload(rng, len(running) - len(keep), tenants, start=counter)
        counter += len(new)
        snapshot = replace(snapshot, time_s=snapshot.time_s + 60, running=tuple(keep),
                           pending=(*snapshot.pending, *new))
    assert check_invariants(snapshot) == []
    ordered = sorted(cycle_s)
    p50 = statistics.median(ordered)
    p99 = ordered[min(len(ordered) - 1, int(round(0.99 * (len(ordered) - 1))))]
    print("\n[sched] 1,000 tenants, ~50,000 pending, 2,000 nodes x 8 GPUs, 20 cycles with churn:")
    print(f"[sched]   cycle p50 {p50 * 1000:.0f} ms, p99 {p99 * 1000:.0f} ms, max {max(cycle_s) * 1000:.0f} ms")
    assert p99 <= 1.0
