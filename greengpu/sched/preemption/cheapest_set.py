"""The victim strategy for priority preemption and quota reclaim: across every node, the cheapest eligible set of
running jobs whose stop lets the claimant fit (greengpu.sched.preemption, its docstring states who may yield)."""

from __future__ import annotations

import math
from collections.abc import Collection, Hashable, Iterable
from typing import TypeAlias

from greengpu.model import GPU_UNITS, Job, PendingJob, RunningJob
from greengpu.sched.placement import allowed_models, chunks_for, place
from greengpu.sched.preemption.eligibility import Eligibility
from greengpu.sched.preemption.reclaim_worth import ReclaimWorth
from greengpu.sched.preemption.rules import VictimChoice

Found: TypeAlias = tuple[tuple[RunningJob, ...], frozenset[int]] | None
"""A search's answer: the victims and the nodes they free and the claimant takes, or None."""
_Scored: TypeAlias = tuple[tuple[float, ...], int, list[RunningJob]]


class CheapestSetSearch:
    """Finds, for one claimant, the cheapest set of victims it may take by priority or as its own quota."""

    def __init__(self, books: Eligibility, worth: ReclaimWorth, memo_searches: bool = True) -> None:
        self.books = books
        self.worth = worth
        self.memo_searches = memo_searches
        """Whether searches are remembered for claimants alike (see _search_key)."""
        self._searched: dict[Hashable, Found] = {}
        self._searched_token: tuple[int, int, int] = (-1, -1, -1)

    def find(self, pending: PendingJob, excluded: Collection[int]) -> VictimChoice | None:
        """The cheapest eligible victim set that lets `pending` fit, or None."""
        job = pending.job
        books = self.books
        policy = books.policy
        models = allowed_models(books.state, job)
        if not models:
            return None
        reclaiming = policy.reclaim and any(books.reclaims_within_nominal(job, m) for m in models)
        if not reclaiming and (not policy.priority_preemption or job.priority <= books.lowest_priority_anywhere()):
            return None  # no job yields to it by priority and it reclaims nothing: a saturated queue's usual search
        books.read_clock = True
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
        if chosen and not self.worth.reclaim_pays(pending, chosen, excluded, models):
            return None  # it waits for GPUs that free up soon enough on their own
        if chosen:  # the caller stops these victims for `job`: its tenant has these GPUs coming
            books.promise(job, chosen[0])
        return VictimChoice(chosen, nodes, sum(books.lost_now_gpu_s(v) for v in chosen))

    def _search_key(self, pending: PendingJob, excluded: Collection[int]) -> Hashable | None:
        """What `_fitting_set` reads of the claimant and the nodes it may not use, or None when searches are not
        remembered. A search finds the same set (or none) for another claimant alike in all of it while nothing
        it reads of the cycle has changed: the quota ledger, the jobs asked to stop and the GPUs promised (its
        free-GPU index changes only with the ledger). A saturated queue's head asks the same question for many
        claimants alike. `reclaim_pays` reads each claimant's own submit time and the queue ahead of it: its
        verdicts are not remembered (a set it turned down is weighed again for the next claimant)."""
        if not self.memo_searches:
            return None
        books = self.books
        token = (books.ledger.version, len(books.stopping), books.promises)
        if token != self._searched_token:
            self._searched.clear()
            self._searched_token = token
        job = pending.job
        return (job.tenant, job.priority, job.gpu_types, job.gpus, job.units, job.gpus_per_node,
                frozenset(r.by_job_id for r in pending.preemptions), frozenset(excluded))

    def _fitting_set(self, pending: PendingJob, excluded: Collection[int], models: tuple[str, ...],
                     reclaiming: bool) -> Found:
        """The cheapest eligible victim set after which `pending` fits, and the nodes it frees and the job
        would take; None when there is none. Reads nothing of the claimant but its tenant, priority,
        request and past preemptors (see `_search_key`)."""
        job = pending.job
        state = self.books.state
        # Only the job's own tenant and tenants above their nominal quota can lose jobs: look there.
        by_tenant = self.books.running_by_tenant()
        over = self.books.tenants_over_nominal()
        tenants = [t for t in by_tenant if t == job.tenant or t in over]
        eligible = self._eligible_victims(pending, tenants, reclaiming)
        if not eligible:
            return None
        eligible.sort(key=self.books.rank)
        per_node: dict[int, list[RunningJob]] = {}
        for victim in eligible:
            for name in victim.nodes:
                node = state.index.get(name)
                if node is not None and node not in excluded and state.schedulable[node] \
                        and state.model[node] in models:
                    per_node.setdefault(node, []).append(victim)
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
        picked = self._pick_nodes(job, count, sorted(nodes), per_node, multi_chunks)
        if picked is None:
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

    def _pick_nodes(self, job: Job, count: int, nodes: list[int], per_node: dict[int, list[RunningJob]],
                    multi_chunks: list[int] | None) -> list[_Scored] | None:
        """The cheapest node (or, for a gang over several nodes, the cheapest nodes) and their victims."""
        best: _Scored | None = None
        scored: list[_Scored] = []
        over_nominal: dict[tuple[str, str], int] = {}
        for node in nodes:
            victims = self._node_victims(node, job, count, per_node.get(node, []), over_nominal)
            if victims is None:
                continue
            entry = (self._score(victims), node, victims)
            scored.append(entry)
            if best is None or entry[:2] < best[:2]:
                best = entry
        if best is None:
            return None
        if multi_chunks is None:
            return [best]
        scored.sort(key=lambda e: (e[0], e[1]))
        picked = scored[: len(multi_chunks)]
        return picked if len(picked) == len(multi_chunks) else None

    def _eligible_victims(self, pending: PendingJob, tenants: list[str], reclaiming: bool) -> list[RunningJob]:
        """The victims that may yield to `pending` (rules in the package docstring), checks hoisted per tenant."""
        job = pending.job
        books = self.books
        policy = books.policy
        banned = {r.by_job_id for r in pending.preemptions}  # no ping-pong
        stopping = books.stopping
        by_priority = policy.priority_preemption
        take_any = policy.reclaim and reclaiming
        found: list[RunningJob] = []
        for tenant in tenants:
            if (tenant == job.tenant or not take_any) and \
                    (not by_priority or job.priority <= books.lowest_running_priority(tenant)):
                continue  # it yields only by priority, and none of its jobs is below the job's (the usual case)
            candidates = books.yielding(tenant)
            if tenant == job.tenant:
                if job.priority <= books.lowest_yielding_priority(tenant):
                    continue  # (the usual case: a tenant's jobs of one priority never preempt each other)
                found.extend(r for r in candidates if r.job.priority < job.priority
                             and r.job.job_id not in stopping and r.job.job_id not in banned)
                continue
            per_model = bool(books.ledger.tenant(tenant).quota_gpus_by_model)
            if not per_model and books.over_nominal_units(tenant, "") <= 0:
                continue
            for victim in candidates:
                vjob = victim.job
                if vjob.job_id in stopping or vjob.job_id in banned:
                    continue
                if per_model and books.over_nominal_units(tenant, books.model_of(victim)) <= 0:
                    continue
                if take_any or (by_priority and vjob.priority < job.priority):
                    found.append(victim)
        return found

    def _fits_on_node(self, node: int, job: Job, count: int, released: Iterable[RunningJob]) -> bool:
        state = self.books.state
        free = list(state.gpu_free[node])
        name = state.names[node]
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
        books = self.books
        name = books.state.names[node]
        free = list(books.state.gpu_free[node])
        fractional, need_units = job.is_fractional, job.units
        chosen: list[RunningJob] = []
        held: list[list[tuple[int, int]]] = []
        over: dict[str, int] = {}
        for victim in candidates:
            tenant = victim.job.tenant
            if tenant != job.tenant:
                # Never push a lending tenant below its nominal quota by this eviction set.
                if tenant not in over:
                    key = (tenant, books.model_of(victim))
                    if key not in over_nominal:  # the ledger does not change during one search
                        over_nominal[key] = books.over_nominal_units(*key)
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

    def _score(self, victims: list[RunningJob]) -> tuple[float, ...]:
        if not victims:
            return (-math.inf, 0, 0.0)
        top_priority = max(v.job.priority for v in victims)
        if self.books.policy.victim_order == "newest-first":
            return (top_priority, len(victims), -min(v.start_time_s for v in victims))
        # Least lost work means least lost work: one long job that never checkpointed can cost more
        # than several young ones. (Fewest victims first stopped 8-GPU jobs 50-85 hours old on the
        # stress scenarios: a handful of them were most of every policy's lost GPU-hours.)
        return (top_priority, sum(self.books.lost_now_gpu_s(v) for v in victims), len(victims))

    def _fits_after(self, job: Job, victims: tuple[RunningJob, ...], excluded: Collection[int],
                    nodes: frozenset[int]) -> bool:
        """Only when the job will then fit: check by releasing the victims in the real index."""
        state = self.books.state
        for victim in victims:
            state.release(victim.slots)
        try:
            return place(state, job, excluded=excluded, only=nodes) is not None
        finally:
            for victim in victims:
                state.allocate(victim.slots)
