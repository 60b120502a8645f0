"""Which cloud pool a waiting job goes to, if any: the replay's side of greengpu.spot.decide and wait_or_rent.

The simulator only gathers the facts (prices, the core's predicted start, how soon a cloud node could run the
job) and carries out the answer of the tick's capacity rule (greengpu.brain.capacity_choice.choose_capacity, the
rule the daemon's tick asks too); `CloudPools` (sim/cloud.py) places and runs the job.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping

from greengpu.brain.capacity_choice import CapacityQuestion, CloudOffer, choose_capacity
from greengpu.model import Cluster, Job, Pool, PowerState
from greengpu.policy import Policy
from greengpu.sched.waits import Wait, WaitReason
from greengpu.sim.nodes import SimNode
from greengpu.spot.decide import CapacityKind, PoolPrice, SpotJobFacts

Room = Callable[[Job, Pool], "dict[str, int] | None"]
"""Units per node a job would take in a pool ("" + index: nodes to start), or None: no room."""


class CloudChooser:
    """Prices and facts of the cloud pools, and the choice for one waiting job."""

    def __init__(self, cluster: Cluster, policy: Policy, pools: Mapping[str, Pool], room: Room,
                 ready_in_s: Callable[[dict[str, int], Pool, float], float],
                 price_per_kwh: Callable[[float], float], originals: Mapping[str, Job]) -> None:
        self.cluster = cluster
        self.policy = policy
        self.pools = pools
        self.room = room
        self.ready_in_s = ready_in_s
        """Seconds from now until the nodes of a room are up (0 for running ones, a start-up for new ones)."""
        self.price_per_kwh = price_per_kwh
        self.originals = originals
        self.boot_kwh = self._on_premises_boot_kwh()

    def gpu_price(self, pool: Pool) -> float:
        return pool.price_per_hour / self.cluster.node_types[pool.type_name].gpus

    def nodes_needed(self, job: Job, pool: Pool) -> int:
        per_node = self.cluster.node_types[pool.type_name].gpus
        return 1 if job.gpus <= per_node else math.ceil(job.gpus / per_node)

    def price(self, job: Job, pool: Pool) -> PoolPrice:
        rate = pool.interruptions_per_hour * self.nodes_needed(job, pool)  # any of its nodes stops it
        return PoolPrice(self.gpu_price(pool), rate, self.policy.spot.notice_s)

    def facts(self, job: Job, now_s: float) -> SpotJobFacts:
        original = self.originals.get(job.job_id, job)
        left_s = job.submit_time_s + job.deadline_s - now_s if job.deadline_s is not None else None
        return SpotJobFacts(job.job_class, job.interruptible, job.checkpoint_interval_s,
                            self.policy.spot.checkpoint_cost_s, job.duration_s, left_s, job.gpus,
                            work_s=original.duration_s, deadline_s=job.deadline_s)

    def allowed(self, job: Job, pool: Pool) -> bool:
        return job.gpu_types is None or self.cluster.node_types[pool.type_name].gpu_model in job.gpu_types

    def cheapest(self, job: Job, spot: bool) -> Pool | None:
        fits = [p for p in self.pools.values() if p.spot == spot and self.room(job, p) is not None
                and self.allowed(job, p)]
        return min(fits, key=lambda p: (self.gpu_price(p), p.name)) if fits else None

    def on_demand_per_gpu_hour(self, job: Job) -> float | None:
        """The cheapest on-demand price per GPU-hour the job could pay, room or not (the value of waiting's
        `on-demand` measure)."""
        prices = [self.gpu_price(p) for p in self.pools.values() if not p.spot and self.allowed(job, p)]
        return min(prices, default=None)

    def _on_premises_boot_kwh(self) -> float:
        """Facility energy of the dearest on-premises boot (a node idling through its boot time)."""
        types = {n.type_name for n in self.cluster.nodes}
        kwh = [self.cluster.node_types[t].node_idle_w * self.cluster.node_types[t].boot_s / 3.6e6 for t in types]
        return max(kwh, default=0.0) * self.cluster.site.pue

    def on_premises_boot_s(self, job: Job) -> float:
        """The longest boot of an on-premises node the job may run on (a WAKE wait's predicted start)."""
        boots = [self.cluster.node_types[n.type_name].boot_s for n in self.cluster.nodes
                 if job.gpu_types is None or self.cluster.node_types[n.type_name].gpu_model in job.gpu_types]
        return max(boots, default=0.0)

    def offer(self, job: Job, pool: Pool | None, now_s: float) -> CloudOffer | None:
        """What `pool` (the cheapest of its kind with room) offers the job: its price and how soon its nodes run it."""
        if pool is None:
            return None
        room = self.room(job, pool)
        assert room is not None  # cheapest only offers pools with room
        return CloudOffer(pool.name, self.price(job, pool), self.ready_in_s(room, pool, now_s))

    def question(self, job: Job, wait: Wait, now_s: float, reserved_start_s: float | None = None) -> CapacityQuestion:
        """The capacity rule's question for a waiting job, from the replay's own cloud nodes and prices."""
        boot_cost = self.boot_kwh * self.price_per_kwh(now_s) if wait.reason is WaitReason.WAKE else None
        return CapacityQuestion(job.job_id, self.facts(job, now_s),
                                self.offer(job, self.cheapest(job, True), now_s),
                                self.offer(job, self.cheapest(job, False), now_s),
                                self.predicted_start_in_s(job, wait, now_s, reserved_start_s),
                                self.on_demand_per_gpu_hour(job), boot_cost)

    def choose(self, job: Job, wait: Wait, now_s: float,
               reserved_start_s: float | None = None) -> tuple[CapacityKind, Pool] | None:
        """The cloud pool a waiting job should go to now (None: it keeps waiting on-premises), as the tick's
        capacity rule (greengpu.brain.capacity_choice.choose_capacity) says."""
        chosen = choose_capacity(self.question(job, wait, now_s, reserved_start_s), self.policy.spot)
        if chosen.kind == "wait" or chosen.pool is None:
            return None
        return chosen.kind, self.pools[chosen.pool]

    def predicted_start_in_s(self, job: Job, wait: Wait, now_s: float, reserved_start_s: float | None) -> float | None:
        """The core's predicted start from now: its reservation, or the boot of the sleeping nodes it waits for
        (None: no prediction)."""
        if reserved_start_s is not None:
            return max(0.0, reserved_start_s - now_s)
        if wait.reason is WaitReason.WAKE:
            return self.on_premises_boot_s(job)
        return None


def fits_free_awake(job: Job, nodes: Iterable[SimNode], cluster: Cluster) -> bool:
    """Whether awake on-premises nodes have whole free GPUs for `job` now (a node for a job that fits one, else
    enough empty nodes): the room a cloud job coming back at a checkpoint would take."""
    per_node: list[int] = []
    for node in nodes:
        if node.power is not PowerState.AWAKE:
            continue
        if job.gpu_types is not None and cluster.node_types[node.type_name].gpu_model not in job.gpu_types:
            continue
        free = node.gpus - len(node.gpu_users)
        if job.gpus <= node.gpus and free >= job.gpus:
            return True
        if free == node.gpus:
            per_node.append(free)
    return job.gpus > max(per_node, default=0) and sum(per_node) >= job.gpus
