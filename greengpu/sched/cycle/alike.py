"""Deciding a job, and sharing the verdict with the jobs alike: once no preemption attempt or reservation is left,
a waiting job's wait depends only on its kind (`alike_key`) and what the cycle has changed since the first of that
kind was decided, so the verdict is remembered per kind with what it read, and reused while that still holds."""

from __future__ import annotations

import math

from greengpu.model import (
    Job,
    PendingJob,
)
from greengpu.sched.claims_kept import KeptClaims
from greengpu.sched.cycle.starts import StartSteps
from greengpu.sched.cycle.vocabulary import _KIND_WAITS, EVERYWHERE, alike_key
from greengpu.sched.waits import (
    Wait,
    WaitReason,
)


class AlikeWaits(StartSteps):
    """`consider` for one job, and the memo of verdicts per kind of job that lets jobs alike share it."""

    def consider(self, item: PendingJob, models: tuple[str, ...]) -> None:
        """Decide one pending job: place, backfill, wait for victims, preempt, or reserve and wait."""
        job = item.job
        self._claims_probe = None  # what of the lending rule it reads (kept with a WAKE verdict: _remember_wake)
        blocked = self.quota_blocked(job, models)
        if blocked is not None:
            # Its own tenant's lower-priority jobs in the way of its quota yield as they would for GPUs.
            if job.job_id in self.stopping_for:
                self._set_wait(job, WaitReason.PREEMPTING)
                return
            if self.attempts_left > 0 and self.finder.outranks_own(job):
                self.attempts_left -= 1
                if self.try_preempt(item, self.excluded_for_job(job), self.finder.find_for_quota):
                    return
            self.waits[job.job_id] = blocked
            return
        excluded = self.excluded_for_job(job)
        ahead, self._placed_ahead = self._placed_ahead, None
        if ahead is not None and ahead[0] is item and ahead[1] == (self._epoch(), self._layout_version):
            self.admit(item, ahead[2], backfilled=False)  # `wait_alike` placed it on the same state just now
            return
        if not self._lending_refuses(job, models):
            slots = self._lendable(item, excluded, self._place(item, models, excluded))
            if slots is not None:
                self.admit(item, slots, backfilled=False)
                return
        if self.try_backfill(item, excluded, models):
            return
        if self.waits_for_victims(item, excluded):
            self._set_wait(job, WaitReason.PREEMPTING)
            return
        if self.fits_after_wake(job, models):
            # Sleeping capacity can take it: waking costs a boot, preempting costs someone's work.
            self._set_wait(job, WaitReason.WAKE)
            if self.shortcuts:
                self._remember_wake(job)
            return
        if self.attempts_left > 0:
            self.attempts_left -= 1
            if self.try_preempt(item, excluded):
                return
        self._set_wait(job, WaitReason.CAPACITY)
        if self.reservations_left > 0:
            self.reservations_left -= 1
            self.try_reserve(item, excluded)

    def _alike_state(self) -> tuple[int, int]:
        """What every memo of jobs alike was found under: released GPUs, held and reserved nodes. Each kind's memo
        also carries what else it read (`_alike_marks`): its tenant's quota usage, and the lending rule's answers
        where it asked them. A start changes only its own tenant's usage and takes free GPUs (a job that did not
        fit fits no better), so the other kinds keep their memos (`_kind_valid`)."""
        return (self._released_version, self._layout_version)

    def _sync_alike_memos(self) -> None:
        """Drop the memos of jobs alike when what they were found under (`_alike_state`) has changed since."""
        token = self._alike_state()
        if token != self._alike_token:
            durable = self._durable_kinds()
            self._alike_waits.clear()
            self._alike_lending_refused.clear()
            self._alike_wait_from.clear()
            self._alike_marks.clear()
            self._valid_at.clear()
            self._alike_token = token
            for key, (wait, mark) in durable.items():
                self._keep_kind(key, wait, mark)

    def _keep_kind(self, key: tuple[object, ...], wait: Wait, mark: tuple[int, object]) -> None:
        """Give every job of the kind `key` its `wait` (whatever its length) while `mark` holds (`_kind_valid`)."""
        self._alike_waits[key] = wait
        self._alike_wait_from[key] = -math.inf
        self._alike_marks[key] = mark
        self._vouched.pop(key, None)  # a kind with a memo is given its wait by the memo's rules

    def _durable_kinds(self) -> dict[tuple[object, ...], tuple[Wait, tuple[int, object]]]:
        """The kinds whose every job waits for a reason that reads neither free GPUs nor held or reserved nodes: a
        quota wait (only its tenant's usage) or a refusal on every free node (`owed_everywhere` is asked again
        before it is believed, and whether a sleeping node could take the kind does not change within a cycle).
        They outlive releases and holds in a cycle, and the cycle itself (`_carry_kinds`)."""
        waits, bounds = self._alike_waits, self._alike_wait_from
        durable: dict[tuple[object, ...], tuple[Wait, tuple[int, object]]] = {}
        for key, mark in self._alike_marks.items():
            claims = mark[1]
            if claims is not None and claims is not EVERYWHERE:
                continue
            wait = waits.get(key)
            if wait is None or bounds.get(key) != -math.inf or (claims is None and wait.reason not in _KIND_WAITS):
                continue
            durable[key] = (wait, mark)
        return durable

    def _mark(self, key: tuple[object, ...], tenant: str) -> None:
        """Record what the memos of `key` read, merged with what they had read before (still valid: see
        `_kind_valid`)."""
        probe = self._claims_probe
        before = self._alike_marks.get(key)
        if before is not None and probe is None:
            return
        if before is not None and before[1] is not None and (probe is EVERYWHERE or probe is None):
            probe = before[1]
        self._alike_marks[key] = (self.ledger.tenant_version.get(tenant, 0), probe)
        self._vouched.pop(key, None)

    def _kind_valid(self, key: tuple[object, ...], job: Job, models: tuple[str, ...]) -> bool:
        """Whether the memos of `key` (a kind of job like `job`) still hold; when not, they are dropped."""
        mark = self._alike_marks.get(key)
        if mark is None:
            return False
        version, claims = mark
        if self.ledger.tenant_version.get(job.tenant, 0) == version:
            if claims is None or claims == self._epoch():
                return True
            # Refused everywhere before: its tenant's usage is the same, so only whether every free node is still
            # owed can have changed (greengpu.sched.claims_kept.KeptClaims.owed_everywhere).
            if claims is EVERYWHERE and isinstance(self.claims, KeptClaims) and \
                    self._owed_everywhere_now(job.tenant, models):
                return True
        del self._alike_marks[key]
        self._valid_at.pop(key, None)
        self._alike_waits.pop(key, None)
        self._alike_lending_refused.pop(key, None)
        self._alike_wait_from.pop(key, None)
        return False

    def _valid_now(self, key: tuple[object, ...], job: Job, epoch: tuple[int, tuple[int, int, int]]) -> bool:
        """`_kind_valid`, remembered for the epoch."""
        if self._valid_at.get(key) == epoch:
            return True
        if self._kind_valid(key, job, self.models_for(job)):
            self._valid_at[key] = epoch
            return True
        return False

    def _remember_wake(self, job: Job) -> None:
        """Keep a WAKE verdict of `consider` as its kind's, as `wait_alike` keeps its own: `consider` gives WAKE
        before any preemption attempt or reservation, from steps that read only the job's kind and the cycle's
        state, and a backfill that failed for it fails for a job alike ending no earlier (`_known_wait`). A job
        with held nodes or victims of its own decides differently and is not kept."""
        if job.job_id in self.held_for or job.job_id in self.stopping_for:
            return
        self._sync_alike_memos()
        key = alike_key(job)
        if key in self._alike_marks:
            self._kind_valid(key, job, self.models_for(job))
        self._alike_waits[key] = self.waits[job.job_id]
        self._waits_from(key, self.now_s + job.duration_s)
        self._mark(key, job.tenant)

    def consider_alike(self, item: PendingJob, models: tuple[str, ...], key: tuple[object, ...] | None = None) -> None:
        """`consider` once no preemption attempt or reservation is left (see `wait_alike`)."""
        wait = self.wait_alike(item, models, key)
        if wait is None:
            self.consider(item, models)
        else:
            self.waits[item.job.job_id] = wait

    def wait_alike(self, item: PendingJob, models: tuple[str, ...],
                   key: tuple[object, ...] | None = None) -> Wait | None:
        """The wait `consider` would give the job once no preemption attempt or reservation is left, when
        it can neither start nor backfill; None when it might (or holds nodes or victims of its own).
        Changes nothing but memos. A job alike in every respect the decision reads (tenant, request,
        interruptibility) waits for the same reason as the last one, as long as quota usage, released GPUs
        and held nodes are unchanged, unless it is short enough to try a backfill that no smaller,
        shorter job of its shape failed: a saturated queue's thousands of jobs are not re-decided one by one.
        `key`: the job's `alike_key`, when the caller has it already."""
        job = item.job
        if job.job_id in self.held_for or job.job_id in self.stopping_for:
            return None
        self._sync_alike_memos()
        if key is None:
            key = alike_key(job)
        if key in self._alike_marks:
            self._kind_valid(key, job, models)
        outer, self._claims_probe = self._claims_probe, None
        try:
            return self._wait_alike(item, models, key)
        finally:
            if key in self._alike_waits or key in self._alike_lending_refused:
                self._mark(key, job.tenant)
            if outer is not None and (self._claims_probe is None or outer is not EVERYWHERE):
                self._claims_probe = outer

    def _wait_alike(self, item: PendingJob, models: tuple[str, ...], key: tuple[object, ...]) -> Wait | None:
        job = item.job
        wait = self._alike_waits.get(key)
        if wait is not None and wait.reason in _KIND_WAITS:
            return wait
        ends_at_s = self.now_s + job.duration_s
        may_backfill = ends_at_s <= self._latest_reserved_start_s and \
            not self.backfill_known_to_fail(job, models, ends_at_s) and \
            ends_at_s < self._alike_lending_refused.get(key, math.inf)
        if wait is not None:
            # A job alike was decided under the same token: this one cannot start outside a backfill either
            # (the same placement, the same claims); only a backfill its shorter duration allows is new.
            if may_backfill and self._backfills_now(item, key, models, ends_at_s):
                return None
            self._waits_from(key, ends_at_s)
            return wait
        # The steps of `consider` that change nothing, in its order.
        wait = self.quota_blocked(job, models, key)
        everywhere = False  # refused by the lending rule wherever it went, whatever its length
        if wait is None:
            excluded = self.excluded_for_job(job)
            everywhere = self._lending_refuses(job, models)
            if not everywhere:
                slots = self._lendable(item, excluded, self._place(item, models, excluded))
                if slots is not None:
                    # It starts: `consider`, called next on the same state, takes these slots (the same search).
                    self._placed_ahead = (item, (self._epoch(), self._layout_version), slots)
                    return None
            if may_backfill and self._backfills_now(item, key, models, ends_at_s):
                return None
            wait = self.wait(job, WaitReason.WAKE if self.fits_after_wake(job, models) else WaitReason.CAPACITY)
        self._alike_waits[key] = wait
        # A quota wait, or a refusal on every free node (a backfill would be refused too), holds for every job of
        # the kind however short, while the kind's memos hold.
        self._waits_from(key, -math.inf if wait.reason in _KIND_WAITS or everywhere else ends_at_s)
        return wait

    def refused_wait(self, job: Job, key: tuple[object, ...], epoch: object) -> Wait | None:
        """The wait `wait_alike` gives `job` (of kind `key`, asked at `epoch`: `_epoch()`) when that reads nothing
        of its own kind's memos: its quota's, or, when its tenant borrows on every model it may use and every free
        node is owed to another tenant's claimant (as `_lending_refuses` finds: no placement and no backfill is
        lent to it, however short), waiting for capacity or for a node to wake. None otherwise (the walk asks
        it). Changes nothing but memos of answers.

        With a thousand tenants most kinds of job in a saturated queue are borrowers refused this way, and each
        start moves the epoch: so what a kind reads of its tenant (quota verdict, whether it borrows) is kept by
        the tenant's usage version, and whether every free node is owed is read once per epoch for all tenants
        but the few whose own claimants set them apart (KeptClaims.owed_everywhere_by_most)."""
        if job.job_id in self.held_for or job.job_id in self.stopping_for:
            return None
        tenant = job.tenant
        version = self.ledger.tenant_version.get(tenant, 0)
        standing = self._kind_standing.get(key)
        if standing is None or standing[0] != version:
            standing = self._kind_standing[key] = self._standing_of(job, key, version)
        _, blocked, refused, models = standing
        if blocked is not None:
            return blocked
        if refused is None:
            return None  # it does not borrow everywhere: the lending rule may lend to it
        return refused if self._owed_everywhere_now(tenant, models, epoch) else None

    def _standing_of(self, job: Job, key: tuple[object, ...], version: int) -> tuple[
            int, Wait | None, Wait | None, tuple[str, ...]]:
        """What `refused_wait` reads of a kind's tenant at usage `version`: its quota wait (or None) and, when it
        borrows on every model it may use, the wait it gets when refused everywhere (capacity or a node to wake,
        which do not move within a cycle); and its models."""
        models = self.models_for(job)
        blocked = self.quota_blocked(job, models, key)
        within = self.ledger.within_nominal_after
        refused: Wait | None = None
        if blocked is None and self._lending_checked and isinstance(self.claims, KeptClaims) and \
                not any(within(job, model, job.units) for model in models):
            refused = self.wait(job, WaitReason.WAKE if self.fits_after_wake(job, models) else WaitReason.CAPACITY)
        return (version, blocked, refused, models)

    def _owed_everywhere_now(self, tenant: str, models: tuple[str, ...], epoch: object = None) -> bool:
        """KeptClaims.owed_everywhere, read once per epoch (`epoch`: `_epoch()`, when the caller has it) for every
        tenant but the few whose own claimants set them apart: a thousand tenants' kinds ask it after every start."""
        if epoch is None:
            epoch = self._epoch()
        most = self._everywhere_most_at(models, epoch)
        if tenant in most[1]:
            claims = self.claims
            assert isinstance(claims, KeptClaims)
            return claims.owed_everywhere(tenant, models)
        return most[2]

    def _everywhere_most_at(self, models: tuple[str, ...], epoch: object) -> tuple[object, frozenset[str], bool]:
        """KeptClaims.owed_everywhere_by_most for `models` at `epoch` (`_epoch()`), read once per epoch."""
        most = self._everywhere_most.get(models)
        if most is None or most[0] != epoch:
            claims = self.claims
            assert isinstance(claims, KeptClaims)
            most = self._everywhere_most[models] = (epoch, *claims.owed_everywhere_by_most(models))
        return most

    def _waits_from(self, key: tuple[object, ...], ends_at_s: float) -> None:
        bound = self._alike_wait_from.get(key)
        if bound is None or ends_at_s < bound:
            self._alike_wait_from[key] = ends_at_s

    def _known_wait(self, job: Job, key: tuple[object, ...]) -> Wait | None:
        """The wait `wait_alike` would give `job` without asking it: its kind's, when a job of its kind ending no
        later waited with the same token (None when not known so)."""
        bound = self._alike_wait_from.get(key)
        if bound is None or self.now_s + job.duration_s < bound:
            return None
        if self._alike_state() != self._alike_token:
            return None
        if job.job_id in self.held_for or job.job_id in self.stopping_for:
            return None
        if not self._valid_now(key, job, self._epoch()):
            return None
        return self._alike_waits[key]

    def _backfills_now(self, item: PendingJob, key: tuple[object, ...], models: tuple[str, ...],
                       ends_at_s: float) -> bool:
        """Whether `try_backfill` would start the job now (changing nothing but memos). A refusal is
        remembered: for its request shape when no reserved node could take it (backfill_failed), for its
        kind when only nodes owed to claimants could: a job alike ending later may use only a subset of the
        same reserved nodes, less the same owed ones."""
        slots, shape_failed = self._backfill_slots(item, self.excluded_for_job(item.job), models, ends_at_s)
        if slots is not None:
            return True
        if not shape_failed:
            refused = self._alike_lending_refused
            refused[key] = min(ends_at_s, refused.get(key, math.inf))
        return False
