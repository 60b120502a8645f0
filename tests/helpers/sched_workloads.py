"""Scheduler workloads of every shape users have, for benchmarks and property tests.

One `Shape` names a cluster and its queue: 1 to 2,000 tenants whose quotas run from a sliver to the whole
cluster (skewed: a few large tenants, many small ones), gangs up to 128 GPUs, fractional shares, 1k to 100k
pending jobs, running work from idle to full, and jobs that cannot be stopped. `snapshot(shape)` builds it
deterministically from the shape's seed; `churn` moves a snapshot on by one cycle's worth of ends and arrivals,
and `steady_cycle_cpu_s` times cycles of the scheduler benchmark's first workload that way.
Sizes are in GPUs and durations in seconds, as in the model.
"""

from __future__ import annotations

import gc
import random
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace

from schedkit import job, make_cluster, node_type
from transitions import apply_scheduler_actions

from greengpu.model import GPU_UNITS, Cluster, ClusterSnapshot, GpuSlot, PendingJob, PlaceJob, RunningJob, Tenant
from greengpu.policy import SchedulerPolicy
from greengpu.sched.core import SchedulerMemory, schedule_cycle
from greengpu.sched.invariants import check_invariants

GANG_SIZES = (1, 1, 1, 1, 2, 2, 4, 4, 8, 8, 16, 32, 64, 128)
"""Requests in GPUs, as often as they are drawn (cut at the shape's largest gang)."""


@dataclass(frozen=True)
class Shape:
    """A cluster and its queue (see the module docstring)."""

    tenants: int = 100
    pending: int = 10_000
    nodes: int = 2000
    gpus_per_node: int = 8
    busy_share: float = 0.5
    """Share of the nodes that run jobs when the snapshot is taken (each uses 2 to all of its GPUs)."""
    quota_share: float = 1.0
    """Nominal quota of all tenants together, over the cluster's GPUs."""
    quota_skew: float = 1.0
    """0: every tenant the same quota; 1: quotas fall as 1/rank (Zipf), so the first is many times the last."""
    max_gang: int = 64
    fractional_share: float = 0.0
    """Share of the pending jobs that ask for part of one GPU (0.25 or 0.5)."""
    fixed_share: float = 0.0
    """Share of the jobs that cannot be preempted."""
    seed: int = 1

    @property
    def gpus(self) -> int:
        return self.nodes * self.gpus_per_node


def tenants_of(shape: Shape) -> list[Tenant]:
    """The shape's tenants with their quotas (at least a tenth of a GPU each), weights 1 to 3."""
    raw = [1.0 / (rank + 1) ** shape.quota_skew for rank in range(shape.tenants)]
    scale = shape.quota_share * shape.gpus / sum(raw)
    return [Tenant(f"t{i}", quota_gpus=max(0.1, round(r * scale, 1)), weight=1 + i % 3) for i, r in enumerate(raw)]


def _tenant(rng: random.Random, shape: Shape) -> str:
    """Half the jobs come from a tenant drawn as the quotas fall (large tenants submit more), half from any."""
    if shape.quota_skew and rng.random() < 0.5:
        return f"t{min(shape.tenants - 1, int(rng.paretovariate(1.0)) - 1)}"
    return f"t{rng.randrange(shape.tenants)}"


def pending_jobs(rng: random.Random, shape: Shape, count: int, start: int = 0, now_s: float = 0.0) -> list[PendingJob]:
    sizes = [s for s in GANG_SIZES if s <= shape.max_gang]
    jobs = []
    for i in range(count):
        gpus: float = rng.choice(sizes)
        if rng.random() < shape.fractional_share:
            gpus = rng.choice([0.25, 0.5])
        jobs.append(PendingJob(job(f"p{start + i}", gpus=gpus, tenant=_tenant(rng, shape),
                                   priority=rng.choice([0, 0, 0, 1, 2]), duration_s=rng.uniform(600, 36_000),
                                   submit_time_s=now_s - rng.uniform(0, 7200),
                                   interruptible=rng.random() >= shape.fixed_share)))
    return jobs


def running_jobs(rng: random.Random, shape: Shape, cluster_nodes: list[str]) -> tuple[RunningJob, ...]:
    running = []
    for index, name in enumerate(cluster_nodes):
        if rng.random() >= shape.busy_share:
            continue
        used = rng.randint(min(2, shape.gpus_per_node), shape.gpus_per_node)
        running.append(RunningJob(job=job(f"r{index}", gpus=used, tenant=_tenant(rng, shape),
                                          duration_s=rng.uniform(600, 36_000),
                                          interruptible=rng.random() >= shape.fixed_share),
                                  slots=tuple(GpuSlot(name, g) for g in range(used)),
                                  start_time_s=-3600, expected_end_s=rng.uniform(60, 36_000)))
    return tuple(running)


def snapshot(shape: Shape) -> ClusterSnapshot:
    """The shape's cluster and queue at time 0 (racks of 40 nodes)."""
    rng = random.Random(shape.seed)
    groups = [(min(40, shape.nodes - start), node_type(shape.gpus_per_node), f"rack{start // 40}")
              for start in range(0, shape.nodes, 40)]
    cluster = make_cluster(groups, tenants_of(shape))
    names = [n.name for n in cluster.nodes]
    return ClusterSnapshot(time_s=0.0, cluster=cluster, running=running_jobs(rng, shape, names),
                           pending=tuple(pending_jobs(rng, shape, shape.pending)))


def offered_load(snap: ClusterSnapshot) -> float:
    """GPUs the queue asks for over the GPUs free now."""
    free = snap.cluster.total_gpus - sum(len(r.slots) for r in snap.running)
    return sum(p.job.gpus for p in snap.pending) / max(1, free)


class JobStream:
    """Jobs arriving numbered on from `start`: called with a count and the time, draws that many more."""

    def __init__(self, draw: Callable[[int, int, float], list[PendingJob]], start: int) -> None:
        self.draw = draw
        """(count, first number, now_s) -> jobs."""
        self.next = start

    def __call__(self, count: int, now_s: float) -> list[PendingJob]:
        jobs = self.draw(count, self.next, now_s)
        self.next += count
        return jobs


def shape_stream(rng: random.Random, shape: Shape) -> JobStream:
    """The shape's jobs, numbered on after its queue."""
    return JobStream(lambda count, start, now_s: pending_jobs(rng, shape, count, start=start, now_s=now_s),
                     shape.pending)


def churn(snap: ClusterSnapshot, rng: random.Random, arrivals: JobStream, step_s: float = 60.0) -> ClusterSnapshot:
    """One cycle later: a tenth of the running jobs ended, as many new jobs came."""
    running = list(snap.running)
    rng.shuffle(running)
    keep = running[len(running) // 10:]
    new = arrivals(len(running) - len(keep), snap.time_s + step_s)
    return replace(snap, time_s=snap.time_s + step_s, running=tuple(keep), pending=(*snap.pending, *new))


def steady_cycle_cpu_s(nodes: int, tenants: int, pending: int, cycles: int) -> list[float]:
    """The CPU seconds of a first (cold) cycle and of `cycles` more with churn, on `nodes` 8-GPU nodes, half busy,
    whose quota `tenants` share evenly, with `pending` jobs of `uniform_pending` waiting. Invariants checked."""
    rng = random.Random(2)
    cluster = make_cluster([(nodes, node_type(8), "hall")],
                           [Tenant(f"t{i}", quota_gpus=nodes * 8 / tenants, weight=1 + i % 4) for i in range(tenants)])
    snap = ClusterSnapshot(time_s=0.0, cluster=cluster, running=half_full(cluster, rng, tenants),
                           pending=tuple(uniform_pending(rng, pending, tenants)))
    policy = SchedulerPolicy()
    arrivals = JobStream(lambda count, start, _: uniform_pending(rng, count, tenants, start=start), pending)
    cycle_s: list[float] = []
    memory = SchedulerMemory()  # kept between the cycles, as a body keeps it
    with collector_paused():
        for _ in range(cycles + 1):
            start = time.process_time()
            result = schedule_cycle(snap, policy, memory=memory)
            cycle_s.append(time.process_time() - start)
            snap = churn(apply_scheduler_actions(snap, result.actions), rng, arrivals)
    assert check_invariants(snap) == []
    return cycle_s


@contextmanager
def collector_paused() -> Iterator[None]:
    """The cyclic garbage collector paused, as the bodies run the core: a replay pauses it for the whole run
    (greengpu.sim.engine) and the daemon freezes its long-lived heap (daemon_metrics.freeze_long_lived_heap).
    A cycle builds no reference cycles, and with the collector on its full passes re-walk the large snapshot:
    measured at 25-30% of a 50,000-job cycle once the core stopped pausing it itself (issue 40)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


SIZES = [1, 1, 1, 1, 2, 2, 4, 4, 8, 8, 16, 32, 64]


def uniform_pending(rng: random.Random, count: int, tenants: int, start: int = 0) -> list[PendingJob]:
    """The scheduler benchmark's first workload: sizes from SIZES, tenants drawn evenly, 10 min to 10 h."""
    return [
        PendingJob(job(f"p{start + i}", gpus=rng.choice(SIZES), tenant=f"t{rng.randrange(tenants)}",
                       priority=rng.choice([0, 0, 0, 1, 2]), duration_s=rng.uniform(600, 36_000),
                       submit_time_s=-rng.uniform(0, 7200)))
        for i in range(count)
    ]


def half_full(cluster: Cluster, rng: random.Random, tenants: int) -> tuple[RunningJob, ...]:
    """Every other node runs one job of 2 to 8 GPUs."""
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
