"""`greengpu spot steer`: greengpu chooses spot or on-demand cloud capacity for waiting Slurm jobs
(docs/SPOT-LIVE.md).

Cloud nodes are Slurm nodes with the feature `spot` or `on-demand` (greengpu/control/cloud_nodes.py launches
and releases them). A pending GPU job that names no capacity feature and that its partitions have no room
for (`Reason=Resources` or `Priority`) is steered: the spot decision (greengpu.spot.decide, with the
inventory's cheapest spot and on-demand pools and the policy's `spot` section) chooses, and

    scontrol update JobId=N Features=spot AdminComment=greengpu.steered=spot [Partition=gpu,cloud]

adds that feature to the job's constraint (and the cloud partition to its partitions, when the cloud nodes
are in a partition of their own). Slurm then starts it on a node of that kind, through the ResumeProgram.
The admin comment (users cannot change it) marks the feature as greengpu's: while such a job still waits
(for its node, or requeued after an interruption) each pass decides again and changes the feature when the
decision changed (a deadline that came too close for spot).

Left unchanged, with one log line the first time (fail safe: the job waits for on-premises capacity, or
runs where Slurm puts it):
- the job already names `spot` or `on-demand` (the user chose), or has a constraint greengpu will not
  rewrite (an expression with `|`, brackets or counts);
- its comment has a greengpu key greengpu cannot read;
- no cloud pool may take it (no pool of a kind it may use);
- `scontrol update` fails (Slurm is asked again at the next pass).
A job that is waiting for other reasons (dependencies, limits, holds) is not touched.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

from greengpu.backends import slurm
from greengpu.model import Cluster
from greengpu.policy import Policy
from greengpu.spot.decide import CapacityKind, PoolPrice, SpotJobFacts, cloud_capacity_for
from greengpu.spot.pod_facts import BadAnnotation
from greengpu.spot.slurm_facts import (
    WAITING_REASONS,
    job_facts,
    names_capacity,
    pending_job,
    steered_features,
    without_capacity,
)

log = logging.getLogger("greengpu.spot.steer")
REQUEUED_REASONS = frozenset({"BeginTime"})
"""Slurm holds a requeued job (an interrupted spot node's) for a while before it may start again."""


@dataclass(frozen=True)
class SteerOutcome:
    """What one pass did with one pending job: `steered`, `left` (unchanged, and why) or `failed`."""

    job_id: str
    outcome: str
    capacity: CapacityKind | None
    detail: str


def cheapest_prices(cluster: Cluster, policy: Policy) -> tuple[PoolPrice | None, PoolPrice | None]:
    """(spot, on-demand): the cheapest pool of each kind per GPU-hour among those that may run a node; None for
    a kind the inventory has none of. Interruption rates are per node (a job on k nodes sees k times it)."""

    def cheapest(spot: bool) -> PoolPrice | None:
        prices = [(pool.price_per_hour / cluster.node_types[pool.type_name].gpus, pool.name, pool)
                  for pool in cluster.pools.values() if pool.spot == spot and pool.max_nodes > 0]
        if not prices:
            return None
        per_gpu_hour, _, pool = min(prices, key=lambda item: (item[0], item[1]))
        return PoolPrice(per_gpu_hour, pool.interruptions_per_hour, policy.spot.notice_s)

    return cheapest(True), cheapest(False)


class SpotSteering:
    """One pass over Slurm's queue per `steer_once()`; remembers what it logged so a loop does not repeat it."""

    def __init__(self, cluster: Cluster, policy: Policy, cloud_partition: str | None = None,
                 min_wait_s: float = 0.0, dry_run: bool = False, run: Callable[..., str] = slurm.run,
                 clock: Callable[[], float] = time.time) -> None:
        self.policy = policy
        self.spot, self.on_demand = cheapest_prices(cluster, policy)
        self.cloud_partition = cloud_partition
        self.min_wait_s = min_wait_s
        self.dry_run = dry_run
        self._run = run
        self._clock = clock
        self._said: set[tuple[str, str]] = set()

    def decide(self, facts: SpotJobFacts, node_count: int) -> CapacityKind | None:
        spot = self.spot
        if spot is not None and node_count > 1:
            spot = replace(spot, interruptions_per_hour=spot.interruptions_per_hour * node_count)
        return cloud_capacity_for(facts, spot, self.on_demand, self.policy.spot)

    def steer_once(self) -> list[SteerOutcome]:
        """Read the queue, steer what should be steered. slurm.SlurmError when the queue cannot be read."""
        records = slurm.json_reply(self._run("squeue", "--json"), "squeue --json").get("jobs", [])
        if not isinstance(records, list):
            raise slurm.SlurmError("squeue --json: no list of jobs")
        now_s = self._clock()
        outcomes = []
        for record in records:
            if not isinstance(record, dict):
                continue
            outcome = self._one(record, now_s)
            if outcome is not None:
                outcomes.append(outcome)
        return outcomes

    def _one(self, record: dict[str, object], now_s: float) -> SteerOutcome | None:
        job = pending_job(record)
        if job is None:
            return None
        before = job.steered
        base = without_capacity(job.features, before) if before is not None else job.features
        if before is not None and base is not None:
            # greengpu's own feature: decided again while the job waits (for a spot node, or requeued after an
            # interruption, held a while by Slurm first), so that a deadline that comes closer moves it.
            if job.reason not in WAITING_REASONS | REQUEUED_REASONS:
                return None
        elif names_capacity(job.features):
            return None  # the user chose (or changed greengpu's choice): theirs, every pass
        elif job.reason not in WAITING_REASONS or now_s - job.eligible_s < self.min_wait_s:
            return None
        base = base if base is not None else job.features
        try:
            facts = job_facts(record, job, now_s, self.policy.spot.checkpoint_cost_s)
        except BadAnnotation as error:
            return self._left(job.job_id, None, f"its comment cannot be read: {error}")
        capacity = self.decide(facts, job.node_count)
        if capacity is None:
            return self._left(job.job_id, None, f"no cloud pool may take it (class {facts.job_class}, "
                              f"interruptible {str(facts.interruptible).lower()})")
        if capacity == before:
            return None  # as greengpu chose before: nothing to change
        features = steered_features(base, capacity)
        if features is None:
            return self._left(job.job_id, capacity, f"its constraint {job.features!r} is an expression greengpu "
                              "does not rewrite")
        updates = [f"Features={features}", f"AdminComment={job.marked(capacity)}"]
        if self.cloud_partition and self.cloud_partition not in job.partitions:
            updates.append("Partition=" + ",".join((*job.partitions, self.cloud_partition)))
        detail = (f"class {facts.job_class}, interruptible {str(facts.interruptible).lower()}, "
                  f"{facts.gpus:g} GPUs, {facts.remaining_s / 3600.0:.2f} h"
                  + (f", deadline in {facts.deadline_remaining_s / 3600.0:.2f} h"
                     if facts.deadline_remaining_s is not None else ""))
        if self.dry_run:
            log.info("job %s: would steer to %s (%s): %s", job.job_id, capacity, detail, " ".join(updates))
            return SteerOutcome(job.job_id, "steered", capacity, "dry run: " + " ".join(updates))
        try:
            self._run("scontrol", "update", f"JobId={job.job_id}", *updates)
        except slurm.SlurmError as error:
            log.error("job %s: left unchanged, Slurm refused %s: %s", job.job_id, " ".join(updates), error)
            return SteerOutcome(job.job_id, "failed", capacity, str(error))
        log.info("job %s: steered to %s%s (%s): %s", job.job_id, capacity, f" (was {before})" if before else "",
                 detail, " ".join(updates))
        return SteerOutcome(job.job_id, "steered", capacity, " ".join(updates))

    def _left(self, job_id: str, capacity: CapacityKind | None, why: str) -> SteerOutcome:
        if (job_id, why) not in self._said:
            self._said.add((job_id, why))
            log.warning("job %s: left unchanged: %s", job_id, why)
        return SteerOutcome(job_id, "left", capacity, why)
