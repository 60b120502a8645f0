"""Lever 3 in the tick: spot, on-demand or wait, for each waiting cloud-eligible job (pure; docs/SPOT.md).

`choose_capacity` is the one rule every body asks: the daemon's tick (`plan_capacity`, from the snapshot and
the scheduling cycle's typed waits), the simulator (greengpu.sim.cloud_choice, from its own cloud nodes) and
`greengpu spot steer`. It chains the pure decisions, never duplicating them:

1. which cloud capacity the job may take (greengpu.spot.decide.cloud_capacity_for: rules 2-4);
2. whether it should rather wait for the on-premises start the core predicts (greengpu.spot.wait_or_rent);
3. for a job that waits for sleeping nodes, whether their boot costs less than the cloud (rule 1).

Anything unsure is a `wait`: no pool of a kind the job may use, no pool that can take it, a job the body
did not vouch for. Units: seconds, the site currency per GPU-hour.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from greengpu.model import ClusterSnapshot, Job, Pool
from greengpu.policy import SpotPolicy
from greengpu.sched.core import CycleResult
from greengpu.sched.waits import Wait, WaitReason
from greengpu.spot.decide import (
    PoolPrice,
    SpotJobFacts,
    cloud_capacity_for,
    on_demand_cost,
    prefer_waking,
    spot_cost,
)
from greengpu.spot.wait_or_rent import WaitOrRentFacts, waits_on_premises

BURST_REASONS = frozenset({WaitReason.CAPACITY, WaitReason.GANG, WaitReason.RESERVATION, WaitReason.NO_MODEL,
                           WaitReason.WAKE})
"""Waits more capacity would end. Quota waits stay (a tenant's limits hold in the cloud too), and so do jobs whose
preempted victims are already stopping for them."""


@dataclass(frozen=True)
class ChooseCapacity:
    """Lever 3's action: run waiting `job_id` on `spot` or `on-demand` capacity of cloud pool `pool`, or `wait`
    for on-premises capacity (pool None)."""

    job_id: str
    kind: Literal["spot", "on-demand", "wait"]
    pool: str | None
    reason: str = ""


@dataclass(frozen=True)
class CloudOffer:
    """The cheapest pool of one kind that can take the job: its name, its price for this job (interruptions of
    all the nodes it needs) and how soon a node of it could run the job."""

    pool: str
    price: PoolPrice
    ready_in_s: float


@dataclass(frozen=True)
class CapacityQuestion:
    """What the rule needs to know of one waiting job, now."""

    job_id: str
    facts: SpotJobFacts
    spot: CloudOffer | None
    on_demand: CloudOffer | None
    on_premises_start_in_s: float | None = None
    """The core's predicted start on-premises from now (a reservation, a sleeping node's boot); None: none."""
    on_demand_per_gpu_hour: float | None = None
    """The cheapest on-demand price per GPU-hour the job could pay, room or not (value of waiting)."""
    boot_cost: float | None = None
    """The job waits for sleeping nodes: what their boot costs (None: it does not)."""


def _wait(question: CapacityQuestion, why: str) -> ChooseCapacity:
    return ChooseCapacity(question.job_id, "wait", None, why)


def choose_capacity(question: CapacityQuestion, policy: SpotPolicy) -> ChooseCapacity:
    """The one rule: where a job the cycle left waiting for capacity should go now."""
    facts = question.facts
    spot, on_demand = question.spot, question.on_demand
    kind = cloud_capacity_for(facts, spot.price if spot else None, on_demand.price if on_demand else None, policy)
    offer = spot if kind == "spot" else on_demand if kind == "on-demand" else None
    if offer is None:
        return _wait(question, f"no cloud pool may take it (class {facts.job_class}, "
                               f"interruptible {str(facts.interruptible).lower()})")
    cloud: Literal["spot", "on-demand"] = "spot" if kind == "spot" else "on-demand"
    if policy.enabled:
        cost = spot_cost(facts, offer.price) if kind == "spot" else on_demand_cost(facts, offer.price)
        rent = WaitOrRentFacts(facts.job_class, facts.gpus, facts.remaining_s, question.on_premises_start_in_s,
                               offer.ready_in_s, cost, question.on_demand_per_gpu_hour, facts.deadline_remaining_s,
                               policy.restart_s, facts.checkpoint_interval_s if policy.come_back else None)
        if waits_on_premises(rent, policy.waiting):
            return _wait(question, f"on-premises predicted in {question.on_premises_start_in_s:.0f} s: waiting "
                                   f"costs less than {kind} in {offer.pool}")
    if question.boot_cost is not None:
        cloud_cost = offer.price.price_per_gpu_hour * facts.gpus * facts.remaining_s / 3600.0
        if prefer_waking(question.boot_cost, cloud_cost):
            return _wait(question, f"waking an on-premises node costs less than {kind} in {offer.pool}")
    deadline = (f", deadline in {facts.deadline_remaining_s / 3600.0:.2f} h"
                if facts.deadline_remaining_s is not None else "")
    return ChooseCapacity(question.job_id, cloud, offer.pool,
                          f"{kind} in {offer.pool}: class {facts.job_class}, interruptible "
                          f"{str(facts.interruptible).lower()}, {facts.gpus:g} GPUs, "
                          f"{facts.remaining_s / 3600.0:.2f} h{deadline}")


# --- the daemon's questions, from the snapshot ------------------------------------------------------------------


def job_facts(job: Job, now_s: float, policy: SpotPolicy) -> SpotJobFacts:
    """The spot facts of a queued job as the snapshot gives them (its duration is the work it has left)."""
    left_s = job.submit_time_s + job.deadline_s - now_s if job.deadline_s is not None else None
    return SpotJobFacts(job.job_class, job.interruptible, job.checkpoint_interval_s, policy.checkpoint_cost_s,
                        job.duration_s, left_s, job.gpus, work_s=job.duration_s, deadline_s=job.deadline_s)


def _gpu_price(snapshot: ClusterSnapshot, pool: Pool) -> float:
    return pool.price_per_hour / snapshot.cluster.node_types[pool.type_name].gpus


def _nodes_needed(snapshot: ClusterSnapshot, job: Job, pool: Pool) -> int:
    per_node = snapshot.cluster.node_types[pool.type_name].gpus
    return 1 if job.gpus <= per_node else math.ceil(job.gpus / per_node)


def _allowed(snapshot: ClusterSnapshot, job: Job, pool: Pool) -> bool:
    return job.gpu_types is None or snapshot.cluster.node_types[pool.type_name].gpu_model in job.gpu_types


def _offer(snapshot: ClusterSnapshot, job: Job, spot: bool, policy: SpotPolicy) -> CloudOffer | None:
    fits = [p for p in snapshot.cluster.pools.values()
            if p.spot == spot and _allowed(snapshot, job, p) and 0 < _nodes_needed(snapshot, job, p) <= p.max_nodes]
    if not fits:
        return None
    pool = min(fits, key=lambda p: (_gpu_price(snapshot, p), p.name))
    rate = pool.interruptions_per_hour * _nodes_needed(snapshot, job, pool)  # any of its nodes stops it
    return CloudOffer(pool.name, PoolPrice(_gpu_price(snapshot, pool), rate, policy.notice_s),
                      snapshot.cluster.node_types[pool.type_name].boot_s)


def _price_per_kwh(snapshot: ClusterSnapshot) -> float:
    site = snapshot.cluster.site
    if site.tariff is not None:
        return site.tariff.value_at(snapshot.time_s)
    return site.price_per_kwh or 0.0


def _boot(snapshot: ClusterSnapshot, job: Job) -> tuple[float, float]:
    """(seconds, cost) of the longest on-premises boot the job may wait for."""
    types = snapshot.cluster.node_types
    allowed = [types[n.type_name] for n in snapshot.cluster.nodes
               if job.gpu_types is None or types[n.type_name].gpu_model in job.gpu_types]
    boot_s = max((t.boot_s for t in allowed), default=0.0)
    kwh = max((types[t].node_idle_w * types[t].boot_s / 3.6e6 for t in {n.type_name for n in snapshot.cluster.nodes}),
              default=0.0) * snapshot.cluster.site.pue
    return boot_s, kwh * _price_per_kwh(snapshot)


def question_for(snapshot: ClusterSnapshot, job: Job, wait: Wait, reserved_start_s: float | None,
                 policy: SpotPolicy, facts: SpotJobFacts | None = None,
                 boots: dict[object, tuple[float, float]] | None = None) -> CapacityQuestion:
    """The question for one waiting job of the snapshot: the inventory's cheapest pools that can take it, a new
    cloud node's start-up, and the core's predicted start (its reservation, or a sleeping node's boot).
    `boots`: the boots found so far, by the GPU models a job allows (one walk of the nodes per kind of job)."""
    start_in_s: float | None = None
    boot_cost: float | None = None
    if reserved_start_s is not None:
        start_in_s = max(0.0, reserved_start_s - snapshot.time_s)
    if wait.reason is WaitReason.WAKE:
        found = boots.get(job.gpu_types) if boots is not None else None
        if found is None:
            found = _boot(snapshot, job)
            if boots is not None:
                boots[job.gpu_types] = found
        boot_s, boot_cost = found
        start_in_s = boot_s if start_in_s is None else start_in_s
    on_demand = [_gpu_price(snapshot, p) for p in snapshot.cluster.pools.values()
                 if not p.spot and _allowed(snapshot, job, p)]
    return CapacityQuestion(job.job_id, facts or job_facts(job, snapshot.time_s, policy),
                            _offer(snapshot, job, True, policy), _offer(snapshot, job, False, policy),
                            start_in_s, min(on_demand, default=None), boot_cost)


def plan_capacity(snapshot: ClusterSnapshot, cycle: CycleResult, policy: SpotPolicy,
                  facts: Mapping[str, SpotJobFacts] | None = None) -> tuple[ChooseCapacity, ...]:
    """Lever 3 of the tick: a `ChooseCapacity` for each job the cycle left waiting for capacity, in queue order.

    Nothing without cloud pools in the inventory. `facts`: a body's own reading of its jobs (the Slurm body's,
    from their comments); then only the jobs in it are asked (the body vouches for them, and leaves out the
    jobs it must not steer). None: every waiting job, with the facts the snapshot gives."""
    if not snapshot.cluster.pools or not cycle.waits:
        return ()
    reserved = {r.job_id: r.start_s for r in cycle.reservations}
    boots: dict[object, tuple[float, float]] = {}
    chosen = []
    for pending in snapshot.pending:
        job = pending.job
        wait = cycle.waits.get(job.job_id)
        if wait is None or wait.reason not in BURST_REASONS:
            continue
        if facts is not None and job.job_id not in facts:
            continue
        question = question_for(snapshot, job, wait, reserved.get(job.job_id), policy,
                                facts.get(job.job_id) if facts is not None else None, boots)
        chosen.append(choose_capacity(question, policy))
    return tuple(chosen)
