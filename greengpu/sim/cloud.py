"""Cloud pools in a replay: nodes that start when the queue needs them, stop when idle, and (spot) get interrupted.

After each scheduling cycle the engine hands over the jobs the core left waiting for capacity (`burst`), with
the cycle's reservations. For each, sim/cloud_choice.py gathers the facts and the pure rules answer: spot,
on-demand or neither (greengpu.spot.decide), and whether to rent at all or wait for the core's predicted start
on-premises (greengpu.spot.wait_or_rent). A pool starts a node of its type when no running one has room (at
most `max_nodes`); the node is paid from its request, is usable `boot_s` later, and stops once it has been
idle as long as a boot takes (renting it longer costs more than starting a new one), or at once when its job
came back on-premises. The core never sees cloud nodes: on-premises quotas, fair share and preemption stay
on-premises.

Spot interruptions are a Poisson process per node at its pool's `interruptions_per_hour`, seeded by
`simulate --seed` and the pool's name. An interruption gives `spot.notice_s` of notice: a job that
checkpoints and can write one within the notice stops `checkpoint_cost_s` later with all its work saved; any
other job runs until the node is taken back and loses the work since its last periodic checkpoint (or all of
it). Either way it is requeued with the rest of its work and decided again.

At each periodic checkpoint a job writes in the cloud (deadline jobs on spot; with `spot.come_back`, every
job that checkpoints): a deadline job on spot moves off it when Uniform Progress says so (`leaves_spot`), and
a job comes back on-premises when room is free there and the move pays (`comes_back`). Both stop with that
checkpoint's work saved and are requeued; replays without pools never see these events.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace

from greengpu.json_types import JsonObject
from greengpu.model import GPU_UNITS, Cluster, Job, PendingJob, Pool, gpus_to_units
from greengpu.policy import Policy
from greengpu.sched.backfill import Reservation
from greengpu.sched.waits import Wait
from greengpu.sim.clock import EventClock, EventKind
from greengpu.sim.cloud_choice import CloudChooser
from greengpu.sim.cloud_parts import BURST_REASONS, CloudJob, CloudNode
from greengpu.sim.cloud_stops import CloudStops
from greengpu.sim.results import JobOutcomes, PoolFigures
from greengpu.spot.decide import CapacityKind
from greengpu.spot.wait_or_rent import slack_runs_out


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
        self.tokens: dict[str, int] = {}
        self._started = dict.fromkeys(self.pools, 0)
        """Nodes each pool runs now (at most its max_nodes)."""
        self._shape: dict[str, tuple[int, int]] = {}
        """Per pool, during one burst: the most free units on one open node and the open empty nodes (a job that
        fits neither, with no start left, is refused without a scan: overloaded replays offer thousands)."""
        self.chooser = CloudChooser(cluster, policy, self.pools, self._room, self._ready_in_s, price_per_kwh,
                                    originals)
        self.fits_on_premises: Callable[[Job], bool] = lambda job: False
        """Whether on-premises capacity that fits a job is free now, with nothing queued there (set by the body:
        the come-back move asks it at a cloud job's checkpoint)."""
        self._urgent_priority = max((job.priority for job in originals.values()), default=0) + 1
        """Above every job of the trace: where a deadline job whose slack runs out waits (`_urgent_if_late`)."""
        self.come_backs: list[tuple[str, float]] = []
        """(job, time) of each move back on-premises at a checkpoint (greengpu.spot.wait_or_rent.comes_back)."""
        self.stops = CloudStops(self)
        """Interruptions and the moves at periodic checkpoints (sim/cloud_stops.py)."""

    @property
    def busy(self) -> bool:
        """Whether a job runs or starts in the cloud (something can still happen)."""
        return bool(self.jobs)

    # ------------------------------------------------------------------ choosing

    def choose(self, job: Job, wait: Wait, now_s: float,
               reserved_start_s: float | None = None) -> tuple[CapacityKind, Pool] | None:
        """The cloud pool a waiting job should go to now (None: it keeps waiting on-premises)."""
        return self.chooser.choose(job, wait, now_s, reserved_start_s)

    def _ready_in_s(self, room: dict[str, int], pool: Pool, now_s: float) -> float:
        """Seconds from now until every node of `room` is up: running ones as they are, new ones a start-up."""
        boot_s = self.cluster.node_types[pool.type_name].boot_s
        return max((max(0.0, self.nodes[name].ready_s - now_s) if name in self.nodes else boot_s)
                   for name in room)

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
            if (units > shape[0]) if units <= node_units else (self.chooser.nodes_needed(job, pool) > shape[1]):
                return None
        open_nodes = [n for n in self.nodes.values() if n.pool == pool.name and n.reclaim_s is None]
        if units <= node_units:
            fitting = [n for n in open_nodes if n.free_units >= units]
            if fitting:
                best = min(fitting, key=lambda n: (n.free_units, n.ready_s, n.name))  # best fit, up soonest
                return {best.name: units}
            return {"": units} if starts_left > 0 else None
        needed = self.chooser.nodes_needed(job, pool)
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

    def burst(self, waits: Mapping[str, Wait], pending: dict[str, PendingJob], now_s: float,
              reservations: Iterable[Reservation] = ()) -> int:
        """Send the jobs the cycle left waiting for capacity to the cloud where the rules say so; how many left.
        `reservations`: the cycle's, whose starts are the core's predicted starts (wait or rent)."""
        sent = 0
        self._shape = {}
        reserved_s = {r.job_id: r.start_s for r in reservations}
        for job_id, wait in waits.items():
            waiting = pending.get(job_id)
            if waiting is None or wait.reason not in BURST_REASONS:
                continue
            chosen = self.choose(waiting.job, wait, now_s, reserved_s.get(job_id))
            if chosen is None:
                self._urgent_if_late(waiting, pending, wait, now_s, reserved_s.get(job_id))
                continue
            kind, pool = chosen
            room = self._room(waiting.job, pool)
            assert room is not None  # _cheapest only offers pools with room
            del pending[job_id]
            self._place(waiting, kind, pool, room, now_s)
            self._shape.pop(pool.name, None)
            sent += 1
        return sent

    def _urgent_if_late(self, waiting: PendingJob, pending: dict[str, PendingJob], wait: Wait, now_s: float,
                        reserved_start_s: float | None) -> None:
        """A deadline job the cloud does not take now whose slack runs out waits above every other job from the
        next cycle on: the core then makes room for it on-premises, preempting interruptible work."""
        job = waiting.job
        if job.deadline_s is None or not self.policy.spot.enabled or job.priority >= self._urgent_priority:
            return
        start_in_s = self.chooser.predicted_start_in_s(job, wait, now_s, reserved_start_s)
        left_s = job.submit_time_s + job.deadline_s - now_s
        if slack_runs_out(job.duration_s, left_s, self.policy.spot.restart_s, start_in_s):
            pending[job.job_id] = replace(waiting, job=replace(job, priority=self._urgent_priority))

    def _place(self, waiting: PendingJob, kind: CapacityKind, pool: Pool, room: dict[str, int], now_s: float) -> None:
        job = waiting.job
        units_by_node: dict[str, int] = {}
        for name, units in room.items():
            node = self.nodes[name] if name in self.nodes else self._start_node(pool, now_s)
            node.free_units -= units
            node.jobs.add(job.job_id)
            node.idle_token += 1
            units_by_node[node.name] = units
        token = self.tokens.get(job.job_id, 0) + 1
        self.tokens[job.job_id] = token
        self.jobs[job.job_id] = CloudJob(waiting, kind, units_by_node, token)
        by_class = self.figures[pool.name].placements_by_class
        by_class[job.job_class] = by_class.get(job.job_class, 0) + 1
        ready_s = max(self.nodes[name].ready_s for name in units_by_node)
        self.clock.push(max(ready_s, now_s), EventKind.CLOUD, ("start", job.job_id, token))

    # ------------------------------------------------------------------ events

    def handle(self, data: tuple[str, str, int]) -> None:
        what, name, token = data
        if what == "notice":
            self.stops.notice(name)
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
                self.stops.stop(cloud_job)
            elif what == "checkpoint":
                self.stops.checkpoint(cloud_job)

    def _start_job(self, cloud_job: CloudJob) -> None:
        now_s = self.clock.now_s
        job = cloud_job.pending.job
        cloud_job.start_s = now_s
        self.outcomes.first_start.setdefault(job.job_id, now_s)
        self.clock.push(now_s + job.duration_s, EventKind.CLOUD, ("finish", job.job_id, cloud_job.token))
        self.stops.next_checkpoint(cloud_job, now_s)

    def leave(self, cloud_job: CloudJob, release_idle: bool = False) -> None:
        """The job's units go back to its nodes; its run time and GPU-hours are counted. `release_idle`: a node
        it leaves idle stops at once (the job went back on-premises: nothing here is waiting for it)."""
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
                if node.reclaim_s is not None or release_idle:
                    self._release(node)  # nothing left to finish before it is taken back, or it came back
                else:
                    keep_s = node.ready_s - node.requested_s  # as long as a new node's boot: rent or buy
                    self.clock.push(max(now_s, node.ready_s) + keep_s, EventKind.CLOUD,
                                    ("idle", name, node.idle_token))

    def _finish(self, cloud_job: CloudJob) -> None:
        job = cloud_job.pending.job
        self.leave(cloud_job)
        self.outcomes.completed.add(job.job_id)
        self.completed.add(job.job_id)
        self.finish_s[job.job_id] = self.last_finish_s = self.clock.now_s
        self.finished(job.gpus)

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

    def to_json(self) -> dict[str, JsonObject]:
        return {name: {"spot": self.pools[name].spot, **f.to_json()} for name, f in sorted(self.figures.items())}
