"""Who may yield, and the quota books of the preemptions under way: what every victim strategy of one cycle
reads and shares (greengpu.sched.preemption)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from operator import attrgetter
from typing import cast

from greengpu.model import Job, PendingJob, RunningJob
from greengpu.policy import PreemptionPolicy
from greengpu.sched.preemption.rules import HOUR_S, lost_gpu_s, victim_rank
from greengpu.sched.quota import ANY_MODEL, QuotaLedger
from greengpu.sched.state import PlacementState

_PRIORITY = attrgetter("job.priority")

Grouped = tuple[dict[str, list[RunningJob]], dict[str, int]]
"""Running jobs by tenant, and the tenants' lowest priorities found so far."""


def _grouped(running: Sequence[RunningJob], memo: list[object] | None = None) -> Grouped:
    """`running` grouped by tenant, kept in `memo` (the books' slot) for the same tuple: a body that changes
    nothing between cycles passes the same tuple again (the simulator does), and regrouping every running job
    was about 6% of a replay."""
    if memo and memo[0] is running:
        return cast(Grouped, memo[1])
    grouped: dict[str, list[RunningJob]] = {}
    for job in running:
        grouped.setdefault(job.job.tenant, []).append(job)
    lowest: dict[str, int] = {}
    if memo is not None and isinstance(running, tuple):  # immutable: the same object is the same jobs
        memo[:] = [running, (grouped, lowest)]
    return grouped, lowest


def running_by_tenant(running: Sequence[RunningJob], memo: list[object] | None = None) -> dict[str, list[RunningJob]]:
    """`running` grouped by tenant, in order (read-only: the lists may be shared with later cycles)."""
    return _grouped(running, memo)[0]


class Eligibility:
    """One cycle's view of who may yield: the running jobs by tenant, the jobs asked to stop, the GPUs promised
    to the jobs they stop for, and each tenant's standing against its nominal quota net of all of them."""

    def __init__(self, state: PlacementState, ledger: QuotaLedger, policy: PreemptionPolicy, now_s: float,
                 running: Sequence[RunningJob], pending: Sequence[PendingJob],
                 lowest_priority_anywhere: float | None, grouped_memo: list[object] | None = None) -> None:
        self.state = state
        self._grouped_memo = grouped_memo
        self.ledger = ledger
        self.policy = policy
        self.now_s = now_s
        self.running = running
        self.pending = pending
        """The cycle's waiting jobs: whose tenant each earlier preemption still under way serves."""
        self.stopping: set[str] = set()
        """Jobs already asked to stop (earlier cycles or this one)."""
        self.read_clock = False
        """Whether a search went past the checks that read no clock (victims' ages and lost work, the time a
        claimant has waited): its answer may differ a moment later (greengpu.sched.steady)."""
        self._in_flight: tuple[int, dict[tuple[str, str], int], dict[tuple[str, str], int]] | None = None
        self._promised_now: dict[tuple[str, str], int] = {}
        """Per (tenant, quota key), milli-GPUs promised by this cycle's preemptions to their beneficiaries."""
        self._promises = 0
        """How many times `_promised_now` grew."""
        self._by_tenant: dict[str, list[RunningJob]] | None = None
        self._lowest_running: dict[str, int] = {}
        """Per tenant, the lowest priority among its running jobs (filled with _by_tenant)."""
        self._lowest_any = lowest_priority_anywhere
        """The lowest priority among `running` (given by a caller that keeps it, else found when first asked)."""
        self._ranks: dict[int, tuple[RunningJob, tuple[float, float, str]]] = {}
        self._lost: dict[int, tuple[RunningJob, float]] = {}
        """Per running job (by id: the cycle's objects), its victim rank and the work it would lose now."""
        self._over: set[str] = set()
        self._over_version = -1
        self._yielding_cache: dict[str, list[RunningJob]] = {}
        self._lowest_yielding: dict[str, int] = {}
        """Per tenant, the lowest priority among its jobs that may yield (filled with _yielding_cache)."""

    # ----------------------------------------------------------------- promises of this cycle

    @property
    def promised_now(self) -> Mapping[tuple[str, str], int]:
        """Per (tenant, quota key), milli-GPUs promised by this cycle's preemptions (read-only view)."""
        return self._promised_now

    @property
    def promises(self) -> int:
        """How many times this cycle's preemptions promised GPUs to their beneficiaries' tenants."""
        return self._promises

    def promise(self, job: Job, victim: RunningJob) -> None:
        """The caller stops victims (the first `victim`) for `job`: its tenant has the job's GPUs coming."""
        key = self.quota_key(job.tenant, self.model_of(victim))
        self._promised_now[key] = self._promised_now.get(key, 0) + job.units
        self._promises += 1

    # ----------------------------------------------------------------- quota standing

    def model_of(self, victim: RunningJob) -> str:
        node = self.state.index.get(victim.slots[0].node) if victim.slots else None
        return self.state.model[node] if node is not None else ""

    def quota_key(self, tenant: str, model: str) -> tuple[str, str]:
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
            return self._in_flight[1], self._in_flight[2]
        leaving: dict[tuple[str, str], int] = {}
        coming: dict[tuple[str, str], int] = {}
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
                    beneficiaries.setdefault(victim.preempted_for, self.model_of(victim))
        if beneficiaries:
            for waiting in self.pending:
                model = beneficiaries.get(waiting.job.job_id)
                if model is not None:
                    key = self.quota_key(waiting.job.tenant, model)
                    coming[key] = coming.get(key, 0) + waiting.job.units
        self._in_flight = (len(self.stopping), leaving, coming)
        return leaving, coming

    def over_nominal_units(self, tenant: str, model: str) -> int:
        """How far the tenant stays above its nominal quota once its jobs already asked to stop are gone."""
        leaving, _ = self._preemptions_in_flight()
        return max(0, self.ledger.over_nominal_units(tenant, model) - leaving.get(self.quota_key(tenant, model), 0))

    def reclaims_within_nominal(self, job: Job, model: str) -> bool:
        """Whether the job, with its tenant's running jobs and the jobs that already have victims
        stopping for them, fits inside the tenant's nominal quota: only then may it reclaim lent GPUs."""
        _, coming = self._preemptions_in_flight()
        key = self.quota_key(job.tenant, model)
        promised = coming.get(key, 0) + self._promised_now.get(key, 0)
        return self.ledger.within_nominal_after(job, model, job.units + promised)

    def tenants_over_nominal(self) -> set[str]:
        """The tenants above their nominal quota, found again only when the ledger changed."""
        if self._over_version != self.ledger.version:
            self._over = self.ledger.tenants_over_nominal()
            self._over_version = self.ledger.version
        return self._over

    # ----------------------------------------------------------------- who may yield

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

    def yielding(self, tenant: str) -> list[RunningJob]:
        """The tenant's running jobs that may yield to anyone this cycle (the tenant has running jobs)."""
        found = self._yielding_cache.get(tenant)
        if found is None:
            found = self._yielding_cache[tenant] = [r for r in self.running_by_tenant()[tenant]
                                                    if self._may_ever_yield(r)]
            self._lowest_yielding[tenant] = min((r.job.priority for r in found), default=0)
        return found

    def lowest_yielding_priority(self, tenant: str) -> int:
        """The lowest priority among the tenant's jobs that may yield (after `yielding`)."""
        return self._lowest_yielding[tenant]

    def running_by_tenant(self) -> dict[str, list[RunningJob]]:
        if self._by_tenant is None:
            self._by_tenant, self._lowest_running = _grouped(self.running, self._grouped_memo)
        return self._by_tenant

    def lowest_priority_anywhere(self) -> float:
        """The lowest priority among all running jobs (infinite when none runs), found once per cycle."""
        if self._lowest_any is None:
            self._lowest_any = min(map(_PRIORITY, self.running), default=math.inf)  # in C: asked every cycle
        return self._lowest_any

    def lowest_running_priority(self, tenant: str) -> int:
        """The lowest priority among the tenant's running jobs (it has some). No job of the tenant can yield by
        priority to a job at or below it, whichever may yield: the victim search then skips the tenant without
        sorting that out (nearly every search of a saturated queue). Remembered with the grouping."""
        found = self._lowest_running.get(tenant)
        if found is None:
            found = self._lowest_running[tenant] = min(r.job.priority for r in self.running_by_tenant()[tenant])
        return found

    # ----------------------------------------------------------------- what a victim costs now

    def rank(self, victim: RunningJob) -> tuple[float, float, str]:
        """`victim_rank` now, remembered for the cycle (the clock does not move within it; every search
        sorts the same running jobs again)."""
        found = self._ranks.get(id(victim))
        if found is None or found[0] is not victim:  # (an id is another object's once the first is gone)
            found = self._ranks[id(victim)] = (victim, victim_rank(victim, self.now_s, self.policy.victim_order))
        return found[1]

    def lost_now_gpu_s(self, victim: RunningJob) -> float:
        """`lost_gpu_s` now, remembered for the cycle like `rank`."""
        found = self._lost.get(id(victim))
        if found is None or found[0] is not victim:
            found = self._lost[id(victim)] = (victim, lost_gpu_s(victim, self.now_s))
        return found[1]
