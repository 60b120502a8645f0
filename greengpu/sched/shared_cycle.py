"""The scheduling cycle's pass for jobs with a `gpu_profile`: MIG instances and time-slice replicas.

Run after the main pass (greengpu.sched.core), which never sees these jobs nor the shared GPUs. In queue order
(priority with age boost, fair share, age), each job:
- `timeslice`: takes one replica of a time-sliced GPU whose node type allows its class, the fullest such GPU
  first (best fit keeps GPUs whole for the next); a class no time-sliced GPU allows waits (`no-model`);
- a MIG profile: takes a free instance of that profile in a GPU's current partition, on the fullest GPU
  (fewest free compute slices) that has one, so whole GPUs stay free; when none has one, it counts on an
  instance of a partition being made (a GPU reconfiguring) before it orders a new one; only then a MIG GPU
  with no instance in use is repartitioned (`PartitionGpu`: as many instances of the profile as fit, the
  rest filled with the largest allowed profiles) and the job waits the node type's `reconfigure_s`;
- is admitted only within its tenant's quota, charged its share: a MIG instance its compute slices over the
  GPU's (1g.5gb = 1/7 of an A100), a replica 1/replicas (greengpu.sched.quota);
- wakes a sleeping node with a GPU that could hold it when no awake one can.
Pure: no I/O, no clock.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from greengpu.model import (
    TIMESLICE,
    Action,
    ClusterSnapshot,
    GpuSlot,
    Job,
    PartitionGpu,
    PendingJob,
    PlaceJob,
    PowerState,
    RunningJob,
    WakeNode,
)
from greengpu.policy import SchedulerPolicy
from greengpu.sched.mig import parse_instance, partition_for, profile_units
from greengpu.sched.order import age_boost, fair_share, queue_order
from greengpu.sched.quota import QuotaLedger
from greengpu.sched.shared_gpus import SharedGpu, SharedUse, partition_of, shared_gpus, shared_use
from greengpu.sched.state import cluster_layout
from greengpu.sched.waits import Wait, WaitReason

if TYPE_CHECKING:
    from greengpu.sched.memory import SchedulerMemory


@dataclass
class SharedDecisions:
    """What the shared pass decided: actions, why the rest waits, and until when nothing would change."""

    actions: list[Action] = field(default_factory=list)
    waits: dict[str, Wait] = field(default_factory=dict)
    unchanged_until_s: float = math.inf


class _SharedPass:
    def __init__(self, snapshot: ClusterSnapshot, policy: SchedulerPolicy, main_actions: Sequence[Action],
                 memo: bool = True, memory: SchedulerMemory | None = None) -> None:
        self.memo = memo
        """Jobs alike (tenant, profile, class, constraints) share their candidate GPUs, and once one finds no
        room the rest take its wait: identical decisions (memo=False decides each on its own, to compare)."""
        self._kinds: dict[tuple[object, ...], tuple[list[SharedGpu], list[SharedGpu], list[tuple[str, int]]]] = {}
        self._full: dict[tuple[object, ...], Wait] = {}
        self.snapshot = snapshot
        self.policy = policy
        self.now_s = snapshot.time_s
        cluster = snapshot.cluster
        layout = cluster_layout(cluster, memory)
        self.ledger = QuotaLedger(cluster, layout.model_of_node, layout.memory_of_node,
                                  policy.borrow_non_interruptible)
        for running in snapshot.running:
            self.ledger.charge(running)
        placed = {a.job_id: a for a in main_actions if isinstance(a, PlaceJob)}
        if placed:
            for pending in snapshot.pending:
                action = placed.get(pending.job.job_id)
                if action is not None:
                    self.ledger.charge(RunningJob(pending.job, action.slots, self.now_s, self.now_s))
        self.gpus = shared_gpus(cluster, memory)
        self.use: SharedUse = shared_use(snapshot)
        self.busy_nodes = {node for running in snapshot.running for node in running.nodes}
        self.coming: dict[tuple[str, int], list[str]] = {}
        """Free instances of partitions not ready yet (reconfiguring, or ordered this cycle) jobs may count on."""
        for gpu in self.gpus:
            partition = partition_of(snapshot, gpu.key)
            if gpu.family is not None and partition.ready_s > self.now_s:
                used = self.use.instances_used.get(gpu.key, set())
                self.coming[gpu.key] = [i for i in partition.instances if i not in used]
        self.result = SharedDecisions()
        self.woken: set[str] = set()
        self.ordered: set[tuple[str, int]] = set()
        """MIG GPUs this cycle repartitions."""
        self.order_dependent = False
        """Whether a job counts on an instance of a partition being made (the first ones in queue order do)."""

    # ------------------------------------------------------------------ helpers

    def _share_of(self, tenant: str) -> float:
        return fair_share(self.ledger.total_units.get(tenant, 0), self.snapshot.tenant_usage_gpu_s.get(tenant, 0.0),
                          self.ledger.tenant(tenant).weight, self.policy.fair_share.usage_weight)

    def _candidates(self, job: Job) -> list[SharedGpu]:
        profile = job.gpu_profile
        found = []
        for gpu in self.gpus:
            if job.gpu_types is not None and gpu.model not in job.gpu_types:
                continue
            if job.required_nodes is not None and gpu.node not in job.required_nodes:
                continue
            if job.excluded_nodes is not None and gpu.node in job.excluded_nodes:
                continue
            if profile == TIMESLICE:
                if gpu.family is None and job.job_class in gpu.classes:
                    found.append(gpu)
            elif gpu.family is not None and profile in gpu.profiles and profile in gpu.family.profiles:
                found.append(gpu)
        return found

    def _units(self, gpu: SharedGpu, profile: str) -> int:
        return gpu.replica_units if gpu.family is None else profile_units(gpu.family, profile)

    def _wait(self, job: Job, reason: WaitReason, gpus: Sequence[SharedGpu], detail: str = "") -> None:
        self.result.waits[job.job_id] = Wait(reason, job.tenant, tuple(sorted({g.model for g in gpus})),
                                             nodes=frozenset(g.node for g in gpus), detail=detail)

    def _place(self, job: Job, gpu: SharedGpu, instance: str) -> None:
        units = self._units(gpu, job.gpu_profile)
        slot = GpuSlot(gpu.node, gpu.gpu_index, units, instance)
        self.result.actions.append(PlaceJob(job.job_id, (slot,)))
        self.ledger.charge(RunningJob(job, (slot,), self.now_s, self.now_s))
        self.busy_nodes.add(gpu.node)
        if instance == TIMESLICE:
            self.use.replicas_used[gpu.key] = self.use.replicas_used.get(gpu.key, 0) + 1
        else:
            self.use.instances_used.setdefault(gpu.key, set()).add(instance)

    # ------------------------------------------------------------------ the pass

    def run(self, pending: Sequence[PendingJob]) -> SharedDecisions:
        for item in queue_order(pending, self.now_s, self.policy, self._share_of):
            self._decide(item.job)
        if not self.result.actions:
            for gpu in self.gpus:
                ready_s = partition_of(self.snapshot, gpu.key).ready_s
                if ready_s > self.now_s:
                    self.result.unchanged_until_s = min(self.result.unchanged_until_s, ready_s)
            if self.order_dependent:  # which jobs count on the coming instances follows the queue order
                self.result.unchanged_until_s = min(self.result.unchanged_until_s, self._order_steps_s(pending))
        else:
            self.result.unchanged_until_s = -math.inf
        return self.result

    def _order_steps_s(self, pending: Sequence[PendingJob]) -> float:
        """When the queue order could first change with only the clock moving: a job's next age-boost step
        (-inf with decayed usage in the shares: it moves at any time)."""
        policy = self.policy
        if policy.fair_share.usage_weight > 0 and self.snapshot.tenant_usage_gpu_s:
            return -math.inf
        rate_per_s = policy.age_boost_per_hour / 3600.0
        if rate_per_s <= 0 or policy.age_boost_max <= 0:
            return math.inf
        until = math.inf
        for item in pending:
            submit_s = item.job.submit_time_s
            steps = age_boost((self.now_s - submit_s) * rate_per_s, policy.age_boost_max)
            if steps < policy.age_boost_max:
                until = min(until, submit_s + (steps + 1) / rate_per_s)
        return until

    def _decide(self, job: Job) -> None:
        key = (job.tenant, job.gpu_profile, job.job_class, job.interruptible, job.gpu_types, job.required_nodes,
               job.excluded_nodes)
        kind = self._kinds.get(key)
        if kind is None:
            candidates = self._candidates(job)
            states = self.snapshot.node_states
            awake = [g for g in candidates if g.node not in states or states[g.node].schedulable]
            shares = list(dict.fromkeys((g.model, self._units(g, job.gpu_profile)) for g in candidates))
            kind = (candidates, awake, shares)
            if self.memo:
                self._kinds[key] = kind
        candidates, awake, shares = kind
        if not candidates:
            self._wait(job, WaitReason.NO_MODEL, (), f"no GPU offers {job.gpu_profile} to a {job.job_class} job")
            return
        problems = [self.ledger.admission_problem(job, model, units) for model, units in shares]
        if all(p is not None for p in problems):
            self._wait(job, WaitReason.QUOTA, candidates, next(p for p in problems if p is not None))
            return
        memory = self._memory_problem(job, candidates)
        if memory is not None:
            self._wait(job, WaitReason.QUOTA, candidates, memory)
            return
        full = self._full.get(key)
        if full is not None:  # an earlier job alike found no room: capacity and quota only shrink in a cycle
            self.result.waits[job.job_id] = full
            return
        if job.gpu_profile == TIMESLICE:
            placed = self._timeslice(job, awake)
        else:
            placed = self._mig(job, awake)
        if not placed:
            self._wake_or_wait(job, candidates)
            if self.memo:
                self._full[key] = self.result.waits[job.job_id]

    def _admits(self, job: Job, gpu: SharedGpu) -> bool:
        return self.ledger.admission_problem(job, gpu.model, self._units(gpu, job.gpu_profile)) is None and (
            self.ledger.tenant(job.tenant).max_gpu_memory_gb is None or self._memory_problem(job, (gpu,)) is None)

    def _memory_problem(self, job: Job, gpus: Sequence[SharedGpu]) -> str | None:
        """Why the job's GPU memory (its request, or its share of the GPU's) would break its tenant's memory cap
        on every one of `gpus`, or None (no cap, or one fits)."""
        if self.ledger.tenant(job.tenant).max_gpu_memory_gb is None:
            return None
        problems = [self.ledger.memory_problem(job, self.ledger.job_memory_gb(
            job, (g.node,), {g.node: self._units(g, job.gpu_profile)})) for g in gpus]
        return None if any(p is None for p in problems) else problems[0]

    def _timeslice(self, job: Job, awake: Sequence[SharedGpu]) -> bool:
        used = self.use.replicas_used
        free = [(g.replicas - used.get(g.key, 0), g.node_index, g.gpu_index, g) for g in awake
                if used.get(g.key, 0) < g.replicas and self._admits(job, g)]
        if not free:
            return False
        self._place(job, min(free, key=lambda entry: entry[:3])[3], TIMESLICE)
        return True

    def _mig(self, job: Job, awake: Sequence[SharedGpu]) -> bool:
        profile = job.gpu_profile
        fitting: list[tuple[int, int, int, str, SharedGpu]] = []
        for gpu in awake:
            assert gpu.family is not None
            partition = partition_of(self.snapshot, gpu.key)
            if partition.ready_s > self.now_s or gpu.key in self.ordered or not self._admits(job, gpu):
                continue  # reconfiguring, or repartitioned this cycle: its old instances are gone
            used = self.use.instances_used.get(gpu.key, set())
            free = [i for i in partition.instances if i not in used]
            mine = sorted((i for i in free if parse_instance(i)[0] == profile), key=lambda i: parse_instance(i)[1])
            if mine:
                spare = sum(gpu.family.profiles[parse_instance(i)[0]].compute for i in free)
                fitting.append((spare, gpu.node_index, gpu.gpu_index, mine[0], gpu))
        if fitting:
            best = min(fitting, key=lambda entry: entry[:3])
            self._place(job, best[4], best[3])
            return True
        for gpu in awake:  # a partition being made may hold it: wait for it rather than repartition another GPU
            coming = self.coming.get(gpu.key)
            if coming and any(parse_instance(i)[0] == profile for i in coming) and self._admits(job, gpu):
                coming.remove(next(i for i in coming if parse_instance(i)[0] == profile))
                self.order_dependent = True
                self._wait(job, WaitReason.CAPACITY, (gpu,), f"MIG GPU {gpu.node}:{gpu.gpu_index} repartitioning")
                return True
        empty = [((g.node not in self.busy_nodes), g.node_index, g.gpu_index, g) for g in awake
                 if g.key not in self.coming and not self.use.instances_used.get(g.key)
                 and partition_of(self.snapshot, g.key).ready_s <= self.now_s and self._admits(job, g)]
        if not empty:
            return False
        gpu = min(empty, key=lambda entry: entry[:3])[3]
        assert gpu.family is not None
        instances = partition_for(gpu.family, profile, gpu.profiles)
        self.result.actions.append(PartitionGpu(gpu.node, gpu.gpu_index, instances,
                                                f"{profile} for {job.job_id}"))
        self.ordered.add(gpu.key)
        self._full.clear()  # instances coming: a kind that found no room may find one now
        coming_now = list(instances)
        coming_now.remove(next(i for i in coming_now if parse_instance(i)[0] == profile))
        self.coming[gpu.key] = coming_now
        self._wait(job, WaitReason.CAPACITY, (gpu,), f"MIG GPU {gpu.node}:{gpu.gpu_index} repartitioning")
        return True

    def _wake_or_wait(self, job: Job, candidates: Sequence[SharedGpu]) -> None:
        states = self.snapshot.node_states
        waking = [g for g in candidates if g.node in states and states[g.node].power is PowerState.WAKING]
        asleep = [g for g in candidates if g.node in states and states[g.node].power is PowerState.ASLEEP
                  and not states[g.node].drained and not states[g.node].failing_gpus]
        if waking or any(g.node in self.woken for g in asleep):
            self._wait(job, WaitReason.WAKE, waking or [g for g in asleep if g.node in self.woken])
            return
        if asleep:
            gpu = min(asleep, key=lambda g: (g.node_index, g.gpu_index))
            self.woken.add(gpu.node)
            self._full.clear()  # a kind's wake wait names the woken nodes
            self.result.actions.append(WakeNode(gpu.node, f"needed by {job.job_id}"))
            self._wait(job, WaitReason.WAKE, (gpu,))
            return
        self._wait(job, WaitReason.CAPACITY, candidates)


def schedule_shared(snapshot: ClusterSnapshot, policy: SchedulerPolicy, pending: Sequence[PendingJob],
                    main_actions: Sequence[Action], memo: bool = True,
                    memory: SchedulerMemory | None = None) -> SharedDecisions:
    """The shared pass over `pending` (the jobs with a `gpu_profile`), after the main pass's `main_actions`."""
    return _SharedPass(snapshot, policy, main_actions, memo, memory).run(pending)


def split_shared(snapshot: ClusterSnapshot, memory: SchedulerMemory | None = None,
                 ) -> tuple[ClusterSnapshot, tuple[PendingJob, ...]]:
    """The snapshot the main pass sees (the queue without `gpu_profile` jobs) and those jobs, for a cluster with
    shared GPUs; `snapshot` unchanged and () otherwise, at no cost. The split queue is kept in `memory` for the
    same queue object, so the main pass's books kept by identity hold between cycles."""
    if not shared_gpus(snapshot.cluster, memory):
        return snapshot, ()
    shared = tuple(p for p in snapshot.pending if p.job.gpu_profile)
    if not shared:
        return snapshot, ()
    kept = _kept_pending(snapshot.pending, memory)
    return replace(snapshot, pending=kept), shared


def _kept_pending(pending: tuple[PendingJob, ...], memory: SchedulerMemory | None) -> tuple[PendingJob, ...]:
    memo = memory.kept_pending if memory is not None else None
    if memo is not None and memo[0] is pending:
        return memo[1]
    kept = tuple(p for p in pending if not p.job.gpu_profile)
    if memory is not None:
        memory.kept_pending = (pending, kept)
    return kept
