"""Checkpoint-aware preemption: the smallest set of eligible victims that lets a pending job fit.

A running job may be a victim of pending job J only if all of these hold:
- it can be interrupted, has run at least `min_runtime_s`, was preempted fewer than
  `max_per_job_per_hour` times in the last hour, and is not already being stopped;
- it did not itself preempt J before (no ping-pong);
- either it belongs to J's tenant and has lower priority, or its tenant is above its nominal
  quota (borrowing) and J has higher priority or J's tenant is reclaiming its own nominal quota.

Quotas are counted net of preemptions already under way (a victim keeps its GPUs, and its job's
tenant keeps them on the books, until its checkpoint grace runs out): a lender is never pushed
below its nominal quota by all the evictions in flight together, and a tenant reclaims only while
its running jobs, plus the jobs that already have victims stopping for them, plus J fit inside its
nominal quota. Without this, every search during a grace saw the same surplus: two reclaims each
took a lender's last borrowed GPUs (leaving it under its quota, so it reclaimed from a third
tenant in turn), and a tenant with a few GPUs of quota left stopped a victim for each of dozens of
waiting one-GPU jobs, ending far above its quota and the first to be reclaimed from in turn.

Victims are ranked by priority, then by the work they would lose (GPU-seconds since their last
checkpoint) or, for comparison, newest first. Gangs are evicted whole: a victim frees every slot
it holds, and the work it would lose is counted on all of its GPUs. The chosen set is pruned until
removing any victim would stop J from fitting.

A reclaim must be worth its cost (`reclaim_pays`). When J takes a set as quota (it does not outrank
every victim by priority), the set is stopped only if the work it destroys, the victims' GPU-seconds
since their last checkpoints (a gang's on all its GPUs), is less than what J gains: its GPUs times how
much sooner it starts than if it waited for the GPUs that free up on their own, less the checkpoint
grace it waits either way. Without preemption J would start once (a) the running jobs' expected ends
free GPUs in the shape it needs, and (b) the GPUs freed in all have served the jobs waiting since
before J (older jobs go first: the age boost), whichever is later. So a one-GPU job does not stop a
32-GPU gang hours old when a GPU frees up within the hour, and nobody is stopped for GPUs that free up
within the grace; under sustained overload, where the queue ahead takes every GPU that frees up, J
still reclaims. The quota guarantee keeps a bound: J reclaims whatever it costs once its GPUs, waiting
since its submission, have missed as much GPU-time as its victims had unsaved when it was submitted
(at once for victims that started after it came: they took GPUs its quota guaranteed). Inference and
interactive jobs, and jobs with a deadline, are not weighed: their wait is what they are judged by.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Collection, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from operator import attrgetter

from greengpu.model import GPU_UNITS, Job, PendingJob, RunningJob
from greengpu.policy import PreemptionPolicy
from greengpu.sched.placement import allowed_models, chunks_for, place
from greengpu.sched.quota import ANY_MODEL, QuotaLedger
from greengpu.sched.state import PlacementState

HOUR_S = 3600.0
_PRIORITY = attrgetter("job.priority")
WAIT_SENSITIVE_CLASSES = frozenset({"inference", "interactive"})
"""Job classes whose wait is what they are judged by (a person or a service waits): they reclaim without
weighing, as does a job with a deadline."""


def last_checkpoint_s(victim: RunningJob, now_s: float) -> float:
    """The time of the victim's last checkpoint (its start when it never checkpointed)."""
    start = victim.start_time_s
    if victim.last_checkpoint_s is not None:
        return max(start, min(victim.last_checkpoint_s, now_s))
    interval = victim.job.checkpoint_interval_s
    if interval:
        return start + math.floor(max(0.0, now_s - start) / interval) * interval
    return start


def lost_gpu_s(victim: RunningJob, now_s: float) -> float:
    """GPU-seconds of work the victim would redo if stopped now."""
    return max(0.0, now_s - last_checkpoint_s(victim, now_s)) * victim.job.gpus


def victim_rank(victim: RunningJob, now_s: float, order: str) -> tuple[float, float, str]:
    """Sort key: lower priority first, then least work lost (or newest first)."""
    if order == "newest-first":
        return (victim.job.priority, -victim.start_time_s, victim.job.job_id)
    return (victim.job.priority, lost_gpu_s(victim, now_s), victim.job.job_id)


_NodeEnd = tuple[float, str, tuple[tuple[int, int], ...]]
"""A running job's expected end on one node: (end, job id, ((GPU index, units), ...))."""


def free_after_s(free_units: Sequence[int], need: int, fractional: bool, ends: Sequence[_NodeEnd],
                 skip: Collection[str] = ()) -> float | None:
    """When a node's GPUs fit a request on their own: `need` whole free GPUs (or, fractional, one GPU with
    `need` free units), as its running jobs end in `ends` (earliest first; jobs in `skip` free nothing);
    -inf when they fit now, None when not even after they all end."""
    free = list(free_units)

    def fits() -> bool:
        return any(f >= need for f in free) if fractional else free.count(GPU_UNITS) >= need

    if fits():
        return -math.inf
    for end_s, job_id, held in ends:
        if job_id in skip:
            continue
        for index, units in held:
            free[index] += units
        if fits():
            return end_s
    return None


@dataclass(frozen=True)
class VictimChoice:
    """The victims chosen for one pending job and the nodes they free."""

    victims: tuple[RunningJob, ...]
    nodes: frozenset[int]
    lost_gpu_s: float


_GROUPED: list[tuple[tuple[RunningJob, ...], dict[str, list[RunningJob]], dict[str, int]]] = []
"""The last running tuple grouped by tenant, with the tenants' lowest priorities found so far: a body that
changes nothing between cycles passes the same tuple again (the simulator does), and regrouping every
running job was about 6% of a replay."""


def _grouped(running: Sequence[RunningJob]) -> tuple[dict[str, list[RunningJob]], dict[str, int]]:
    if _GROUPED and _GROUPED[0][0] is running:
        return _GROUPED[0][1], _GROUPED[0][2]
    grouped: dict[str, list[RunningJob]] = {}
    for job in running:
        grouped.setdefault(job.job.tenant, []).append(job)
    lowest: dict[str, int] = {}
    if isinstance(running, tuple):  # immutable: the same object is the same jobs
        _GROUPED[:] = [(running, grouped, lowest)]
    return grouped, lowest


def running_by_tenant(running: Sequence[RunningJob]) -> dict[str, list[RunningJob]]:
    """`running` grouped by tenant, in order (read-only: the lists may be shared with later cycles)."""
    return _grouped(running)[0]


class VictimFinder:
    """Finds minimal victim sets within one scheduling cycle."""

    def __init__(self, state: PlacementState, ledger: QuotaLedger, policy: PreemptionPolicy, now_s: float,
                 running: Sequence[RunningJob], pending: Sequence[PendingJob] = (), memo_searches: bool = True,
                 lowest_priority_anywhere: float | None = None, ahead_memo: list[object] | None = None) -> None:
        self.state = state
        self._ahead_memo = ahead_memo
        """[pending, submit times, cumulative units] of the last queue weighed, kept by the caller between cycles
        (`_ahead`): the queue of a saturated cluster is mostly the same from one cycle to the next."""
        self.ledger = ledger
        self.policy = policy
        self.now_s = now_s
        self.running = running
        self.pending = pending
        """The cycle's waiting jobs: whose tenant each earlier preemption still under way serves."""
        self.stopping: set[str] = set()
        """Jobs already asked to stop (earlier cycles or this one)."""
        self._in_flight: tuple[int, dict[tuple[str, str], int], dict[tuple[str, str], int]] | None = None
        self._promised_now: dict[tuple[str, str], int] = {}
        """Per (tenant, quota key), milli-GPUs promised by this cycle's preemptions to their beneficiaries."""
        self._by_tenant: dict[str, list[RunningJob]] | None = None
        self._lowest_running: dict[str, int] = {}
        """Per tenant, the lowest priority among its running jobs (filled with _by_tenant)."""
        self._lowest_any = lowest_priority_anywhere
        """The lowest priority among `running` (given by a caller that keeps it, else found when first asked)."""
        self.read_clock = False
        """Whether a search went past the checks that read no clock (victims' ages and lost work, the time a
        claimant has waited): its answer may differ a moment later (greengpu.sched.steady)."""
        self.memo_searches = memo_searches
        """Whether searches are remembered for claimants alike (see _search_key)."""
        self._searched: dict[Hashable, tuple[tuple[RunningJob, ...], frozenset[int]] | None] = {}
        self._searched_token: tuple[int, int, int] = (-1, -1, -1)
        self._promises = 0
        """How many times `_promised_now` grew."""
        self._ranks: dict[int, tuple[RunningJob, tuple[float, float, str]]] = {}
        self._lost: dict[int, tuple[RunningJob, float]] = {}
        """Per running job (by id: the cycle's objects), its victim rank and the work it would lose now."""
        self._over: set[str] = set()
        self._over_version = -1
        self._yielding_cache: dict[str, list[RunningJob]] = {}
        self._lowest_priority: dict[str, int] = {}
        """Per tenant, the lowest priority among its jobs that may yield (filled with _yielding_cache)."""
        self._ends: dict[int, list[_NodeEnd]] | None = None
        """Per node, the running jobs' expected ends still to come (built on the first reclaim weighed)."""
        self._queue: tuple[list[float], list[int], list[tuple[float, int]], int] | None = None
        """The waiting jobs' submit times and cumulative GPUs, the running jobs' ends and GPUs, the free GPUs."""

    @property
    def promised_now(self) -> Mapping[tuple[str, str], int]:
        """Per (tenant, quota key), milli-GPUs promised by this cycle's preemptions (read-only view)."""
        return self._promised_now

    @property
    def promises(self) -> int:
        """How many times this cycle's preemptions promised GPUs to their beneficiaries' tenants."""
        return self._promises

    def _model_of(self, victim: RunningJob) -> str:
        node = self.state.index.get(victim.slots[0].node) if victim.slots else None
        return self.state.model[node] if node is not None else ""

    def _quota_key(self, tenant: str, model: str) -> tuple[str, str]:
        return (tenant, self.ledger.key(self.ledger.tenant(tenant), model))

    def _still_charged(self, victim: RunningJob) -> bool:
        """Whether a job asked to stop still counts against its tenant's quota in this cycle's ledger:
        the core kills (and uncharges) a victim at the start of the cycle in which its grace runs out,
        or at once when there is no grace; until then it runs and holds its GPUs."""
        grace_s = self.policy.grace_s
        if grace_s <= 0:
            return False
        signalled_s = victim.preempt_signalled_s
        return signalled_s is None or self.now_s < signalled_s + grace_s

    def _preemptions_in_flight(self) -> tuple[dict[tuple[str, str], int], dict[tuple[str, str], int]]:
        """Per (tenant, quota key): the milli-GPUs of its jobs asked to stop that still count against it
        (leaving), and those promised to its waiting jobs by the preemptions still under way (coming).
        Recomputed only when another job has been asked to stop (the set only grows within a cycle)."""
        if self._in_flight is not None and self._in_flight[0] == len(self.stopping):
            leaving, coming = self._in_flight[1], self._in_flight[2]
        else:
            leaving, coming = {}, {}
            beneficiaries: dict[str, str] = {}
            if self.stopping:
                for victim in self.running:
                    if victim.job.job_id not in self.stopping or not self._still_charged(victim):
                        continue
                    vjob = victim.job
                    if self.ledger.tenant(vjob.tenant).quota_gpus_by_model:
                        for node, units in victim.units_by_node.items():
                            key = (vjob.tenant, self.ledger.model_of_node.get(node, ""))
                            leaving[key] = leaving.get(key, 0) + units
                    else:
                        key = (vjob.tenant, ANY_MODEL)
                        leaving[key] = leaving.get(key, 0) + vjob.units
                    if victim.preempted_for is not None:  # signalled in an earlier cycle
                        beneficiaries.setdefault(victim.preempted_for, self._model_of(victim))
            if beneficiaries:
                for waiting in self.pending:
                    model = beneficiaries.get(waiting.job.job_id)
                    if model is not None:
                        key = self._quota_key(waiting.job.tenant, model)
                        coming[key] = coming.get(key, 0) + waiting.job.units
            self._in_flight = (len(self.stopping), leaving, coming)
        return leaving, coming

    def over_nominal_units(self, tenant: str, model: str) -> int:
        """How far the tenant stays above its nominal quota once its jobs already asked to stop are gone."""
        leaving, _ = self._preemptions_in_flight()
        return max(0, self.ledger.over_nominal_units(tenant, model) - leaving.get(self._quota_key(tenant, model), 0))

    def reclaims_within_nominal(self, job: Job, model: str) -> bool:
        """Whether the job, with its tenant's running jobs and the jobs that already have victims
        stopping for them, fits inside the tenant's nominal quota: only then may it reclaim lent GPUs."""
        _, coming = self._preemptions_in_flight()
        key = self._quota_key(job.tenant, model)
        promised = coming.get(key, 0) + self._promised_now.get(key, 0)
        return self.ledger.within_nominal_after(job, model, job.units + promised)

    def _may_ever_yield(self, victim: RunningJob) -> bool:
        """The checks that do not depend on the pending job (cached per tenant for the cycle)."""
        vjob = victim.job
        policy = self.policy
        if vjob.gpu_profile:
            return False  # a MIG instance or replica frees nothing the main pass's jobs could use
        if victim.preempt_signalled_s is not None or not vjob.interruptible:
            return False
        if self.now_s - victim.start_time_s < policy.min_runtime_s:
            return False
        if not victim.preemptions:  # the common case, without a generator per running job
            return policy.max_per_job_per_hour > 0
        recent = sum(1 for r in victim.preemptions if self.now_s - r.time_s < HOUR_S)
        return recent < policy.max_per_job_per_hour

    def _fits_on_node(self, node: int, job: Job, count: int, released: Iterable[RunningJob]) -> bool:
        free = list(self.state.gpu_free[node])
        name = self.state.names[node]
        for victim in released:
            for slot in victim.slots:
                if slot.node == name:
                    free[slot.gpu_index] += slot.units
        if job.is_fractional:
            return any(f >= job.units for f in free)
        return sum(1 for f in free if f == GPU_UNITS) >= count

    def _node_victims(self, node: int, job: Job, count: int, candidates: list[RunningJob],
                      over_nominal: dict[tuple[str, str], int]) -> list[RunningJob] | None:
        """Greedy by rank until the job fits on `node`, then drop every victim not needed.

        The node's free units are kept up to date as victims are added and dropped: the same answers as
        rebuilding them for each trial set (`_fits_on_node`), without the quadratic work."""
        if self._fits_on_node(node, job, count, ()):
            return []
        name = self.state.names[node]
        free = list(self.state.gpu_free[node])
        fractional, need_units = job.is_fractional, job.units
        chosen: list[RunningJob] = []
        held: list[list[tuple[int, int]]] = []
        over: dict[str, int] = {}
        for victim in candidates:
            tenant = victim.job.tenant
            if tenant != job.tenant:
                # Never push a lending tenant below its nominal quota by this eviction set.
                if tenant not in over:
                    key = (tenant, self._model_of(victim))
                    if key not in over_nominal:  # the ledger does not change during one search
                        over_nominal[key] = self.over_nominal_units(*key)
                    over[tenant] = over_nominal[key]
                if over[tenant] <= 0:
                    continue
                over[tenant] -= victim.job.units
            here = [(s.gpu_index, s.units) for s in victim.slots if s.node == name]
            chosen.append(victim)
            held.append(here)
            for index, units in here:
                free[index] += units
            if (any(f >= need_units for f in free) if fractional else free.count(GPU_UNITS) >= count):
                break
        else:
            return None
        keep = [True] * len(chosen)
        for position in range(len(chosen) - 1, -1, -1):
            for index, units in held[position]:
                free[index] -= units
            if (any(f >= need_units for f in free) if fractional else free.count(GPU_UNITS) >= count):
                keep[position] = False
            else:
                for index, units in held[position]:
                    free[index] += units
        return [victim for victim, kept in zip(chosen, keep, strict=True) if kept]

    def find(self, pending: PendingJob, excluded: Collection[int]) -> VictimChoice | None:
        """The cheapest eligible victim set that lets `pending` fit, or None."""
        job = pending.job
        state = self.state
        models = allowed_models(state, job)
        if not models:
            return None
        reclaiming = self.policy.reclaim and any(self.reclaims_within_nominal(job, m) for m in models)
        if not reclaiming and (not self.policy.priority_preemption or job.priority <= self._lowest_priority_anywhere()):
            return None  # no job yields to it by priority and it reclaims nothing: a saturated queue's usual search
        self.read_clock = True
        key = self._search_key(pending, excluded)
        if key is not None and key in self._searched:
            found = self._searched[key]
        else:
            found = self._fitting_set(pending, excluded, models, reclaiming)
            if key is not None:
                self._searched[key] = found
        if found is None:
            return None
        chosen, nodes = found
        if chosen and not self.reclaim_pays(pending, chosen, excluded, models):
            return None  # it waits for GPUs that free up soon enough on their own
        if chosen:  # the caller stops these victims for `job`: its tenant has these GPUs coming
            key = self._quota_key(job.tenant, self._model_of(chosen[0]))
            self._promised_now[key] = self._promised_now.get(key, 0) + job.units
            self._promises += 1
        return VictimChoice(chosen, nodes, sum(self._lost_now_gpu_s(v) for v in chosen))

    def _search_key(self, pending: PendingJob, excluded: Collection[int]) -> Hashable | None:
        """What `_fitting_set` reads of the claimant and the nodes it may not use, or None when searches are not
        remembered. A search finds the same set (or none) for another claimant alike in all of it while nothing
        it reads of the cycle has changed: the quota ledger, the jobs asked to stop and the GPUs promised (its
        free-GPU index changes only with the ledger). A saturated queue's head asks the same question for many
        claimants alike. `reclaim_pays` reads each claimant's own submit time and the queue ahead of it: its
        verdicts are not remembered (a set it turned down is weighed again for the next claimant)."""
        if not self.memo_searches:
            return None
        token = (self.ledger.version, len(self.stopping), self._promises)
        if token != self._searched_token:
            self._searched.clear()
            self._searched_token = token
        job = pending.job
        return (job.tenant, job.priority, job.gpu_types, job.gpus, job.units, job.gpus_per_node,
                frozenset(r.by_job_id for r in pending.preemptions), frozenset(excluded))

    def _fitting_set(self, pending: PendingJob, excluded: Collection[int], models: tuple[str, ...],
                     reclaiming: bool) -> tuple[tuple[RunningJob, ...], frozenset[int]] | None:
        """The cheapest eligible victim set after which `pending` fits, and the nodes it frees and the job
        would take; None when there is none. Reads nothing of the claimant but its tenant, priority,
        request and past preemptors (see `_search_key`)."""
        job = pending.job
        state = self.state
        # Only the job's own tenant and tenants above their nominal quota can lose jobs: look there.
        by_tenant = self._running_by_tenant()
        if self._over_version != self.ledger.version:
            self._over = self.ledger.tenants_over_nominal()
            self._over_version = self.ledger.version
        tenants = [t for t in by_tenant if t == job.tenant or t in self._over]
        eligible = self._eligible_victims(pending, tenants, by_tenant, reclaiming)
        if not eligible:
            return None
        eligible.sort(key=self._rank)
        per_node: dict[int, list[RunningJob]] = {}
        for victim in eligible:
            for name in victim.nodes:
                node = state.index.get(name)
                if node is not None and node not in excluded and state.schedulable[node] \
                        and state.model[node] in models:
                    per_node.setdefault(node, []).append(victim)
        best: tuple[tuple[float, ...], int, list[RunningJob]] | None = None
        scored: list[tuple[tuple[float, ...], int, list[RunningJob]]] = []
        multi_chunks = None
        if not job.is_fractional:
            for model in models:
                chunks = chunks_for(job, state.node_size_by_model[model])
                if chunks is not None and len(chunks) > 1:
                    multi_chunks = chunks
                    break
        count = max(multi_chunks) if multi_chunks else job.whole_gpus
        nodes = set(per_node)
        if multi_chunks:  # free nodes count too: a gang may combine them with evicted ones
            nodes |= {n for n in range(len(state.names)) if n not in excluded and state.schedulable[n]
                      and state.model[n] in models and state.free_whole[n] >= count}
        over_nominal: dict[tuple[str, str], int] = {}
        for node in sorted(nodes):
            victims = self._node_victims(node, job, count, per_node.get(node, []), over_nominal)
            if victims is None:
                continue
            score = self._score(victims)
            entry = (score, node, victims)
            scored.append(entry)
            if best is None or entry[:2] < best[:2]:
                best = entry
        if best is None:
            return None
        if multi_chunks is None:
            picked = [best]
        else:
            scored.sort(key=lambda e: (e[0], e[1]))
            picked = scored[: len(multi_chunks)]
            if len(picked) < len(multi_chunks):
                return None
        victims_by_id: dict[str, RunningJob] = {}
        for _, _, victims in picked:
            for victim in victims:
                victims_by_id[victim.job.job_id] = victim
        chosen = tuple(victims_by_id.values())
        freed_nodes = frozenset(state.index[n] for v in chosen for n in v.nodes if n in state.index)
        target_nodes = frozenset(node for _, node, _ in picked)
        if not self._fits_after(job, chosen, excluded, target_nodes):
            return None
        return chosen, freed_nodes | target_nodes

    def _outranks(self, job: Job, victim: RunningJob) -> bool:
        """Whether `job` may take `victim` by priority (not only as quota)."""
        return self.policy.priority_preemption and victim.job.priority < job.priority

    def reclaim_pays(self, pending: PendingJob, victims: Sequence[RunningJob], excluded: Collection[int],
                     models: Sequence[str]) -> bool:
        """Whether stopping `victims` for `pending` is worth the work it destroys (module docstring).

        A set the job takes by priority alone is always worth it (priority is the site's own word on whose
        work matters more). A set taken as quota is stopped when the work lost is less than the job's GPUs
        times the time it gains (its expected start without preemption, minus the checkpoint grace it waits
        either way), or once the job has waited as long as the bound: its GPUs, idle since it was submitted,
        have missed as much work as the victims had unsaved then."""
        job = pending.job
        if all(self._outranks(job, v) for v in victims):
            return True
        if job.job_class in WAIT_SENSITIVE_CLASSES or job.deadline_s is not None:
            return True  # its queue time is not ours to spend
        lost_s = sum(self._lost_now_gpu_s(v) for v in victims)
        if lost_s <= 0.0:
            return True
        gpus = job.units / GPU_UNITS
        waited_s = self.now_s - job.submit_time_s
        unsaved_when_submitted_s = sum(lost_gpu_s(v, job.submit_time_s) for v in victims
                                       if v.start_time_s < job.submit_time_s)
        if gpus * waited_s >= unsaved_when_submitted_s:  # the bound of the quota guarantee
            return True
        start_s = max(self.expected_start_s(job, excluded, models), self.queue_start_s(job))
        return gpus * (start_s - self.now_s - self.policy.grace_s) > lost_s

    def queue_start_s(self, job: Job) -> float:
        """When the GPUs that free up on their own have served the jobs waiting since before `job` and then
        `job` itself, counted in GPUs whatever their shape or model (the shape is `expected_start_s`'s part).

        Submission order stands for queue order here: the age boost puts older jobs first, and where a
        younger job goes first (higher priority, lower fair share) the estimate errs late, towards
        reclaiming as before. Built once per cycle, on the first reclaim weighed."""
        if self._queue is None:
            submitted, cumulative = self._ahead()
            freeing = sorted((r.expected_end_s, r.job.units) for r in self.running
                             if r.expected_end_s > self.now_s and r.preempt_signalled_s is None)
            free_units = sum(sum(self.state.gpu_free[n]) for n in range(len(self.state.names))
                             if self.state.schedulable[n])
            self._queue = (submitted, cumulative, freeing, free_units)
        submitted, cumulative, freeing, free_units = self._queue
        before = bisect.bisect_left(submitted, job.submit_time_s)
        demand = (cumulative[before - 1] if before else 0) + job.units - free_units
        if demand <= 0:
            return self.now_s
        for end_s, units in freeing:
            demand -= units
            if demand <= 0:
                return end_s
        return math.inf

    def _ahead(self) -> tuple[list[float], list[int]]:
        """The waiting jobs' submit times in order, and the milli-GPUs asked by those submitted up to each."""
        memo = self._ahead_memo
        if memo and memo[0] is self.pending:
            return memo[1], memo[2]  # type: ignore[return-value]
        ahead = sorted((p.job.submit_time_s, p.job.units) for p in self.pending)
        submitted, cumulative, total = [], [], 0
        for submit_s, units in ahead:
            total += units
            submitted.append(submit_s)
            cumulative.append(total)
        if memo is not None:
            memo[:] = [self.pending, submitted, cumulative]
        return submitted, cumulative

    def expected_start_s(self, job: Job, excluded: Collection[int], models: Sequence[str]) -> float:
        """When `job` could start if nobody were preempted: the earliest time the GPUs it needs come free on
        their own, from the running jobs' expected ends (infinite when the books expect none in time).

        Ends already past are not counted (a job running over its estimate frees nothing we can count on),
        nor are the GPUs of jobs already stopping (they go to the job they stop for)."""
        if self._ends is None:
            self._ends = {}
            index = self.state.index
            for running in self.running:
                if running.expected_end_s <= self.now_s:
                    continue
                by_node: dict[int, list[tuple[int, int]]] = {}
                for slot in running.slots:
                    node = index.get(slot.node)
                    if node is not None:
                        by_node.setdefault(node, []).append((slot.gpu_index, slot.units))
                for node, held in by_node.items():
                    self._ends.setdefault(node, []).append((running.expected_end_s, running.job.job_id, tuple(held)))
            for entries in self._ends.values():
                entries.sort()
        state = self.state
        best = math.inf
        for model in models:
            if job.is_fractional:
                chunks = [job.units]
            else:
                found = chunks_for(job, state.node_size_by_model[model])
                if found is None:
                    continue
                chunks = found
            need = max(chunks)
            times = []
            for node in range(len(state.names)):
                if state.model[node] != model or not state.schedulable[node] or node in excluded:
                    continue
                free_s = free_after_s(state.gpu_free[node], need, job.is_fractional, self._ends.get(node, ()),
                                      self.stopping)
                if free_s is not None:
                    times.append(free_s)
            if len(times) >= len(chunks):
                times.sort()
                best = min(best, max(self.now_s, times[len(chunks) - 1]))
        return best

    def outranks_own(self, job: Job) -> bool:
        """Whether some running job of the job's own tenant may yield to it by priority (cheap: per tenant)."""
        if not self.policy.priority_preemption:
            return False
        by_tenant = self._running_by_tenant()
        if job.tenant not in by_tenant or job.priority <= self._lowest_running_priority(job.tenant):
            return False  # the second: no job of its tenant is below it, whichever may yield
        self.read_clock = True  # which of them may yield moves with the clock (min_runtime_s, the hour's preemptions)
        return bool(self._yielding(job.tenant, by_tenant)) and job.priority > self._lowest_priority[job.tenant]

    def find_for_quota(self, pending: PendingJob, excluded: Collection[int]) -> VictimChoice | None:
        """The cheapest set of the job's own tenant's lower-priority jobs whose stop lets it start when
        its tenant's quota blocks it, or None.

        A tenant's higher-priority job preempts its lower-priority jobs when they are in its way, and
        they are in its way just as much when what they hold is the tenant's quota as when it is the
        GPUs (an interactive notebook waiting behind its own group's checkpointing training jobs). The
        victims are taken by rank until the job passes its quota and fits, then pruned."""
        job = pending.job
        if not self.outranks_own(job) or not allowed_models(self.state, job):
            return None  # (outranks_own has marked the clock read when it looked at the jobs that may yield)
        by_tenant = self._running_by_tenant()
        banned = {r.by_job_id for r in pending.preemptions}
        candidates = sorted((r for r in self._yielding(job.tenant, by_tenant)
                             if r.job.priority < job.priority and r.job.job_id not in self.stopping
                             and r.job.job_id not in banned),
                            key=self._rank)
        chosen: list[RunningJob] = []
        for victim in candidates:
            chosen.append(victim)
            if self._starts_without(job, chosen, excluded) is not None:
                break
        else:
            return None
        for victim in list(reversed(chosen)):
            trial = [v for v in chosen if v is not victim]
            if trial and self._starts_without(job, trial, excluded) is not None:
                chosen = trial
        nodes = self._starts_without(job, chosen, excluded) or frozenset()
        return VictimChoice(tuple(chosen), nodes, sum(lost_gpu_s(v, self.now_s) for v in chosen))

    def _starts_without(self, job: Job, victims: Sequence[RunningJob],
                        excluded: Collection[int]) -> frozenset[int] | None:
        """The nodes the job would start on once `victims` are gone (their GPUs and their quota given
        back), or None when it still could not: tried in the real index and ledger, then restored."""
        for victim in victims:
            self.state.release(victim.slots)
            self.ledger.charge(victim, -1)
        try:
            slots = place(self.state, job, excluded=excluded)
            if slots is None:
                return None
            model = self.state.model[self.state.index[slots[0].node]]
            if self.ledger.admission_problem(job, model, job.units) is not None:
                return None
            return frozenset(self.state.index[s.node] for s in slots)
        finally:
            for victim in victims:
                self.ledger.charge(victim, 1)
                self.state.allocate(victim.slots)

    def _eligible_victims(self, pending: PendingJob, tenants: list[str], by_tenant: dict[str, list[RunningJob]],
                          reclaiming: bool) -> list[RunningJob]:
        """The victims that may yield to `pending` (rules in the module docstring), checks hoisted per tenant."""
        job = pending.job
        policy = self.policy
        banned = {r.by_job_id for r in pending.preemptions}  # no ping-pong
        stopping = self.stopping
        by_priority = policy.priority_preemption
        take_any = policy.reclaim and reclaiming
        found: list[RunningJob] = []
        for tenant in tenants:
            if (tenant == job.tenant or not take_any) and \
                    (not by_priority or job.priority <= self._lowest_running_priority(tenant)):
                continue  # it yields only by priority, and none of its jobs is below the job's (the usual case)
            candidates = self._yielding(tenant, by_tenant)
            if tenant == job.tenant:
                if job.priority <= self._lowest_priority[tenant]:
                    continue  # (the usual case: a tenant's jobs of one priority never preempt each other)
                found.extend(r for r in candidates if r.job.priority < job.priority
                             and r.job.job_id not in stopping and r.job.job_id not in banned)
                continue
            per_model = bool(self.ledger.tenant(tenant).quota_gpus_by_model)
            if not per_model and self.over_nominal_units(tenant, "") <= 0:
                continue
            for victim in candidates:
                vjob = victim.job
                if vjob.job_id in stopping or vjob.job_id in banned:
                    continue
                if per_model and self.over_nominal_units(tenant, self._model_of(victim)) <= 0:
                    continue
                if take_any or (by_priority and vjob.priority < job.priority):
                    found.append(victim)
        return found

    def _yielding(self, tenant: str, by_tenant: dict[str, list[RunningJob]]) -> list[RunningJob]:
        found = self._yielding_cache.get(tenant)
        if found is None:
            found = self._yielding_cache[tenant] = [r for r in by_tenant[tenant] if self._may_ever_yield(r)]
            self._lowest_priority[tenant] = min((r.job.priority for r in found), default=0)
        return found

    def _running_by_tenant(self) -> dict[str, list[RunningJob]]:
        if self._by_tenant is None:
            self._by_tenant, self._lowest_running = _grouped(self.running)
        return self._by_tenant

    def _lowest_priority_anywhere(self) -> float:
        """The lowest priority among all running jobs (infinite when none runs), found once per cycle."""
        if self._lowest_any is None:
            self._lowest_any = min(map(_PRIORITY, self.running), default=math.inf)  # in C: asked every cycle
        return self._lowest_any

    def _lowest_running_priority(self, tenant: str) -> int:
        """The lowest priority among the tenant's running jobs (it has some). No job of the tenant can yield by
        priority to a job at or below it, whichever may yield: the victim search then skips the tenant without
        sorting that out (nearly every search of a saturated queue). Remembered with the grouping."""
        found = self._lowest_running.get(tenant)
        if found is None:
            found = self._lowest_running[tenant] = min(r.job.priority for r in self._running_by_tenant()[tenant])
        return found

    def _rank(self, victim: RunningJob) -> tuple[float, float, str]:
        """`victim_rank` now, remembered for the cycle (the clock does not move within it; every search
        sorts the same running jobs again)."""
        found = self._ranks.get(id(victim))
        if found is None or found[0] is not victim:  # (an id is another object's once the first is gone)
            found = self._ranks[id(victim)] = (victim, victim_rank(victim, self.now_s, self.policy.victim_order))
        return found[1]

    def _lost_now_gpu_s(self, victim: RunningJob) -> float:
        """`lost_gpu_s` now, remembered for the cycle like `_rank`."""
        found = self._lost.get(id(victim))
        if found is None or found[0] is not victim:
            found = self._lost[id(victim)] = (victim, lost_gpu_s(victim, self.now_s))
        return found[1]

    def _score(self, victims: list[RunningJob]) -> tuple[float, ...]:
        if not victims:
            return (-math.inf, 0, 0.0)
        top_priority = max(v.job.priority for v in victims)
        if self.policy.victim_order == "newest-first":
            return (top_priority, len(victims), -min(v.start_time_s for v in victims))
        # Least lost work means least lost work: one long job that never checkpointed can cost more
        # than several young ones. (Fewest victims first stopped 8-GPU jobs 50-85 hours old on the
        # stress scenarios: a handful of them were most of every policy's lost GPU-hours.)
        return (top_priority, sum(self._lost_now_gpu_s(v) for v in victims), len(victims))

    def _fits_after(self, job: Job, victims: tuple[RunningJob, ...], excluded: Collection[int],
                    nodes: frozenset[int]) -> bool:
        """Only when the job will then fit: check by releasing the victims in the real index."""
        for victim in victims:
            self.state.release(victim.slots)
        try:
            return place(self.state, job, excluded=excluded, only=nodes) is not None
        finally:
            for victim in victims:
                self.state.allocate(victim.slots)
