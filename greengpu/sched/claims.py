"""Lend idle GPUs only where they will not be taken back at once: the claims of waiting jobs that may reclaim.

A tenant above its nominal quota borrows GPUs other tenants are guaranteed, and a waiting job of a
tenant within its nominal quota (a claimant) may take them back (greengpu.sched.preemption). A borrower
that starts after the claimant came weighs nothing in the claimant's reclaim (it took GPUs the
claimant's quota guaranteed: `reclaim_pays`), so where the claimant would fit once such borrowers are
gone, it stops them as soon as they have run `min_runtime_s`, with everything they did since lost.
Under overload that was most of the churn: on the stress scenarios most victims were borrowers that
had started while the job that stopped them was already waiting, usually behind them in the queue (an
older borrower's age boost puts it first), so it took the GPU minutes before the claimant took it back
(docs/SCHEDULER.md, "Lending").

So a borrower does not start on a node *owed* to a claimant: a node where the smallest waiting job of
a tenant within its nominal quota (with that job; another tenant's) would fit on the free GPUs plus
the GPUs of jobs it could take back at no cost (jobs of other tenants above their nominal quota that
started after that tenant's oldest waiting job came). The borrower starts elsewhere if it fits, or
waits; the claimant, wherever it is in the queue, starts on the free GPUs or reclaims the node from
the borrowers that were already there. Jobs within their own tenant's nominal quota are never held
back. (Every borrower is, however short: jobs alike but for their duration are decided alike,
greengpu.sched.cycle.alike `wait_alike`.)

Pure: reads the cycle's free-GPU index, quota ledger and jobs.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Hashable, Iterable, Mapping
from dataclasses import dataclass

from greengpu.model import GPU_UNITS, Job, RunningJob
from greengpu.sched.quota import QuotaLedger
from greengpu.sched.state import PlacementState


@dataclass(frozen=True)
class Claimant:
    """A tenant's smallest waiting job, and when its oldest waiting job came."""

    job: Job
    first_submit_s: float


def claimants_of(jobs: Iterable[Job], first_submit_s: dict[str, float] | None = None) -> dict[str, Claimant]:
    """Per tenant with waiting jobs: its smallest request (the shortest, then the lowest id, among equals) and
    its oldest job's submit time (from `first_submit_s` when given: then `jobs` need only hold each kind's
    shortest job)."""
    smallest: dict[str, Job] = {}
    first: dict[str, float] = {}
    for job in jobs:
        tenant = job.tenant
        known = smallest.get(tenant)
        if known is None or (job.units, job.duration_s, job.job_id) < (known.units, known.duration_s, known.job_id):
            smallest[tenant] = job
        if first_submit_s is None and job.submit_time_s < first.get(tenant, float("inf")):
            first[tenant] = job.submit_time_s
    firsts = first if first_submit_s is None else first_submit_s
    return {tenant: Claimant(job, firsts[tenant]) for tenant, job in smallest.items()}


class Claims:
    """Which nodes are owed to claimants in this cycle (judged per node when a borrower would use it, again
    after each start, stop or promise: a claimant that started claims no more). Every answer is found anew;
    greengpu.sched.claims_kept.KeptClaims gives the same answers for the cost of what changed."""

    def __init__(self, state: PlacementState, ledger: QuotaLedger, claimants: Callable[[], dict[str, Claimant]],
                 may_reclaim: Callable[[Job, str], bool], running_on_node: Mapping[int, Mapping[str, RunningJob]],
                 started: list[RunningJob], stopping: set[str],
                 changes: Callable[[], Hashable] = lambda: None) -> None:
        self.state = state
        self.ledger = ledger
        self._claimants_of = claimants
        """The waiting jobs' claimants, less those the cycle started (read when a borrower asks)."""
        self._may_reclaim = may_reclaim
        """Whether a job may reclaim lent GPUs of a model (its tenant within nominal quota, counting the
        reclaims under way): greengpu.sched.preemption.VictimFinder.reclaims_within_nominal."""
        self._claimants: dict[str, Claimant] | None = None
        self._running_on_node = running_on_node
        """Per node index, the jobs running on it at the start of the cycle (kept by the remembered books)."""
        self._started = started
        """The cycle's own starts so far (the list grows as the cycle admits jobs)."""
        self._indexed_started = 0
        self._stopping = stopping
        self._started_on_node: dict[int, list[RunningJob]] = {}
        self._owed: dict[tuple[int, str], bool] = {}
        self._owed_sets: dict[tuple[str, tuple[str, ...]], set[int]] = {}
        self._changes = changes
        """What else the answers read that the cycle changes: jobs asked to stop, GPUs promised to reclaims, GPUs
        released (greengpu.sched.cycle.lending `_claims_token`)."""
        self._as_of: tuple[int, Hashable] = (0, changes())
        """How many jobs the cycle had started, and `changes()`, when the claimants and answers were found."""

    def _refresh(self) -> None:
        """Forget the claimants and the answers once the cycle has started another job (a claimant may have
        started, the next of its tenant's jobs claims, if any still fits its quota, and free GPUs changed), asked
        one to stop, promised GPUs to a reclaim or released GPUs."""
        as_of = (len(self._started), self._changes())
        if self._as_of != as_of:
            self._as_of = as_of
            self._claimants = None
            self._owed.clear()
            self._owed_sets.clear()

    def owed_to_others(self, node: int, tenant: str) -> bool:
        """Whether `node` is owed to a claimant of a tenant other than `tenant` (remembered until the cycle
        changes what it reads)."""
        self._refresh()
        key = (node, tenant)
        found = self._owed.get(key)
        if found is None:
            found = self._owed[key] = self._owed_now(node, tenant)
        return found

    def owed_nodes(self, tenant: str, models: tuple[str, ...]) -> set[int]:
        """The nodes of `models` with free GPUs that are owed to claimants of tenants other than `tenant`
        (where a borrower of `tenant` could otherwise start)."""
        self._refresh()
        found = self._owed_sets.get((tenant, models))
        if found is None:  # remembered like each node's answer
            state = self.state
            found = self._owed_sets[(tenant, models)] = {
                node for model in models if model in state.buckets for node in state.nodes_with_free_gpus(model)
                if self.owed_to_others(node, tenant)}
        return found

    def _owed_now(self, node: int, tenant: str) -> bool:
        if self._claimants is None:
            self._claimants = self._claimants_of()
        model = self.state.model[node]
        for claimant_tenant, claimant in self._claimants.items():
            if claimant_tenant == tenant:
                continue
            job = claimant.job
            if job.gpu_types is not None and model not in job.gpu_types:
                continue
            if not self._may_reclaim(job, model):
                continue
            if self._fits_once_reclaimed(node, claimant):
                return True
        return False

    def _fits_once_reclaimed(self, node: int, claimant: Claimant) -> bool:
        """Whether the claimant's job fits on `node` once the jobs it could take back at no cost are gone."""
        job = claimant.job
        state = self.state
        free = list(state.gpu_free[node])
        name = state.names[node]
        model = state.model[node]
        for running in self._jobs_on(node):
            rjob = running.job
            if rjob.tenant == job.tenant or not rjob.interruptible or rjob.job_id in self._stopping:
                continue
            if running.start_time_s < claimant.first_submit_s:
                continue  # it was there first: a reclaim of it is weighed against its work (reclaim_pays)
            if self.ledger.over_nominal_units(rjob.tenant, model) <= 0:
                continue
            for slot in running.slots:
                if slot.node == name:
                    free[slot.gpu_index] += slot.units
        if job.is_fractional:
            return any(f >= job.units for f in free)
        need = min(job.whole_gpus, state.size[node]) if job.gpus_per_node is None else job.gpus_per_node
        return sum(1 for f in free if f >= GPU_UNITS) >= need

    def _jobs_on(self, node: int) -> Iterable[RunningJob]:
        if self._indexed_started < len(self._started):
            index = self.state.index
            for running in self._started[self._indexed_started:]:
                for name in running.nodes:
                    where = index.get(name)
                    if where is not None:
                        self._started_on_node.setdefault(where, []).append(running)
            self._indexed_started = len(self._started)
        there = self._running_on_node.get(node, {})
        started = self._started_on_node.get(node)
        return itertools.chain(there.values(), started) if started else there.values()
