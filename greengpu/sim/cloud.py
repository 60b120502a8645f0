"""Cloud pools in a replay: nodes that start when the queue needs them, stop when idle, and (spot) get interrupted.

After each scheduling cycle the engine hands over the jobs the core left waiting for capacity
(`burst`). For each, the spot lever's pure rules (greengpu.spot.decide) choose spot, on-demand or
neither, from the cheapest pool of each kind that has room for it; a job waiting for a sleeping
on-premises node keeps waiting unless that boot costs more than the cloud. A pool starts a node of its
type when no running one has room (at most `max_nodes`); the node is paid from its request, is usable
`boot_s` later, and stops once it has been idle as long as a boot takes (renting it longer costs more
than starting a new one). The core never sees cloud nodes: on-premises quotas, fair share and
preemption stay on-premises.

Spot interruptions are a Poisson process per node at its pool's `interruptions_per_hour`, drawn from a
random stream seeded by `simulate --seed` and the pool's name (same seed, same interruptions). An
interruption gives `spot.notice_s` of notice: a job that checkpoints (it has a checkpoint interval) and
can write one within the notice stops `checkpoint_cost_s` later with all its work saved; any other job
runs until the node is taken back and loses the work since its last periodic checkpoint (or all of it).
Either way it is requeued with the rest of its work and decided again.

The proactive move (Uniform Progress, greengpu.spot.decide.leaves_spot): a job with a deadline and a
checkpoint interval that runs on spot is decided again at each periodic checkpoint it writes; when rule 4
would no longer place it on spot (behind the uniform rate to its deadline, or without the slack for one
more interruption), it stops there with that checkpoint's work saved and is requeued, where the same rule
sends it on-premises or to on-demand. Jobs without a deadline or without checkpoints get no such event:
replays of traces without deadlines are unchanged.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from greengpu.model import GPU_UNITS, Cluster, Job, PendingJob, Pool, gpus_to_units
from greengpu.policy import Policy
from greengpu.sched.waits import Wait, WaitReason
from greengpu.sim.clock import EventClock, EventKind
from greengpu.sim.results import JobOutcomes, PoolFigures
from greengpu.spot.decide import (
    CapacityKind,
    PoolPrice,
    SpotJobFacts,
    cloud_capacity_for,
    leaves_spot,
    prefer_waking,
)

BURST_REASONS = frozenset({WaitReason.CAPACITY, WaitReason.GANG, WaitReason.RESERVATION, WaitReason.NO_MODEL,
                           WaitReason.WAKE})
"""Waits more capacity would end. Quota waits stay (a tenant's limits hold in the cloud too), and so do jobs whose
preempted victims are already stopping for them."""


@dataclass
class CloudNode:
    name: str
    pool: str
    units: int
    requested_s: float
    ready_s: float
    free_units: int
    jobs: set[str] = field(default_factory=set)
    idle_token: int = 0
    reclaim_s: float | None = None
    """Set by an interruption's notice: no new work, and the node is gone at this time."""


@dataclass
class CloudJob:
    pending: PendingJob
    kind: CapacityKind
    units_by_node: dict[str, int]
    token: int
    start_s: float | None = None
    saved_s: float | None = None
    """Work saved by the checkpoint written in an interruption's notice (None: none written)."""


class CloudPools:
    """The replay's cloud nodes and the jobs on them."""

    def __init__(self, cluster: Cluster, policy: Policy, clock: EventClock, outcomes: JobOutcomes,
                 finish_s: dict[str, float], originals: Mapping[str, Job], seed: int,
                 requeue: Callable[[PendingJob], None], finished: Callable[[float], None],
                 price_per_kwh: Callable[[float], float]) -> None:
        self.cluster = cluster
        self.policy = policy
        self.clock = clock
        self.outcomes = outcomes
        self.finish_s = finish_s
        self.originals = originals
        self.requeue = requeue
        self.finished = finished
        self.price_per_kwh = price_per_kwh
        self.pools: dict[str, Pool] = dict(cluster.pools)
        self.figures = {name: PoolFigures() for name in self.pools}
        self.random = {name: random.Random(f"{seed}/{name}") for name in self.pools}
        self.nodes: dict[str, CloudNode] = {}
        self.jobs: dict[str, CloudJob] = {}
        self.last_finish_s = 0.0
        self.completed: set[str] = set()
        self.preemptions = 0
        """Jobs an interruption or a proactive move stopped (the contract counts them with preemptions)."""
        self.moves: list[tuple[str, float]] = []
        """(job, time) of each proactive move off spot at a checkpoint (leaves_spot)."""
        self._serial = 0
        self._tokens: dict[str, int] = {}
        self._started = dict.fromkeys(self.pools, 0)
        """Nodes each pool runs now (at most its max_nodes)."""
        self._shape: dict[str, tuple[int, int]] = {}
        """Per pool, during one burst: the most free units on one open node and the open empty nodes (a job that
        fits neither, with no start left, is refused without a scan: overloaded replays offer thousands)."""
        self._boot_cost = self._on_premises_boot_kwh()

    @property
    def busy(self) -> bool:
        """Whether a job runs or starts in the cloud (something can still happen)."""
        return bool(self.jobs)

    # ------------------------------------------------------------------ choosing

    def _gpu_price(self, pool: Pool) -> float:
        return pool.price_per_hour / self.cluster.node_types[pool.type_name].gpus

    def _nodes_needed(self, job: Job, pool: Pool) -> int:
        per_node = self.cluster.node_types[pool.type_name].gpus
        return 1 if job.gpus <= per_node else math.ceil(job.gpus / per_node)

    def _price(self, job: Job, pool: Pool) -> PoolPrice:
        rate = pool.interruptions_per_hour * self._nodes_needed(job, pool)  # any of its nodes stops it
        return PoolPrice(self._gpu_price(pool), rate, self.policy.spot.notice_s)

    def _facts(self, job: Job, now_s: float) -> SpotJobFacts:
        original = self.originals.get(job.job_id, job)
        left_s = job.submit_time_s + job.deadline_s - now_s if job.deadline_s is not None else None
        return SpotJobFacts(job.job_class, job.interruptible, job.checkpoint_interval_s,
                            self.policy.spot.checkpoint_cost_s, job.duration_s, left_s, job.gpus,
                            work_s=original.duration_s, deadline_s=job.deadline_s)

    def _cheapest(self, job: Job, spot: bool) -> Pool | None:
        fits = [p for p in self.pools.values() if p.spot == spot and self._room(job, p) is not None
                and (job.gpu_types is None or self.cluster.node_types[p.type_name].gpu_model in job.gpu_types)]
        return min(fits, key=lambda p: (self._gpu_price(p), p.name)) if fits else None

    def _on_premises_boot_kwh(self) -> float:
        """Facility energy of the dearest on-premises boot (a node idling through its boot time)."""
        types = {n.type_name for n in self.cluster.nodes}
        kwh = [self.cluster.node_types[t].node_idle_w * self.cluster.node_types[t].boot_s / 3.6e6 for t in types]
        return max(kwh, default=0.0) * self.cluster.site.pue

    def choose(self, job: Job, wait: Wait, now_s: float) -> tuple[CapacityKind, Pool] | None:
        """The cloud pool a waiting job should go to now (None: it keeps waiting on-premises)."""
        spot, on_demand = self._cheapest(job, True), self._cheapest(job, False)
        facts = self._facts(job, now_s)
        kind = cloud_capacity_for(facts, self._price(job, spot) if spot else None,
                                  self._price(job, on_demand) if on_demand else None, self.policy.spot)
        pool = spot if kind == "spot" else on_demand if kind == "on-demand" else None
        if kind is None or pool is None:
            return None
        if wait.reason is WaitReason.WAKE:
            cloud_cost = self._gpu_price(pool) * job.gpus * job.duration_s / 3600.0
            if prefer_waking(self._boot_cost * self.price_per_kwh(now_s), cloud_cost):
                return None
        return kind, pool

    # ------------------------------------------------------------------ placing

    def _room(self, job: Job, pool: Pool) -> dict[str, int] | None:
        """Units per node the job would take in `pool` ("" + index: nodes to start), or None: no room."""
        node_units = self.cluster.node_types[pool.type_name].gpus * GPU_UNITS
        starts_left = pool.max_nodes - self._started[pool.name]
        units = gpus_to_units(job.gpus)
        if starts_left <= 0:
            shape = self._shape.get(pool.name)
            if shape is None:
                frees = [n.free_units for n in self.nodes.values() if n.pool == pool.name and n.reclaim_s is None]
                shape = self._shape[pool.name] = (max(frees, default=0), frees.count(node_units))
            if (units > shape[0]) if units <= node_units else (self._nodes_needed(job, pool) > shape[1]):
                return None
        open_nodes = [n for n in self.nodes.values() if n.pool == pool.name and n.reclaim_s is None]
        if units <= node_units:
            fitting = [n for n in open_nodes if n.free_units >= units]
            if fitting:
                best = min(fitting, key=lambda n: (n.free_units, n.ready_s, n.name))  # best fit, up soonest
                return {best.name: units}
            return {"": units} if starts_left > 0 else None
        needed = self._nodes_needed(job, pool)
        empty = sorted((n for n in open_nodes if not n.jobs), key=lambda n: (n.ready_s, n.name))[:needed]
        if len(empty) + starts_left < needed:
            return None
        shares = [node_units] * (needed - 1) + [units - node_units * (needed - 1)]
        room = {node.name: share for node, share in zip(empty, shares, strict=False)}
        room.update({f"{i}": share for i, share in enumerate(shares[len(empty):])})
        return room

    def _start_node(self, pool: Pool, now_s: float) -> CloudNode:
        self._serial += 1
        node_type = self.cluster.node_types[pool.type_name]
        units = node_type.gpus * GPU_UNITS
        node = CloudNode(f"{pool.name}-{self._serial}", pool.name, units, now_s, now_s + node_type.boot_s, units)
        self.nodes[node.name] = node
        self._started[pool.name] += 1
        if pool.spot and pool.interruptions_per_hour > 0:
            gap_s = self.random[pool.name].expovariate(pool.interruptions_per_hour / 3600.0)
            self.clock.push(now_s + gap_s, EventKind.CLOUD, ("notice", node.name, 0))
        return node

    def burst(self, waits: Mapping[str, Wait], pending: dict[str, PendingJob], now_s: float) -> int:
        """Send the jobs the cycle left waiting for capacity to the cloud where the rules say so; how many left."""
        sent = 0
        self._shape = {}
        for job_id, wait in waits.items():
            waiting = pending.get(job_id)
            if waiting is None or wait.reason not in BURST_REASONS:
                continue
            chosen = self.choose(waiting.job, wait, now_s)
            if chosen is None:
                continue
            kind, pool = chosen
            room = self._room(waiting.job, pool)
            assert room is not None  # _cheapest only offers pools with room
            del pending[job_id]
            self._place(waiting, kind, pool, room, now_s)
            self._shape.pop(pool.name, None)
            sent += 1
        return sent

    def _place(self, waiting: PendingJob, kind: CapacityKind, pool: Pool, room: dict[str, int], now_s: float) -> None:
        job = waiting.job
        units_by_node: dict[str, int] = {}
        for name, units in room.items():
            node = self.nodes[name] if name in self.nodes else self._start_node(pool, now_s)
            node.free_units -= units
            node.jobs.add(job.job_id)
            node.idle_token += 1
            units_by_node[node.name] = units
        token = self._tokens.get(job.job_id, 0) + 1
        self._tokens[job.job_id] = token
        self.jobs[job.job_id] = CloudJob(waiting, kind, units_by_node, token)
        by_class = self.figures[pool.name].placements_by_class
        by_class[job.job_class] = by_class.get(job.job_class, 0) + 1
        ready_s = max(self.nodes[name].ready_s for name in units_by_node)
        self.clock.push(max(ready_s, now_s), EventKind.CLOUD, ("start", job.job_id, token))

    # ------------------------------------------------------------------ events

    def handle(self, data: tuple[str, str, int]) -> None:
        what, name, token = data
        if what == "notice":
            self._notice(name)
        elif what == "reclaim":
            node = self.nodes.get(name)
            if node is not None:
                self._release(node)
        elif what == "idle":
            node = self.nodes.get(name)
            if node is not None and not node.jobs and node.idle_token == token:
                self._release(node)
        else:
            cloud_job = self.jobs.get(name)
            if cloud_job is None or cloud_job.token != token:
                return  # stale: the job left or was placed again since
            if what == "start":
                self._start_job(cloud_job)
            elif what == "finish":
                self._finish(cloud_job)
            elif what == "stop":
                self._stop(cloud_job)
            elif what == "checkpoint":
                self._checkpoint(cloud_job)

    def _start_job(self, cloud_job: CloudJob) -> None:
        now_s = self.clock.now_s
        job = cloud_job.pending.job
        cloud_job.start_s = now_s
        self.outcomes.first_start.setdefault(job.job_id, now_s)
        self.clock.push(now_s + job.duration_s, EventKind.CLOUD, ("finish", job.job_id, cloud_job.token))
        self._next_checkpoint(cloud_job, now_s)

    def _next_checkpoint(self, cloud_job: CloudJob, now_s: float) -> None:
        """A spot job with a deadline is decided again at its next periodic checkpoint (before its end)."""
        job = cloud_job.pending.job
        interval = job.checkpoint_interval_s
        if cloud_job.kind != "spot" or job.deadline_s is None or not interval or cloud_job.start_s is None:
            return
        at_s = now_s + interval
        if at_s < cloud_job.start_s + job.duration_s:
            self.clock.push(at_s, EventKind.CLOUD, ("checkpoint", job.job_id, cloud_job.token))

    def _checkpoint(self, cloud_job: CloudJob) -> None:
        """A periodic checkpoint of a deadline job on spot: it moves off spot here when rule 4 says so."""
        now_s = self.clock.now_s
        job = cloud_job.pending.job
        assert cloud_job.start_s is not None
        ran_s = now_s - cloud_job.start_s
        pool = self.pools[self.nodes[next(iter(cloud_job.units_by_node))].pool]
        facts = self._facts(replace(job, duration_s=job.duration_s - ran_s), now_s)
        if not leaves_spot(facts, self._price(job, pool), self.policy.spot):
            self._next_checkpoint(cloud_job, now_s)
            return
        self.moves.append((job.job_id, now_s))
        cloud_job.saved_s = ran_s  # the checkpoint just written: nothing is lost
        self._stop(cloud_job)

    def _leave(self, cloud_job: CloudJob) -> None:
        """The job's units go back to its nodes; its run time and GPU-hours are counted."""
        now_s = self.clock.now_s
        job = cloud_job.pending.job
        del self.jobs[job.job_id]
        if cloud_job.start_s is not None:
            ran_s = now_s - cloud_job.start_s
            self.outcomes.run_s[job.job_id] = self.outcomes.run_s.get(job.job_id, 0.0) + ran_s
            pool = self.nodes[next(iter(cloud_job.units_by_node))].pool
            self.figures[pool].gpu_s += ran_s * job.gpus
        for name, units in cloud_job.units_by_node.items():
            node = self.nodes[name]
            node.free_units += units
            node.jobs.discard(job.job_id)
            if not node.jobs:
                node.idle_token += 1
                if node.reclaim_s is not None:
                    self._release(node)  # nothing left to finish before it is taken back
                else:
                    keep_s = node.ready_s - node.requested_s  # as long as a new node's boot: rent or buy
                    self.clock.push(max(now_s, node.ready_s) + keep_s, EventKind.CLOUD,
                                    ("idle", name, node.idle_token))

    def _finish(self, cloud_job: CloudJob) -> None:
        job = cloud_job.pending.job
        self._leave(cloud_job)
        self.outcomes.completed.add(job.job_id)
        self.completed.add(job.job_id)
        self.finish_s[job.job_id] = self.last_finish_s = self.clock.now_s
        self.finished(job.gpus)

    def _notice(self, name: str) -> None:
        """A spot interruption's notice: checkpoint if the notice allows it, else run until taken back."""
        node = self.nodes.get(name)
        if node is None:
            return  # released before its interruption came
        now_s = self.clock.now_s
        node.reclaim_s = now_s + self.policy.spot.notice_s
        self.figures[node.pool].interruptions += 1
        for job_id in sorted(node.jobs):
            cloud_job = self.jobs[job_id]
            job = cloud_job.pending.job
            if cloud_job.start_s is None:  # still waiting for its nodes: back to the queue, nothing lost
                self._leave(cloud_job)
                self.requeue(cloud_job.pending)
                continue
            cloud_job.token += 1
            self._tokens[job_id] = cloud_job.token
            end_s = cloud_job.start_s + job.duration_s
            cost_s = self.policy.spot.checkpoint_cost_s
            if job.checkpoint_interval_s and cost_s <= self.policy.spot.notice_s:
                cloud_job.saved_s = now_s - cloud_job.start_s
                stop_s = now_s + cost_s
            else:
                stop_s = node.reclaim_s
            what = "finish" if end_s <= stop_s else "stop"
            self.clock.push(min(end_s, stop_s), EventKind.CLOUD, (what, job_id, cloud_job.token))
        self.clock.push(node.reclaim_s, EventKind.CLOUD, ("reclaim", name, 0))

    def _stop(self, cloud_job: CloudJob) -> None:
        """An interrupted job stops: requeued with the work saved by its checkpoint taken off."""
        now_s = self.clock.now_s
        job = cloud_job.pending.job
        assert cloud_job.start_s is not None
        saved_s = cloud_job.saved_s
        if saved_s is None:  # no checkpoint in the notice: the work since the last periodic one is lost
            ran_s = now_s - cloud_job.start_s
            interval = job.checkpoint_interval_s
            saved_s = math.floor(ran_s / interval) * interval if interval else 0.0
            lost_s = ran_s - saved_s
            pool = self.nodes[next(iter(cloud_job.units_by_node))].pool
            self.figures[pool].lost_gpu_s += lost_s * job.gpus
        self._leave(cloud_job)
        self.preemptions += 1
        remaining = replace(job, duration_s=max(1.0, job.duration_s - saved_s))
        self.requeue(PendingJob(remaining, preemptions=cloud_job.pending.preemptions))

    def _release(self, node: CloudNode) -> None:
        """The node stops (or is taken back): it is paid up to now."""
        del self.nodes[node.name]
        self._started[node.pool] -= 1
        self._bill(node, self.clock.now_s)

    def _bill(self, node: CloudNode, until_s: float) -> None:
        figures = self.figures[node.pool]
        paid_s = until_s - node.requested_s
        figures.node_s += paid_s
        figures.cost += self.pools[node.pool].price_per_hour * paid_s / 3600.0

    # ------------------------------------------------------------------ figures

    def close(self, now_s: float) -> None:
        """The replay ends: nodes still up are paid to now, jobs still running counted to now."""
        for node in self.nodes.values():
            self._bill(node, now_s)
        for cloud_job in self.jobs.values():
            if cloud_job.start_s is not None:
                pool = self.nodes[next(iter(cloud_job.units_by_node))].pool
                self.figures[pool].gpu_s += (now_s - cloud_job.start_s) * cloud_job.pending.job.gpus
        self.nodes = {}

    @property
    def cost(self) -> float:
        return sum(f.cost for f in self.figures.values())

    @property
    def interruptions(self) -> int:
        return sum(f.interruptions for f in self.figures.values())

    @property
    def lost_gpu_s(self) -> float:
        return sum(f.lost_gpu_s for f in self.figures.values())

    def gpu_s(self, spot: bool) -> float:
        return sum(f.gpu_s for name, f in self.figures.items() if self.pools[name].spot == spot)

    def to_json(self) -> dict[str, Any]:
        return {name: {"spot": self.pools[name].spot, **f.to_json()} for name, f in sorted(self.figures.items())}
