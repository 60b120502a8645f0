"""`VictimFinder`: the one object a scheduling cycle asks about preemption, over the strategies of this package."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence

from greengpu.model import Job, PendingJob, RunningJob
from greengpu.policy import PreemptionPolicy
from greengpu.sched.preemption.cheapest_set import CheapestSetSearch
from greengpu.sched.preemption.eligibility import Eligibility
from greengpu.sched.preemption.own_quota import OwnQuotaSearch
from greengpu.sched.preemption.reclaim_worth import ReclaimWorth
from greengpu.sched.preemption.rules import VictimChoice
from greengpu.sched.quota import QuotaLedger
from greengpu.sched.state import PlacementState


class VictimFinder:
    """Finds minimal victim sets within one scheduling cycle: by priority or quota reclaim across the cluster
    (`find`), or among the claimant's own tenant's jobs when its quota blocks it (`find_for_quota`)."""

    def __init__(self, state: PlacementState, ledger: QuotaLedger, policy: PreemptionPolicy, now_s: float,
                 running: Sequence[RunningJob], pending: Sequence[PendingJob] = (), memo_searches: bool = True,
                 lowest_priority_anywhere: float | None = None, ahead_memo: list[object] | None = None,
                 grouped_memo: list[object] | None = None) -> None:
        self.state = state
        self.books = Eligibility(state, ledger, policy, now_s, running, pending, lowest_priority_anywhere,
                                 grouped_memo)
        self.worth = ReclaimWorth(self.books, ahead_memo)
        self.cheapest = CheapestSetSearch(self.books, self.worth, memo_searches)
        self.own_quota = OwnQuotaSearch(self.books)
        self.stopping = self.books.stopping
        """Jobs already asked to stop (earlier cycles or this one); the cycle adds to it."""

    @property
    def read_clock(self) -> bool:
        """Whether a search went past the checks that read no clock (greengpu.sched.steady)."""
        return self.books.read_clock

    @property
    def promised_now(self) -> Mapping[tuple[str, str], int]:
        """Per (tenant, quota key), milli-GPUs promised by this cycle's preemptions (read-only view)."""
        return self.books.promised_now

    @property
    def promises(self) -> int:
        """How many times this cycle's preemptions promised GPUs to their beneficiaries' tenants."""
        return self.books.promises

    def find(self, pending: PendingJob, excluded: Collection[int]) -> VictimChoice | None:
        """The cheapest eligible victim set that lets `pending` fit, or None."""
        return self.cheapest.find(pending, excluded)

    def find_for_quota(self, pending: PendingJob, excluded: Collection[int]) -> VictimChoice | None:
        """The cheapest set of the job's own lower-priority jobs whose stop lets it pass its quota, or None."""
        return self.own_quota.find_for_quota(pending, excluded)

    def outranks_own(self, job: Job) -> bool:
        """Whether some running job of the job's own tenant may yield to it by priority."""
        return self.own_quota.outranks_own(job)

    def reclaims_within_nominal(self, job: Job, model: str) -> bool:
        """Whether the job may reclaim lent GPUs of `model` (greengpu.sched.preemption.eligibility)."""
        return self.books.reclaims_within_nominal(job, model)

    def over_nominal_units(self, tenant: str, model: str) -> int:
        """How far the tenant stays above its nominal quota once its jobs already asked to stop are gone."""
        return self.books.over_nominal_units(tenant, model)

    def reclaim_pays(self, pending: PendingJob, victims: Sequence[RunningJob], excluded: Collection[int],
                     models: Sequence[str]) -> bool:
        """Whether stopping `victims` for `pending` is worth the work it destroys."""
        return self.worth.reclaim_pays(pending, victims, excluded, models)

    def expected_start_s(self, job: Job, excluded: Collection[int], models: Sequence[str]) -> float:
        """When `job` could start if nobody were preempted."""
        return self.worth.expected_start_s(job, excluded, models)

    def queue_start_s(self, job: Job) -> float:
        """When the GPUs that free up on their own have served the jobs waiting before `job`, and `job`."""
        return self.worth.queue_start_s(job)
