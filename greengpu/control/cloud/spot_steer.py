"""Slurm's side of the capacity lever: which waiting jobs it may steer, and the `scontrol update` that steers
them (docs/SPOT-LIVE.md). The daemon's Slurm body reads and acts through `SlurmCapacity`, with the decision
from its tick (greengpu.brain.capacity_choice); `greengpu spot steer` (deprecated: run the daemon) is a thin command
over the same reader, actuator and rule (`choose_capacity`), without the core's predicted starts.

Cloud nodes are Slurm nodes with the feature `spot` or `on-demand` (greengpu/control/cloud/cloud_nodes.py launches
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
from greengpu.brain.capacity_choice import CapacityQuestion, ChooseCapacity, CloudOffer, choose_capacity
from greengpu.control.bodies.body import ActionFailed
from greengpu.json_types import JsonValue
from greengpu.model import Cluster
from greengpu.policy import Policy
from greengpu.spot.decide import CapacityKind, PoolPrice, SpotJobFacts
from greengpu.spot.pod_facts import BadAnnotation
from greengpu.spot.slurm_facts import (
    WAITING_REASONS,
    PendingSlurmJob,
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


class SlurmCapacity:
    """The pending jobs the capacity lever may steer (`read`), and the steering of one (`steer`)."""

    def __init__(self, checkpoint_cost_s: float, cloud_partition: str | None = None, min_wait_s: float = 0.0,
                 dry_run: bool = False, run: Callable[..., str] = slurm.run) -> None:
        self.checkpoint_cost_s = checkpoint_cost_s
        self.cloud_partition = cloud_partition
        self.min_wait_s = min_wait_s
        self.dry_run = dry_run
        self._run = run
        self._jobs: dict[str, tuple[PendingSlurmJob, str]] = {}
        """Each steerable job of the last `read`, and its constraint without greengpu's feature."""
        self._said: set[tuple[str, str]] = set()
        self.left: list[SteerOutcome] = []
        """The jobs the last `read` left unchanged, and why."""

    def read(self, records: list[JsonValue], now_s: float) -> tuple[dict[str, SpotJobFacts], dict[str, str]]:
        """From `squeue --json`'s jobs: the spot facts of each job that may be steered, and the capacity greengpu
        already gave the ones it steered before (a job the user steered, or greengpu cannot read, is left out)."""
        self._jobs, self.left = {}, []
        facts: dict[str, SpotJobFacts] = {}
        held: dict[str, str] = {}
        for record in records:
            if not isinstance(record, dict):
                continue
            job = pending_job(record)
            if job is None:
                continue
            before = job.steered
            base = without_capacity(job.features, before) if before is not None else job.features
            if before is not None and base is not None:
                # greengpu's own feature: decided again while the job waits (for a spot node, or requeued after an
                # interruption, held a while by Slurm first), so that a deadline that comes closer moves it.
                if job.reason not in WAITING_REASONS | REQUEUED_REASONS:
                    continue
                held[job.job_id] = before
            elif names_capacity(job.features):
                continue  # the user chose (or changed greengpu's choice): theirs, every pass
            elif job.reason not in WAITING_REASONS or now_s - job.eligible_s < self.min_wait_s:
                continue
            base = base if base is not None else job.features
            if steered_features(base, "spot") is None:
                self.left.append(self._left(job.job_id, None, f"its constraint {job.features!r} is an expression "
                                            "greengpu does not rewrite"))
                continue
            try:
                facts[job.job_id] = job_facts(record, job, now_s, self.checkpoint_cost_s)
            except BadAnnotation as error:
                self.left.append(self._left(job.job_id, None, f"its comment cannot be read: {error}"))
                continue
            self._jobs[job.job_id] = (job, base)
        return facts, held

    def steer(self, job_id: str, capacity: CapacityKind, facts: SpotJobFacts | None = None) -> SteerOutcome:
        """Give a job of the last `read` the feature of `capacity` (and the cloud partition): `steered`, `left`
        (unchanged, and why) or `failed` (Slurm refused)."""
        found = self._jobs.get(job_id)
        if found is None:
            return self._left(job_id, capacity, "not a job greengpu may steer at the last read")
        job, base = found
        if capacity == job.steered:
            return SteerOutcome(job_id, "left", capacity, f"already steered to {capacity}")
        features = steered_features(base, capacity)
        if features is None:
            return self._left(job_id, capacity, f"its constraint {job.features!r} is an expression greengpu "
                              "does not rewrite")
        updates = [f"Features={features}", f"AdminComment={job.marked(capacity)}"]
        if self.cloud_partition and self.cloud_partition not in job.partitions:
            updates.append("Partition=" + ",".join((*job.partitions, self.cloud_partition)))
        detail = "" if facts is None else (
            f"class {facts.job_class}, interruptible {str(facts.interruptible).lower()}, "
            f"{facts.gpus:g} GPUs, {facts.remaining_s / 3600.0:.2f} h"
            + (f", deadline in {facts.deadline_remaining_s / 3600.0:.2f} h"
               if facts.deadline_remaining_s is not None else ""))
        before = job.steered
        if self.dry_run:
            log.info("job %s: would steer to %s (%s): %s", job_id, capacity, detail, " ".join(updates))
            return SteerOutcome(job_id, "steered", capacity, "dry run: " + " ".join(updates))
        try:
            self._run("scontrol", "update", f"JobId={job_id}", *updates)
        except slurm.SlurmError as error:
            log.error("job %s: left unchanged, Slurm refused %s: %s", job_id, " ".join(updates), error)
            return SteerOutcome(job_id, "failed", capacity, str(error))
        log.info("job %s: steered to %s%s (%s): %s", job_id, capacity, f" (was {before})" if before else "",
                 detail, " ".join(updates))
        return SteerOutcome(job_id, "steered", capacity, " ".join(updates))

    def _left(self, job_id: str, capacity: CapacityKind | None, why: str) -> SteerOutcome:
        if (job_id, why) not in self._said:
            self._said.add((job_id, why))
            log.warning("job %s: left unchanged: %s", job_id, why)
        return SteerOutcome(job_id, "left", capacity, why)


class SpotSteering:
    """`greengpu spot steer`: one pass over Slurm's queue per `steer_once()`, with the tick's capacity rule
    (greengpu.brain.capacity_choice.choose_capacity) on the inventory's cheapest pools (deprecated: the daemon's tick
    steers with the core's predicted starts too)."""

    def __init__(self, cluster: Cluster, policy: Policy, cloud_partition: str | None = None,
                 min_wait_s: float = 0.0, dry_run: bool = False, run: Callable[..., str] = slurm.run,
                 clock: Callable[[], float] = time.time) -> None:
        self.policy = policy
        self.spot, self.on_demand = cheapest_prices(cluster, policy)
        self.capacity = SlurmCapacity(policy.spot.checkpoint_cost_s, cloud_partition, min_wait_s, dry_run, run)
        self._run = run
        self._clock = clock

    def decide(self, job_id: str, facts: SpotJobFacts, node_count: int) -> ChooseCapacity:
        spot = self.spot
        if spot is not None and node_count > 1:
            spot = replace(spot, interruptions_per_hour=spot.interruptions_per_hour * node_count)
        question = CapacityQuestion(job_id, facts, CloudOffer("spot", spot, 0.0) if spot else None,
                                    CloudOffer("on-demand", self.on_demand, 0.0) if self.on_demand else None)
        return choose_capacity(question, self.policy.spot)

    def steer_once(self) -> list[SteerOutcome]:
        """Read the queue, steer what should be steered. slurm.SlurmError when the queue cannot be read."""
        records = slurm.json_reply(self._run("squeue", "--json"), "squeue --json").get("jobs", [])
        if not isinstance(records, list):
            raise slurm.SlurmError("squeue --json: no list of jobs")
        facts, held = self.capacity.read(records, self._clock())
        outcomes = list(self.capacity.left)
        for record in records:
            job = pending_job(record) if isinstance(record, dict) else None
            if job is None or job.job_id not in facts:
                continue
            chosen = self.decide(job.job_id, facts[job.job_id], job.node_count)
            if chosen.kind == "wait":
                outcomes.append(self.capacity._left(job.job_id, None, f"no cloud pool may take it (class "
                                f"{facts[job.job_id].job_class}, interruptible "
                                f"{str(facts[job.job_id].interruptible).lower()})"))
            elif held.get(job.job_id) != chosen.kind:
                outcomes.append(self.capacity.steer(job.job_id, chosen.kind, facts[job.job_id]))
        return outcomes


def steerable(capacity: SlurmCapacity | None, queue: str, now_s: float,
              ) -> tuple[dict[str, SpotJobFacts], dict[str, str]]:
    """The Slurm body's hook: the steerable jobs of `squeue --json`'s text, with their facts, and what greengpu
    gave them already (none at all without a `capacity`: no cloud pools, nothing steered)."""
    if capacity is None:
        return {}, {}
    records = slurm.json_reply(queue, "squeue --json").get("jobs") or []
    return capacity.read(records if isinstance(records, list) else [], now_s)


def steer(capacity: SlurmCapacity, action: ChooseCapacity) -> str:
    """The Slurm body's actuator for the tick's `ChooseCapacity`; ActionFailed when Slurm refused the update."""
    if action.kind == "wait":
        return f"{action.job_id}: waits on-premises"
    outcome = capacity.steer(action.job_id, action.kind)
    if outcome.outcome == "failed":
        raise ActionFailed(f"scontrol update of job {action.job_id} refused: {outcome.detail}")
    return f"{action.job_id}: {outcome.outcome} ({outcome.detail})"
