"""The lending rule as one cycle reads it: whether a free node may go to a borrower or is owed to a tenant's
waiting claimant within its nominal quota (greengpu.sched.claims), what that read depended on, and the two
questions every step asks of the free GPUs: is any usable, and does sleeping capacity fit a job."""

from __future__ import annotations

from greengpu.model import (
    GpuSlot,
    Job,
    PendingJob,
)
from greengpu.sched.claims import Claims
from greengpu.sched.claims_kept import KeptClaims
from greengpu.sched.cycle.vocabulary import EVERYWHERE
from greengpu.sched.cycle_state import CycleState
from greengpu.sched.node_rules import fits_asleep, fits_sizes, wakeable_sizes
from greengpu.sched.placement import place, warning_gpus_by_node
from greengpu.sched.waits import (
    Wait,
    WaitReason,
)


class Lending(CycleState):
    """The cycle's reads of the lending rule and of what is left free."""

    claims: Claims | KeptClaims
    """The nodes owed to waiting jobs that may reclaim lent GPUs (greengpu.sched.claims)."""
    _lending_checked = False

    def _claims_token(self) -> tuple[int, int, int]:
        """What the lending rule's kept answers read besides starts: jobs asked to stop, GPUs promised to
        reclaims, GPUs released (greengpu.sched.claims_kept)."""
        return (len(self.finder.stopping), self.finder.promises, self._released_version)

    def _epoch(self) -> tuple[int, tuple[int, int, int]]:
        """Changes with every start, job asked to stop, promise and release: what a kind found valid at one epoch
        is valid for the whole of it."""
        return (len(self.started), self._claims_token())

    def _claims_read(self, everywhere: bool) -> None:
        """Note that the step being decided read the lending rule's answers: that every free node is owed
        (`everywhere`: it holds again as long as that does), or anything else (it holds until the next start)."""
        if not everywhere:
            self._claims_probe = self._epoch()
        elif self._claims_probe is None:
            self._claims_probe = EVERYWHERE

    def _lendable(self, item: PendingJob, excluded: set[int], slots: tuple[GpuSlot, ...] | None,
                  only: set[int] | None = None) -> tuple[GpuSlot, ...] | None:
        """`slots`, or when they would lend GPUs owed to a claimant to a borrower that could be taken back,
        a placement away from the owed nodes (among `only`, when given; None when there is none):
        greengpu.sched.claims."""
        if slots is None or not self._lending_checked:
            return slots
        job = item.job
        if job.job_id in self.held_for:
            return slots  # its victims stopped for it
        state, claims = self.state, self.claims
        if self.ledger.within_nominal_after(job, state.model[state.index[slots[0].node]], job.units):
            return slots  # not borrowing: its tenant's own quota
        self._claims_read(everywhere=False)
        if not any(claims.owed_to_others(state.index[slot.node], job.tenant) for slot in slots):
            return slots
        models = self.models_for(job)
        owed = claims.owed_nodes(job.tenant, models)
        own = {m for m in models if self.ledger.within_nominal_after(job, m, job.units)}
        if own:  # a node of a model its tenant's own quota covers is never held back from it (not a borrower there)
            owed = {node for node in owed if state.model[node] not in own}
        if only is not None:  # a backfill, placed as try_backfill places it
            return place(state, job, excluded=excluded | owed, only=only - owed)
        return place(state, job, excluded=excluded | owed, whole_node_reserve=self.policy.whole_node_reserve,
                     warning=warning_gpus_by_node(state, self.snapshot.node_states))

    def _lending_refuses(self, job: Job, models: tuple[str, ...]) -> bool:
        """True when `_lendable` would refuse any placement of the job: its tenant borrows on every model it may
        use, and every free node of those models is owed to another tenant's claimant (KeptClaims.owed_everywhere).
        A saturated queue's borrowers are then not placed first only to be refused."""
        if not self._lending_checked or job.job_id in self.held_for or not isinstance(self.claims, KeptClaims):
            return False
        # The answer reads the tenant's usage and the lending rule's answers: kept per (tenant, models, request)
        # until either changes (a saturated replay asks it about a million times).
        key = (job.tenant, models, job.units)
        stamp = (self.ledger.tenant_version.get(job.tenant, 0), self._epoch())
        found = self._refuses.get(key)
        if found is not None and found[0] == stamp:
            refused = found[1]
        else:
            within = self.ledger.within_nominal_after
            refused = not any(within(job, model, job.units) for model in models) and \
                self.claims.owed_everywhere(job.tenant, models)
            self._refuses[key] = (stamp, refused)
        if refused:
            self._claims_read(everywhere=True)
        return refused

    def fits_after_wake(self, job: Job, models: tuple[str, ...]) -> bool:
        """Whether nodes that are asleep or on their way (all idle, by construction) could hold the job."""
        if job.node_rule is not None:  # only the sleeping nodes its constraints allow (not kept: such jobs are few)
            return fits_asleep(self.state, self.snapshot.node_states, self.rules().barred_asleep(job), job, models)
        if self._wakeable is None:
            self._wakeable = wakeable_sizes(self.state, self.snapshot.node_states)
        return fits_sizes(self.state, job, models, self._wakeable)

    def _nothing_left_to_try(self) -> bool:
        """True when no free GPU is usable by an ordinary job and no preemption or reservation is left."""
        if self.attempts_left or self.reservations_left:
            return False
        state = self.state
        # Within a cycle the free GPUs change only by admissions and releases, the excluded nodes only
        # with the layout: the answer is kept until one of them changes (asked after every waiting job).
        key = (self._layout_version, self._released_version, len(self.started), state.free_units_total)
        if self.shortcuts and key == self._nothing_left_key:
            return self._nothing_left
        excluded = self._excluded_for("")
        held_free = sum(sum(state.gpu_free[n]) for n in excluded if state.schedulable[n])
        self._nothing_left_key, self._nothing_left = key, state.free_units_total - held_free <= 0
        return self._nothing_left

    def _capacity_wait(self, job: Job) -> Wait:
        return self.wait(job, WaitReason.CAPACITY)
