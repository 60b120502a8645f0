"""The lending rule's claimants as the kept lending answers follow them (greengpu.sched.claims_kept): each tenant's
claimant found from the kept queue among the jobs not started, and per model what the claimants need of a node.

A claimant is a tenant's smallest waiting job with its tenant's oldest job's submit time
(greengpu.sched.claims.claimants_of); `ClaimantFinder` finds one tenant's at a time, so a start costs the
lists of its own tenant, not of every tenant. `ClaimantNeeds` keeps a model's claimants sorted by what they
need on a node's free GPUs alone, so "the smallest need among the other tenants' claimants" is two look-ups.
"""

from __future__ import annotations

import math
from bisect import bisect_left, insort
from collections.abc import Callable, Collection, Hashable, Iterable, Mapping
from typing import Protocol

from greengpu.model import Job, PendingJob
from greengpu.sched.claims import Claimant

_Entry = tuple[float, str, PendingJob]
Profile = tuple[Claimant, tuple[str, ...], tuple[object, ...]]
"""A tenant's claimant, the models it may reclaim on, and all of it an answer reads (compared for changes)."""


class QueueByTenant(Protocol):
    """What the kept pending queue offers (greengpu.sched.pending_index.PendingIndex)."""

    @property
    def by_kind(self) -> Mapping[Hashable, list[_Entry]]: ...

    @property
    def by_priority(self) -> Mapping[tuple[float, str], list[_Entry]]: ...

    @property
    def kinds_of_tenant(self) -> Mapping[str, Mapping[Hashable, None]]: ...

    @property
    def levels_of_tenant(self) -> Mapping[str, Mapping[float, None]]: ...

    def smallest_waiting(self, tenant: str) -> Job | None: ...

    def oldest_submit_s(self, tenant: str) -> float: ...


class ClaimantNeeds:
    """What a model's claimants need of a node on its free GPUs alone, kept sorted as claimants come and go:
    whole-GPU needs (GPUs, tenant), the tenants whose need is capped by the node's size (no per-node count),
    fractional requests (milli-GPUs, tenant)."""

    def __init__(self) -> None:
        self.whole: list[tuple[int, str]] = []
        self.capped: set[str] = set()
        self.shares: list[tuple[int, str]] = []

    @staticmethod
    def _entry(tenant: str, job: Job) -> tuple[int, str]:
        if job.is_fractional:
            return (job.units, tenant)
        return (job.whole_gpus if job.gpus_per_node is None else job.gpus_per_node, tenant)

    def add(self, tenant: str, job: Job) -> None:
        insort(self.shares if job.is_fractional else self.whole, self._entry(tenant, job))
        if not job.is_fractional and job.gpus_per_node is None:
            self.capped.add(tenant)

    def remove(self, tenant: str, job: Job) -> None:
        entries = self.shares if job.is_fractional else self.whole
        del entries[bisect_left(entries, self._entry(tenant, job))]
        self.capped.discard(tenant)

    def others(self, tenant: str) -> tuple[int | None, bool, int | None]:
        """Of the claimants of tenants other than `tenant`: the smallest whole-GPU need, whether one's need is
        capped by the node's size, and the smallest fractional request."""
        need = next((gpus for gpus, other in self.whole[:2] if other != tenant), None)
        units = next((share for share, other in self.shares[:2] if other != tenant), None)
        capped = self.capped
        return need, len(capped) > 1 or (len(capped) == 1 and tenant not in capped), units

    def most(self) -> tuple[frozenset[str], tuple[int | None, bool, int | None]]:
        """The few tenants for whom `others` may answer differently (the two smallest of each list, the only
        capped one), and what it answers for every other tenant: a thousand tenants share one answer."""
        few = {other for _, other in self.whole[:2]} | {other for _, other in self.shares[:2]}
        if len(self.capped) == 1:
            few |= self.capped
        return frozenset(few), (self.whole[0][0] if self.whole else None, bool(self.capped),
                                self.shares[0][0] if self.shares else None)


class ClaimantFinder:
    """Each tenant's claimant among the kept queue's jobs not in `gone` (the cycle's starts, a set it grows; their
    tenants are in `gone_tenants`). A tenant's claimant reads only its own jobs: for a tenant none of whose jobs
    started this cycle, the queue keeps its parts between cycles (`smallest_waiting`, `oldest_submit_s`), so only
    the tenants whose claimant left are looked at job by job."""

    def __init__(self, queue: QueueByTenant, gone: Collection[str], models: Iterable[str],
                 may_reclaim: Callable[[Job, str], bool], gone_tenants: Collection[str] = ()) -> None:
        self._queue = queue
        self._gone = gone
        self._gone_tenants = gone_tenants
        self._models = tuple(models)
        self._may_reclaim = may_reclaim
        """Whether a job may reclaim lent GPUs of a model (greengpu.sched.preemption, reclaims_within_nominal)."""

    def tenants(self) -> Iterable[str]:
        """The tenants with jobs in the queue."""
        return self._queue.kinds_of_tenant.keys()

    def profile_of(self, tenant: str) -> Profile | None:
        """The tenant's claimant as greengpu.sched.claims.claimants_of finds it among the jobs not started."""
        found = self._claimant_of(tenant)
        return None if found is None else self.with_models(found)

    def _claimant_of(self, tenant: str) -> Claimant | None:
        if tenant not in self._gone_tenants:  # none of its jobs started this cycle: the queue keeps its smallest
            smallest_job = self._queue.smallest_waiting(tenant)
            return None if smallest_job is None else Claimant(smallest_job, self.first_submit_s(tenant))
        by_kind = self._queue.by_kind
        gone = self._gone
        smallest: Job | None = None
        for kind in self._queue.kinds_of_tenant.get(tenant, ()):
            entry = next((e for e in by_kind[kind] if e[1] not in gone), None)
            if entry is None:
                continue
            job = entry[2].job
            if smallest is None or (job.units, job.duration_s, job.job_id) < \
                    (smallest.units, smallest.duration_s, smallest.job_id):
                smallest = job
        if smallest is None:
            return None
        return Claimant(smallest, self.first_submit_s(tenant))

    def first_submit_s(self, tenant: str) -> float:
        """When the tenant's oldest job not started came."""
        if tenant not in self._gone_tenants:
            return self._queue.oldest_submit_s(tenant)
        gone = self._gone
        by_priority = self._queue.by_priority
        first_s = math.inf
        for priority in self._queue.levels_of_tenant.get(tenant, ()):
            entries = by_priority[(priority, tenant)]
            first_s = min(first_s, next((e[0] for e in entries if e[1] not in gone), math.inf))
        return first_s

    def with_models(self, claimant: Claimant) -> Profile:
        """The claimant with the models it may reclaim on now."""
        job = claimant.job
        models = tuple(m for m in self._models
                       if (job.gpu_types is None or m in job.gpu_types) and self._may_reclaim(job, m))
        shape = (job.units, job.whole_gpus, job.gpus_per_node, job.is_fractional, claimant.first_submit_s, models)
        return (claimant, models, shape)
