"""The victim strategy for a tenant's own quota: a higher-priority job stops its own tenant's lower-priority jobs
when what they hold is the tenant's quota (greengpu.sched.preemption)."""

from __future__ import annotations

from collections.abc import Collection, Sequence

from greengpu.model import Job, PendingJob, RunningJob
from greengpu.sched.placement import allowed_models, place
from greengpu.sched.preemption.eligibility import Eligibility
from greengpu.sched.preemption.rules import VictimChoice, lost_gpu_s


class OwnQuotaSearch:
    """Finds the cheapest set of a claimant's own tenant's lower-priority jobs that lets it start."""

    def __init__(self, books: Eligibility) -> None:
        self.books = books

    def outranks_own(self, job: Job) -> bool:
        """Whether some running job of the job's own tenant may yield to it by priority (cheap: per tenant)."""
        books = self.books
        if not books.policy.priority_preemption:
            return False
        by_tenant = books.running_by_tenant()
        if job.tenant not in by_tenant or job.priority <= books.lowest_running_priority(job.tenant):
            return False  # the second: no job of its tenant is below it, whichever may yield
        books.read_clock = True  # which of them may yield moves with the clock (min_runtime_s, the hour's preemptions)
        return bool(books.yielding(job.tenant)) and job.priority > books.lowest_yielding_priority(job.tenant)

    def find_for_quota(self, pending: PendingJob, excluded: Collection[int]) -> VictimChoice | None:
        """The cheapest set of the job's own tenant's lower-priority jobs whose stop lets it start when
        its tenant's quota blocks it, or None.

        A tenant's higher-priority job preempts its lower-priority jobs when they are in its way, and
        they are in its way just as much when what they hold is the tenant's quota as when it is the
        GPUs (an interactive notebook waiting behind its own group's checkpointing training jobs). The
        victims are taken by rank until the job passes its quota and fits, then pruned."""
        job = pending.job
        books = self.books
        if not self.outranks_own(job) or not allowed_models(books.state, job):
            return None  # (outranks_own has marked the clock read when it looked at the jobs that may yield)
        banned = {r.by_job_id for r in pending.preemptions}
        candidates = sorted((r for r in books.yielding(job.tenant)
                             if r.job.priority < job.priority and r.job.job_id not in books.stopping
                             and r.job.job_id not in banned),
                            key=books.rank)
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
        return VictimChoice(tuple(chosen), nodes, sum(lost_gpu_s(v, books.now_s) for v in chosen))

    def _starts_without(self, job: Job, victims: Sequence[RunningJob],
                        excluded: Collection[int]) -> frozenset[int] | None:
        """The nodes the job would start on once `victims` are gone (their GPUs and their quota given
        back), or None when it still could not: tried in the real index and ledger, then restored."""
        state, ledger = self.books.state, self.books.ledger
        for victim in victims:
            state.release(victim.slots)
            ledger.charge(victim, -1)
        try:
            slots = place(state, job, excluded=excluded)
            if slots is None:
                return None
            model = state.model[state.index[slots[0].node]]
            if ledger.admission_problem(job, model, job.units) is not None:
                return None
            return frozenset(state.index[s.node] for s in slots)
        finally:
            for victim in victims:
                ledger.charge(victim, 1)
                state.allocate(victim.slots)
