"""One scheduling cycle: a snapshot and a policy in, actions out. Pure: no I/O, no clock, no randomness.

The cycle, in order:
1. victims whose checkpoint grace has run out are killed (KillJob) and their GPUs freed; the
   nodes of victims still stopping stay held for the job they make room for; a victim whose
   beneficiary no longer waits (it started elsewhere) is not killed: its preemption is withdrawn;
2. pending jobs are taken in queue order (priority with age boost, fair share, age);
3. each job is checked against its tenant's quota, then placed best-fit on nodes that are neither
   held nor reserved; a job that ends before a reservation starts may backfill reserved nodes;
4. a job that does not fit may preempt (minimal, checkpoint-aware victim set) when it would then
   fit; otherwise the highest blocked jobs get reservations so that backfill cannot starve them;
5. jobs still blocked for capacity get room on waking or asleep nodes, and the asleep nodes that
   room needs are woken (WakeNode; see greengpu.sched.wake).
A gang is placed whole or not at all, and a waiting job holds no GPUs.
"""

from __future__ import annotations

import gc
import itertools
import math
from collections.abc import Callable, Hashable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import cast

from greengpu.model import (
    Action,
    ClusterSnapshot,
    GpuSlot,
    Job,
    KillJob,
    PendingJob,
    PlaceJob,
    PreemptJob,
    RunningJob,
    WakeNode,
)
from greengpu.policy import SchedulerPolicy
from greengpu.sched.backfill import Reservation, ends_by_node, reservation_unchanged_until_s, reserve
from greengpu.sched.books import books_for, forget_books
from greengpu.sched.claims import Claimant, Claims, claimants_of
from greengpu.sched.claims_kept import KeptClaims
from greengpu.sched.cycle_state import CycleState
from greengpu.sched.index_order import IndexOrder
from greengpu.sched.node_rules import fits_asleep, fits_sizes, wakeable_sizes
from greengpu.sched.order import queue_order
from greengpu.sched.pending_index import AlikeRestWaits, PendingIndex, QueueWaits, RestOfWalk
from greengpu.sched.placement import needs_healthy_gpus, place, warning_gpus_by_node
from greengpu.sched.preemption import VictimChoice
from greengpu.sched.shared_cycle import schedule_shared, split_shared
from greengpu.sched.steady import MARGIN_S as STEADY_MARGIN_S
from greengpu.sched.steady import order_unchanged_until_s
from greengpu.sched.waits import (
    WAIT_CAPACITY,
    WAIT_NO_MODEL,
    WAIT_PREEMPTING,
    WAIT_QUOTA,
    WAIT_WAKE,
    Wait,
    WaitReason,
    distinct_of,
)
from greengpu.sched.wake import WakePlan

__all__ = ["WAIT_CAPACITY", "WAIT_NO_MODEL", "WAIT_PREEMPTING", "WAIT_QUOTA", "WAIT_WAKE", "CycleResult",
           "schedule", "schedule_cycle"]
_RESERVED_WAITS_KEPT = 4096
_KIND_WAITS = frozenset({WaitReason.QUOTA, WaitReason.NO_MODEL})
"""Waits that hold for every job of a kind whatever its duration (no backfill changes them)."""
EVERYWHERE = "every free node is owed"
"""A kind's memo read only that every free node is owed to another tenant's claimant (`_CycleState._claims_read`)."""


def alike_key(job: Job) -> tuple[object, ...]:
    """Everything a waiting job's quota verdict and wait depend on but its duration: jobs with the same key
    are decided alike (the duration only decides whether they may backfill). Placement keeps some classes off
    warning GPUs (`needs_healthy_gpus`), so two jobs alike but for that may be placed apart; node constraints
    (`Job.node_rule`, None for nearly every job) decide which nodes it may use."""
    return (job.tenant, job.gpu_types, job.units, job.gpus_per_node, job.interruptible, needs_healthy_gpus(job),
            job.node_rule)


@dataclass(frozen=True)
class CycleResult:
    """What one cycle decided, and why the rest waits (typed: greengpu.sched.waits)."""

    actions: tuple[Action, ...]
    waits: Mapping[str, Wait] = field(default_factory=dict)
    reservations: tuple[Reservation, ...] = ()
    withdrawn: tuple[str, ...] = ()
    """Running jobs asked to checkpoint and stop for a job that no longer waits: they keep running,
    and the body clears their preemption signal (a checkpoint taken meanwhile costs nothing)."""
    unchanged_until_s: float = -math.inf
    """A cycle before this time on the same running jobs, queue and node states, the clock the only change,
    would decide exactly as this one did: nothing, with the same waits (greengpu.sched.steady). -inf: no
    such promise (the cycle acted, or read the clock where it moves at any time)."""

    @property
    def waiting(self) -> dict[str, str]:
        """Why each waiting job waits, in the words of the JSON outputs."""
        return {job_id: wait.text for job_id, wait in self.waits.items()}


class _Cycle(CycleState):
    """The decisions of one cycle, in the order of the module docstring."""

    claims: Claims | KeptClaims
    """The nodes owed to waiting jobs that may reclaim lent GPUs (greengpu.sched.claims)."""
    _lending_checked = False
    _wakes_claimed = False
    """Whether plan_wakes gave a job room on a waking or asleep node (which jobs get it follows the order)."""

    def expire_grace(self, pending: tuple[PendingJob, ...]) -> None:
        if self.shortcuts and not self.books.signalled:
            return  # no running job was asked to stop (the books know without walking them)
        grace_s = self.policy.preemption.grace_s
        pending_ids: set[str] | None = None  # built only when some job was asked to stop
        for running in self.snapshot.running:
            if running.preempt_signalled_s is None:
                continue
            if pending_ids is None:
                pending_ids = {p.job.job_id for p in pending}
            beneficiary = running.preempted_for
            if beneficiary is not None and beneficiary not in pending_ids:
                # The job it was asked to stop for no longer waits (it started elsewhere, e.g. on GPUs
                # that freed up or a node that woke during the grace, or it left): stopping the victim
                # now would only destroy its work. The preemption is withdrawn; it keeps running.
                self.withdrawn.append(running.job.job_id)
                continue
            self.finder.stopping.add(running.job.job_id)
            nodes = {self.state.index[n] for n in running.nodes if n in self.state.index}
            if beneficiary is not None and beneficiary in pending_ids:
                self._hold(beneficiary, nodes)
                self.stopping_for.setdefault(beneficiary, []).append(running)
            if self.now_s >= running.preempt_signalled_s + grace_s:
                self._stop(running, beneficiary or "", "checkpoint grace expired")

    def admit(self, pending: PendingJob, slots: tuple[GpuSlot, ...], backfilled: bool) -> bool:
        job = pending.job
        node = self.state.index[slots[0].node]
        model = self.state.model[node]
        problem = self.ledger.admission_problem(job, model, job.units)
        if problem is None:
            units_by_node: dict[str, int] = {}
            for slot in slots:
                units_by_node[slot.node] = units_by_node.get(slot.node, 0) + slot.units
            problem = self.ledger.memory_problem(job, self.ledger.job_memory_gb(job, units_by_node, units_by_node))
        if problem is not None:
            self._set_wait(job, WaitReason.QUOTA, problem)
            return False
        self.state.allocate(slots)
        running = RunningJob(job=job, slots=slots, start_time_s=self.now_s,
                             expected_end_s=self.now_s + job.duration_s)
        self._charge(running, 1)
        self.started.append(running)
        own = self.held_for.pop(job.job_id, None)
        if own:
            self._layout_changed()
            # The nodes it held and does not use are open to every job again: capacity that was not there when
            # the failure frontiers were found (as if GPUs were released).
            self._released_version += 1
            for node_index in own:
                self.holder_of.pop(node_index, None)
        self.actions.append(PlaceJob(job.job_id, slots, backfilled))
        return True

    def quota_blocked(self, job: Job, models: tuple[str, ...]) -> Wait | None:
        if not self.shortcuts:
            return self._quota_blocked(job, models)
        # The verdict reads only the job's own tenant's usage: kept until that tenant's usage changes.
        version = self.ledger.tenant_version.get(job.tenant, 0)
        key = alike_key(job)
        found = self._quota_memo.get(key)
        if found is not None and found[0] == version:
            return found[1]
        blocked = self._quota_blocked(job, models)
        self._quota_memo[key] = (version, blocked)
        return blocked

    def _quota_blocked(self, job: Job, models: tuple[str, ...]) -> Wait | None:
        if not models:
            return self.wait(job, WaitReason.NO_MODEL)
        if not self.ledger.tenant(job.tenant).quota_gpus_by_model:
            problem = self.ledger.admission_problem(job, models[0], job.units)  # one key for all models
            return None if problem is None else self.wait(job, WaitReason.QUOTA, problem)
        problems = [self.ledger.admission_problem(job, m, job.units) for m in models]
        if all(p is not None for p in problems):
            return self.wait(job, WaitReason.QUOTA, problems[0] or "")
        return None

    def try_backfill(self, pending: PendingJob, excluded: set[int], models: tuple[str, ...]) -> bool:
        job = pending.job
        ends_at = self.now_s + job.duration_s
        if ends_at > self._latest_reserved_start_s:
            return False
        if self.backfill_known_to_fail(job, models, ends_at):
            return False
        slots, _ = self._backfill_slots(pending, excluded, models, ends_at)
        return slots is not None and self.admit(pending, slots, backfilled=True)

    def _backfill_slots(self, item: PendingJob, excluded: set[int], models: tuple[str, ...],
                        ends_at_s: float) -> tuple[tuple[GpuSlot, ...] | None, bool]:
        """Where the job would backfill now, on the reserved nodes free until it ends: (slots, False). (None,
        True) when its shape fits on none of them (remembered for the shape: backfill_failed); (None, False) when
        only GPUs owed to claimants would take it (not a failure of its shape: others may use them)."""
        usable = self._backfill_nodes(ends_at_s)
        if usable and item.job.node_rule is not None:
            usable = usable - self.rules().barred(item.job)  # `only` wins over `excluded`: bar them here too
        if usable and self._lending_refuses(item.job, models):
            return None, False
        slots = place(self.state, item.job, excluded=excluded - usable, only=usable) if usable else None
        if slots is None:
            self.backfill_failed(item.job, models, ends_at_s)
            return None, True
        return self._lendable(item, excluded - usable, slots, only=usable), False

    def _backfill_nodes(self, ends_at_s: float) -> set[int]:
        """The reserved nodes a job ending at `ends_at_s` may backfill: free of reservations until then, held by
        no one."""
        return {n for n, start in self.reserved_nodes.items() if ends_at_s <= start and n not in self.holder_of}

    def waits_for_victims(self, pending: PendingJob, excluded: set[int]) -> bool:
        victims = self.stopping_for.get(pending.job.job_id)
        if not victims:
            return False
        still_running = [v for v in victims if v.job.job_id in self.finder.stopping and v.slots
                         and self._holds_slots(v)]
        for victim in still_running:
            self._release(victim.slots)
        try:
            return place(self.state, pending.job, excluded=excluded) is not None
        finally:
            for victim in still_running:
                self.state.allocate(victim.slots)

    def _holds_slots(self, victim: RunningJob) -> bool:
        # A victim killed this cycle has already given its slots back.
        return not any(isinstance(a, KillJob) and a.job_id == victim.job.job_id for a in self.actions)

    def try_preempt(self, pending: PendingJob, excluded: set[int],
                    find: Callable[[PendingJob, set[int]], VictimChoice | None] | None = None) -> bool:
        choice = (find or self.finder.find)(pending, excluded)
        if choice is None:
            return False
        job = pending.job
        grace_s = self.policy.preemption.grace_s
        for victim in choice.victims:
            if grace_s <= 0:
                self._stop(victim, job.job_id, f"preempted for {job.job_id} (no grace)")
            else:
                self.finder.stopping.add(victim.job.job_id)
                self.actions.append(PreemptJob(victim.job.job_id, job.job_id, grace_s,
                                               f"preempted for {job.job_id} (priority {job.priority})"))
                self.stopping_for.setdefault(job.job_id, []).append(victim)
        self._hold(job.job_id, choice.nodes)
        if grace_s <= 0:
            slots = place(self.state, job, excluded=self.excluded_for_job(job),
                          warning=warning_gpus_by_node(self.state, self.snapshot.node_states))  # GPU health
            if slots is not None and self.admit(pending, slots, backfilled=False):
                return True
        self._set_wait(job, WaitReason.PREEMPTING)
        return True

    def try_reserve(self, pending: PendingJob, excluded: set[int]) -> None:
        if self.books.ends is None:
            self.books.ends = ends_by_node(self.state, self.books.running.values())
        reservation = reserve(self.state, pending.job, self.books.ends, excluded, self.now_s, self.interval_s)
        if reservation is None or reservation.start_s <= self.now_s:
            return  # a job that could start now is held back by policy (e.g. whole-node reserve), not capacity
        blocked = self.wait(pending.job, WaitReason.RESERVATION)
        memo = self.books.reserved_wait_memo
        key = (blocked, reservation.nodes)
        wait = memo.get(key)
        if wait is None:
            if len(memo) >= _RESERVED_WAITS_KEPT:
                memo.clear()  # a long-lived daemon meets ever new node sets: keep the memo small
            names = self.state.names
            wait = memo[key] = replace(blocked, nodes=frozenset(names[n] for n in reservation.nodes))
        self.waits[pending.job.job_id] = wait
        self.reservations.append(reservation)
        self._layout_changed()
        self._latest_reserved_start_s = max(self._latest_reserved_start_s, reservation.start_s)
        for node in reservation.nodes:
            self.reserved_nodes[node] = min(self.reserved_nodes.get(node, reservation.start_s), reservation.start_s)

    # -------------------------------------------------------------- the cycle

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

    def _claims_read(self, everywhere: bool) -> None:
        """Note that the step being decided read the lending rule's answers: that every free node is owed
        (`everywhere`: it holds again as long as that does), or anything else (it holds until the next start)."""
        if not everywhere:
            self._claims_probe = self._epoch()
        elif self._claims_probe is None:
            self._claims_probe = EVERYWHERE

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
                    self.claims.owed_everywhere(job.tenant, models):
                return True
        del self._alike_marks[key]
        self._valid_at.pop(key, None)
        self._alike_waits.pop(key, None)
        self._alike_lending_refused.pop(key, None)
        self._alike_wait_from.pop(key, None)
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
        wait = self.quota_blocked(job, models)
        everywhere = False  # refused by the lending rule wherever it went, whatever its length
        if wait is None:
            excluded = self.excluded_for_job(job)
            everywhere = self._lending_refuses(job, models)
            if not everywhere and self._lendable(item, excluded, self._place(item, models, excluded)) is not None:
                return None
            if may_backfill and self._backfills_now(item, key, models, ends_at_s):
                return None
            wait = self.wait(job, WaitReason.WAKE if self.fits_after_wake(job, models) else WaitReason.CAPACITY)
        self._alike_waits[key] = wait
        # A quota wait, or a refusal on every free node (a backfill would be refused too), holds for every job of
        # the kind however short, while the kind's memos hold.
        self._waits_from(key, -math.inf if wait.reason in _KIND_WAITS or everywhere else ends_at_s)
        return wait

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

    def run(self) -> CycleResult:
        pending = self.snapshot.pending
        self.expire_grace(pending)
        policy = self.policy
        self.attempts_left = policy.preemption.max_attempts_per_cycle if policy.preemption.enabled else 0
        self.reservations_left = policy.backfill.reservations if policy.backfill.enabled else 0
        models_for = self.models_for
        index: PendingIndex | None = None
        in_order: Iterator[PendingJob]
        if self.shortcuts:
            # The queue kept between cycles: its order is taken lazily, as far as the cycle goes.
            index = self.books.pending
            if index is None:
                index = self.books.pending = PendingIndex(alike_key)
            if index.sync(pending, self._capacity_wait):
                in_order = index.ordered(self.now_s, policy, self.share_of)
            else:
                index = None  # the same job object twice: this cycle walks the snapshot itself
                in_order = queue_order(pending, self.now_s, policy, self.share_of)
        else:
            in_order = queue_order(pending, self.now_s, policy, self.share_of)
        preemption = policy.preemption
        self._lending_checked = preemption.enabled and preemption.reclaim
        if index is None:
            self.claims = Claims(self.state, self.ledger, self._claimants_reader(index),
                                 self.finder.reclaims_within_nominal, self.books.on_node, self.started,
                                 self.finder.stopping, self._claims_token)
        else:  # the same answers, kept between starts (cross-checked by the path above)
            self.claims = KeptClaims(self.state, self.ledger, index, self.finder.reclaims_within_nominal,
                                     self.books.on_node, self.started, self.finder.stopping, self._claims_token,
                                     self.books.running, self.finder.promised_now)
        considered: list[PendingJob] = []
        if index is not None:
            self._carried_kinds(index)
        full, kind_waits = self._walk(in_order, index, considered)
        then: Callable[[], Sequence[PendingJob]] = tuple  # waiting jobs after `considered`, in queue order
        later: Callable[[], list[PendingJob]] = list  # and the rest not yet ordered
        waits_out: Mapping[str, Wait] = self.waits
        if kind_waits is not None and index is not None:
            # Every job left waits as the first of its kind did and none can start: the rest of the walk would
            # change nothing. Its jobs are taken in the walk's own order only if read (see AlikeRestWaits).
            remaining = self._rest_of_walk(in_order, index)
            then = remaining.jobs
            waits_out = AlikeRestWaits(self.waits, remaining, alike_key, kind_waits,
                                       distinct_of([*kind_waits.values(), *distinct_of(self.waits)]))
        elif full:
            # The cluster is full for ordinary jobs: only jobs with held nodes (their victims were just
            # stopped) and jobs short enough to backfill reserved nodes can still start. Skip the rest.
            decided = self.waits.keys() | {a.job_id for a in self.actions if isinstance(a, PlaceJob)}
            later = lambda: [p for p in pending if p.job.job_id not in decided]  # noqa: E731
            special_ids: Callable[[], set[str]] = set
            if index is not None:
                special, special_ids, verdicts = self._special_indexed(index, decided)
            else:
                skipped_waits, special_list = self._skipped(pending, decided)
                special = lambda: special_list  # noqa: E731
                verdicts = None
            if verdicts is not None:
                # None of them can start: their waits do not depend on their order, so they are ordered only if read.
                then = lambda: tuple(queue_order(special(), self.now_s, policy, self.share_of))  # noqa: E731
            else:
                special_order: Iterator[PendingJob]
                if index is not None:  # the kept queue's order, as queue_order would give it, taken a run at a time
                    special_order = index.ordered(self.now_s, policy, self.share_of,
                                                  among=special_ids())
                else:
                    special_order = queue_order(special(), self.now_s, policy, self.share_of)
                _, special_waits = self._walk(special_order, index, considered, full=True)
                if special_waits is not None and index is not None:
                    then = self._rest_of_walk(special_order, index).jobs
                    short = index.short_enough(self.now_s, self._latest_reserved_start_s)
                    verdicts = [(kind, entries[:count], special_waits[kind])
                                for kind, entries, count in short if kind in special_waits]
            placed = [a.job_id for a in self.actions if isinstance(a, PlaceJob)]  # a special job may have started
            if index is not None:
                # The skipped jobs' capacity waits are not built unless read (see QueueWaits).
                waits, started = self.waits, set(placed)
                by_kind = verdicts or []
                distinct = index.kind_waits(lambda job_id: job_id in waits or job_id in decided or job_id in started,
                                            {kind: len(entries) for kind, entries, _ in by_kind})
                distinct.extend(wait for _, _, wait in by_kind)
                waits_out = QueueWaits(pending, self._capacity_wait, decided, waits, placed,
                                       distinct_of([*distinct, *distinct_of(waits)]),
                                       [(entries, wait) for _, entries, wait in by_kind])
            else:
                for job_id in decided:  # decided jobs come after the skipped ones, in the order they were decided
                    skipped_waits.pop(job_id, None)
                skipped_waits.update(self.waits)
                for job_id in placed:
                    skipped_waits.pop(job_id, None)
                waits_out = self.waits = skipped_waits
        waits_out = self.plan_wakes(considered, then, later, models_for, waits_out)
        if index is not None:
            self._carry_kinds()
        # The claims read this cycle's changes token (a reference back to it): dropped now, so that reference
        # counting frees both (a replay runs with the cyclic collector off, and would keep every cycle).
        del self.claims
        return CycleResult(tuple(self.actions), waits_out, tuple(self.reservations), tuple(self.withdrawn),
                           self._unchanged_until_s(index))

    def _unchanged_until_s(self, index: PendingIndex | None) -> float:
        """`CycleResult.unchanged_until_s` for this cycle (greengpu.sched.steady)."""
        if not self.shortcuts or index is None or self.actions or self.withdrawn:
            return -math.inf
        if self.books.signalled or self.finder.stopping or self.finder.read_clock or self._wakes_claimed:
            return -math.inf
        policy = self.policy
        if policy.fair_share.usage_weight:
            return -math.inf  # shares read decayed past usage, which the clock moves
        until = order_unchanged_until_s(index, self.head, self.now_s, policy, self.share_of)
        for reservation in self.reservations:
            item = index.by_job_id.get(reservation.job_id)
            if item is None or self.books.ends is None:
                return -math.inf
            until = min(until, reservation_unchanged_until_s(self.state, item.job, self.books.ends, self.now_s,
                                                             self.interval_s))
        return until - STEADY_MARGIN_S

    def _walk(self, in_order: Iterator[PendingJob], index: PendingIndex | None, considered: list[PendingJob],
              full: bool = False) -> tuple[bool, dict[Hashable, Wait] | None]:
        """Decide the jobs of `in_order` in turn (each appended to `considered`) until the cluster is full for
        ordinary jobs (first value True) or every job left waits as the first of its kind did (second value:
        each kind's wait); else to the end of the queue. `full`: the cluster is full already (`in_order`
        holds the jobs that may still start), so only the second stop applies.

        Once no preemption attempt or reservation is left, the kinds whose every undecided job must wait are
        found once per change of the cycle's state (`_waiting_kinds`), and their jobs take that wait without
        being asked again, taken from the kept queue's order a run at a time (`_skip_known`): the walk does
        Python work only for jobs that might start, and a step per job only to record its wait."""
        models_for = self.models_for
        waits = self.waits
        runs = in_order if isinstance(in_order, IndexOrder) else None
        # Each job's alike_key, found when the kept queue took the job in.
        kind_of = cast(Mapping[str, tuple[object, ...]], index.kind_of) if index is not None else None
        # Found only once no job with held nodes or victims of its own waits undecided (none gains any then). Each
        # kind's entry holds while its memos do (`_valid_now`): a start drops only the kinds it could change.
        waiting_kinds: dict[Hashable, tuple[Wait, object]] = {}
        seen_token: tuple[int, int] | None = None
        asked = False  # _waiting_kinds was asked since the state last changed
        asked_kinds = 0  # how many kinds it found waiting then
        waited_since = 0  # jobs that waited since the state last changed, or since the kinds were last asked
        # Asking every kind costs about one question per kind; the walk asks a job only when its kind's
        # memo is gone. So the kinds are asked once as many jobs have waited as there are kinds: a queue where
        # jobs start often pays per job, never per kind per start, and a queue where nothing starts is skipped
        # after one round of questions (at most twice the job-by-job cost).
        ask_after = len(index.by_kind) if index is not None else 0
        for item in in_order:
            considered.append(item)
            job = item.job
            if not self.shortcuts:
                self.consider(item, models_for(job))
            elif self.attempts_left or self.reservations_left:
                self.head.append(item)
                # A job alike to one that waits for a node to wake waits for it too (`_remember_wake`): in a
                # queue behind sleeping nodes that is most of the jobs asked while attempts are left.
                wait = self._known_wait(job, kind_of[job.job_id] if kind_of is not None else alike_key(job))
                if wait is not None and wait.reason is WaitReason.WAKE:
                    waits[job.job_id] = wait
                else:
                    self.consider(item, models_for(job))
            else:
                key = kind_of[job.job_id] if kind_of is not None else alike_key(job)
                entry = waiting_kinds.get(key) if waiting_kinds else None
                if entry is not None and not (self._alike_marks.get(key) is entry[1]
                                              and self._valid_now(key, job, self._epoch())):
                    del waiting_kinds[key]
                    entry = None
                if entry is not None:
                    waits[job.job_id] = entry[0]  # and on to the checks below: a start may have filled the cluster
                else:
                    wait = self._known_wait(job, key)
                    if wait is not None:
                        waits[job.job_id] = wait
                    else:
                        self.consider_alike(item, models_for(job), key)
            if index is None or self.attempts_left or self.reservations_left:
                if job.job_id in waits and not full and self._nothing_left_to_try():
                    return True, None
                continue
            token = self._alike_state()
            if token != seen_token:
                waiting_kinds = {}  # GPUs released or nodes held: every kind is asked again
                seen_token, asked, waited_since = token, False, 0
            if job.job_id not in waits:
                continue
            if not full and self._nothing_left_to_try():
                return True, None
            waited_since += 1
            if waited_since >= ask_after and (not asked or len(waiting_kinds) < asked_kinds):
                asked, waited_since = True, 0
                found = self._waiting_kinds(index)
                if found is not None:
                    kinds, every_kind = found
                    if every_kind:
                        return False, kinds
                    marks = cast(dict[Hashable, tuple[int, object]], self._alike_marks)
                    waiting_kinds = {key: (wait, marks.get(key)) for key, wait in kinds.items()}
                    asked_kinds = len(waiting_kinds)
            if asked and runs is not None:
                self._skip_known(runs, index, waiting_kinds, considered)
        return False, None

    def _carry_kinds(self) -> None:
        """Keep for the next cycle the kinds whose every job waits for a reason that outlives the cycle: a quota
        wait (it reads only its tenant's usage, whose version the books keep) or a refusal on every free node (the
        next cycle asks `owed_everywhere` again before it believes it). Other waits read free GPUs, which ends and
        arrivals between cycles change."""
        versions = self.ledger.tenant_version
        self.books.kinds = {key: (wait, version, claims) for key, (wait, (version, claims)) in
                            self._durable_kinds().items() if versions.get(wait.tenant, 0) == version}

    def _carried_kinds(self, index: PendingIndex) -> None:
        """Take in the kinds the last cycle carried (`_carry_kinds`) that still wait in the queue and whose tenant's
        usage is the same: every job of such a kind waits without being asked, while its memo holds (`_kind_valid`
        asks `owed_everywhere` again for a refusal). A refusal's wait is found again: whether a sleeping node could
        take the kind is this cycle's."""
        carried = self.books.kinds
        if not carried:
            return
        self._sync_alike_memos()
        versions = self.ledger.tenant_version
        by_kind = index.by_kind
        wake_memo: dict[tuple[object, ...], bool] = {}
        for key, (wait, version, claims) in carried.items():
            entries = by_kind.get(key)
            if not entries or versions.get(wait.tenant, 0) != version:
                continue
            if claims is EVERYWHERE:
                job = entries[0][2].job
                shape = (job.gpu_types, job.units, job.gpus_per_node)
                wakes = wake_memo.get(shape)
                if wakes is None:
                    wakes = wake_memo[shape] = self.fits_after_wake(job, self.models_for(job))
                wait = self.wait(job, WaitReason.WAKE if wakes else WaitReason.CAPACITY)
            self._keep_kind(key, wait, (version, claims))

    def _epoch(self) -> tuple[int, tuple[int, int, int]]:
        """Changes with every start, job asked to stop, promise and release: what a kind found valid at one epoch
        is valid for the whole of it."""
        return (len(self.started), self._claims_token())

    def _valid_now(self, key: tuple[object, ...], job: Job, epoch: tuple[int, tuple[int, int, int]]) -> bool:
        """`_kind_valid`, remembered for the epoch."""
        if self._valid_at.get(key) == epoch:
            return True
        if self._kind_valid(key, job, self.models_for(job)):
            self._valid_at[key] = epoch
            return True
        return False

    def _skip_known(self, order: IndexOrder, index: PendingIndex, kind_waits: dict[Hashable, tuple[Wait, object]],
                    considered: list[PendingJob]) -> None:
        """Take from `order`, up to the first job that might start, every job the walk would give a wait without
        asking: its kind's (`kind_waits`, from `_waiting_kinds`, while its memos hold) or the one `_known_wait`
        gives. Nothing changes while jobs only wait (not the state, nor the shares the order reads, nor whether
        anything is left to try), so each costs one step of the merge and its wait (IndexOrder.take_while)."""
        if self._alike_state() != self._alike_token:
            return
        kind_of, waits, now_s = index.kind_of, self.waits, self.now_s
        marks, alike_waits, wait_from = self._alike_marks, self._alike_waits, self._alike_wait_from
        epoch = self._epoch()
        valid_at = self._valid_at
        own = self.held_for.keys() | self.stopping_for.keys()  # decided on their own, never as their kind

        def wait_of(entry: tuple[float, str, PendingJob]) -> Wait | None:
            job_id = entry[1]
            if own and job_id in own:
                return None
            key = cast(tuple[object, ...], kind_of[job_id])
            if valid_at.get(key) != epoch and not self._valid_now(key, entry[2].job, epoch):
                kind_waits.pop(key, None)
                return None  # its kind's memos no longer hold: the walk asks it
            known = kind_waits.get(key)
            if known is not None and marks.get(key) is known[1]:
                return known[0]
            bound = wait_from.get(key)
            if bound is None or now_s + entry[2].job.duration_s < bound:
                return None  # it might start: the walk asks it
            return alike_waits[key]

        order.take_while(wait_of, cast(dict[str, object], waits), considered)

    def _rest_of_walk(self, in_order: Iterator[PendingJob], index: PendingIndex) -> RestOfWalk:
        """The jobs `in_order` has not yet given, in its order, taken only if asked for (after the cycle, maybe)."""
        for _, tenant in index.by_priority:
            self.share_of(tenant)  # remembered now: the ledger the shares read moves on after the cycle
        return RestOfWalk(in_order)

    def _waiting_kinds(self, index: PendingIndex) -> tuple[dict[Hashable, Wait], bool] | None:
        """Once no preemption attempt or reservation is left: the kinds of job whose every undecided job would wait
        as the first of its kind (`wait_alike`), with that wait; and whether that is every job not yet decided.
        Changes nothing but memos. None while a job with held nodes or victims of its own waits undecided.

        Asks two jobs per kind, not every job: its longest waiting one (a job alike waits alike unless it
        can backfill) and its shortest one short enough to backfill (if it cannot, no job of its kind ending
        later can: it may use only a subset of the same reserved nodes)."""
        waits = self.waits
        started = {running.job.job_id for running in self.started}

        def undecided(job_id: str) -> bool:
            return job_id not in waits and job_id not in started

        if any(undecided(job_id) and job_id in index.by_job_id for job_id in (*self.held_for, *self.stopping_for)):
            # Not before the jobs with nodes or victims of their own are decided: they are never decided as their
            # kind is (they may start on their nodes), and one that starts frees the rest of the nodes it held.
            return {}, False
        now_s, latest_s = self.now_s, self._latest_reserved_start_s
        models_for = self.models_for
        found: dict[Hashable, Wait] = {}
        every_kind = True
        for kind, entries in index.by_kind.items():
            longest = next((e for e in reversed(entries) if undecided(e[1])), None)
            if longest is None:
                continue  # every job of its kind was decided
            wait = self.wait_alike(longest[2], models_for(longest[2].job))
            if wait is not None and now_s + entries[0][0] <= latest_s:
                short = next(e[2] for e in entries if undecided(e[1]))
                if now_s + short.job.duration_s <= latest_s and self.wait_alike(short, models_for(short.job)) is None:
                    wait = None
            if wait is None:
                every_kind = False  # one of its jobs might start: the walk decides them in turn
            else:
                found[kind] = wait
        return found, every_kind

    def _claimants_reader(self, index: PendingIndex | None) -> Callable[[], dict[str, Claimant]]:
        """How the cycle's claimants are read when first needed, leaving out the jobs the cycle started so far:
        from the kept queue (each kind's shortest job and each tenant's oldest), or by walking the snapshot; the
        same claimants either way."""
        started = self.started
        if index is None:
            pending = self.snapshot.pending

            def from_snapshot() -> dict[str, Claimant]:
                gone = {r.job.job_id for r in started}
                return claimants_of(p.job for p in pending if p.job.job_id not in gone)
            return from_snapshot

        def from_index() -> dict[str, Claimant]:
            gone = {r.job.job_id for r in started}
            first: dict[str, float] = {}
            for (_, tenant), entries in index.by_priority.items():
                submit_s = next((e[0] for e in entries if e[1] not in gone), math.inf)
                if submit_s < first.get(tenant, math.inf):
                    first[tenant] = submit_s
            shortest = (next((e[2].job for e in entries if e[1] not in gone), None)
                        for entries in index.by_kind.values())
            return claimants_of((job for job in shortest if job is not None), first)
        return from_index

    def _claims_token(self) -> tuple[int, int, int]:
        """What the lending rule's kept answers read besides starts: jobs asked to stop, GPUs promised to
        reclaims, GPUs released (greengpu.sched.claims_kept)."""
        return (len(self.finder.stopping), self.finder.promises, self._released_version)

    def _capacity_wait(self, job: Job) -> Wait:
        return self.wait(job, WaitReason.CAPACITY)

    def _special_indexed(self, index: PendingIndex, decided: set[str]) -> tuple[
            Callable[[], list[PendingJob]], Callable[[], set[str]],
            list[tuple[Hashable, list[tuple[float, str, PendingJob]], Wait]] | None]:
        """`_skipped`'s special jobs and their ids (each built only if asked for) from the kept queue, and when
        none of them can start or backfill now, their waits: per kind of job, its short jobs (a prefix, decided
        ones included: they keep their own waits) and their wait; else None. One question per kind of job
        (only the shortest of a kind could backfill where the others cannot), not per job."""
        now_s, latest_s = self.now_s, self._latest_reserved_start_s
        held = [index.by_job_id[j] for j in self.held_for if j in index.by_job_id and j not in decided]
        short = list(index.short_enough(now_s, latest_s))  # (kind, its jobs shortest first, how many are short)

        def special() -> list[PendingJob]:
            return [index.by_job_id[job_id] for job_id in special_ids()]

        def special_ids() -> set[str]:
            ids = {e[1] for _, entries, count in short for e in itertools.islice(entries, count)}
            ids -= decided
            ids.update(p.job.job_id for p in held)
            return ids

        if held or any(self._is_short(index, job_id, decided) for job_id in self.stopping_for):
            return special, special_ids, None  # a job with victims or held nodes of its own is decided on its own
        verdicts: list[tuple[Hashable, list[tuple[float, str, PendingJob]], Wait]] = []
        for kind, entries, count in short:
            first = 0
            while first < count and entries[first][1] in decided:
                first += 1
            if first == count:
                continue
            item = entries[first][2]  # the shortest of its kind: if it cannot backfill, none of its kind can
            wait = self.wait_alike(item, self.models_for(item.job))
            if wait is None:
                return special, special_ids, None
            verdicts.append((kind, entries[:count], wait))
        return special, special_ids, verdicts

    def _is_short(self, index: PendingIndex, job_id: str, decided: set[str]) -> bool:
        """Whether `job_id` waits undecided and is short enough to backfill reserved nodes."""
        item = index.by_job_id.get(job_id)
        return item is not None and job_id not in decided and \
            self.now_s + item.job.duration_s <= self._latest_reserved_start_s

    def _skipped(self, pending: tuple[PendingJob, ...], decided: set[str]) -> tuple[dict[str, Wait], list[PendingJob]]:
        """Once the cluster is full: a capacity wait for each job not decided yet (in the snapshot's order),
        and those of them that may still start (holding nodes, or short enough to backfill reserved nodes)."""
        latest_s, now_s = self._latest_reserved_start_s, self.now_s
        held_for = self.held_for
        wait = self.wait  # remembered per kind of job, so thousands of skipped jobs share a few waits
        special: list[PendingJob] = []
        waits: dict[str, Wait] = {}
        for item in pending:
            job = item.job
            job_id = job.job_id
            if job_id in decided:
                continue
            if now_s + job.duration_s <= latest_s or job_id in held_for:
                special.append(item)
            waits[job_id] = wait(job, WaitReason.CAPACITY)
        return waits, special

    def plan_wakes(self, considered: list[PendingJob], then: Callable[[], Sequence[PendingJob]],
                   later: Callable[[], list[PendingJob]], models_for: Callable[[Job], tuple[str, ...]],
                   waits: Mapping[str, Wait]) -> Mapping[str, Wait]:
        """Give jobs blocked for capacity room on waking or asleep nodes; wake the asleep ones needed.
        Returns the waits, changed where a job now waits for a node to wake.

        In queue order: `considered` as decided, then `then` (waiting jobs not decided one by one, already
        in queue order), then the jobs of `later` not among them (ordered here)."""
        if not self.snapshot.node_states:
            return waits
        if not any(w.capacity_bound for w in distinct_of(waits)):
            return waits
        plan = WakePlan(self.state, self.snapshot.node_states)
        if not plan.has_room():
            return waits
        changed = dict(waits)
        then_jobs = then()
        decided = {p.job.job_id for p in itertools.chain(considered, then_jobs)}
        unconsidered = [p for p in later() if p.job.job_id not in decided]
        # Nothing started since these waited, so the fair-share figures are those they would have been
        # decided under: ordering them now gives the order they would have had.
        rest = queue_order(unconsidered, self.now_s, self.policy, self.share_of) if unconsidered else ()
        excluded = self._excluded_for("")
        room = True
        for item in itertools.chain(considered, then_jobs, rest):
            job_id = item.job.job_id
            wait = changed.get(job_id)
            if wait is None or not wait.capacity_bound:
                continue
            job_excluded = excluded
            if item.job.node_rule is not None:
                job_excluded = excluded | self.rules().barred_asleep(item.job)
            if room and plan.claim(item.job, models_for(item.job), job_excluded):
                changed[job_id] = self.wait(item.job, WaitReason.WAKE)
                self._wakes_claimed = True
            else:
                if wait.reason is WaitReason.WAKE:  # no room after all: blocked for capacity
                    changed[job_id] = self.wait(item.job, WaitReason.CAPACITY)
                room = room and plan.has_room()
        for node, job_id in plan.to_wake.items():
            self.actions.append(WakeNode(self.state.names[node], f"needed by {job_id}"))
        return changed


def schedule_cycle(snapshot: ClusterSnapshot, policy: SchedulerPolicy, interval_s: float = 60.0,
                   incremental: bool = True, purpose: str = "main") -> CycleResult:
    """Run one scheduling cycle on `snapshot` under `policy`: actions plus why the rest waits.

    `incremental=False` builds the free-GPU index and quota ledger from scratch instead of updating
    the remembered ones (see greengpu.sched.books), and decides every waiting job on its own instead
    of letting jobs alike share what was found for the first of them: the results are identical. `purpose` names a
    separate set of remembered books for what-if cycles whose snapshots differ systematically.
    """
    # A cycle allocates hundreds of thousands of short-lived tuples but builds no reference cycles, so
    # the cyclic collector only re-walks the (large, long-lived) snapshot: measured at ~40% of a
    # 50,000-job cycle. Pause it for the cycle; reference counting still frees everything.
    was_enabled = gc.isenabled()
    gc.disable()
    whole, shared = split_shared(snapshot)  # MIG and time-slice jobs: their own pass (greengpu.sched.shared_cycle)
    books = books_for(whole, policy.borrow_non_interruptible, incremental, purpose)
    try:
        cycle = _Cycle(whole, policy, interval_s, books, shortcuts=incremental)
        result = cycle.run()
        books.commit(cycle.started, cycle.stopped)
        if shared:
            extra = schedule_shared(snapshot, policy, shared, result.actions, memo=incremental)
            result = replace(result, actions=result.actions + tuple(extra.actions),
                             waits={**result.waits, **extra.waits},
                             unchanged_until_s=min(result.unchanged_until_s, extra.unchanged_until_s))
        return result
    except BaseException:
        forget_books(snapshot.cluster)
        raise
    finally:
        if was_enabled:
            gc.enable()


def schedule(snapshot: ClusterSnapshot, policy: SchedulerPolicy, interval_s: float = 60.0) -> tuple[Action, ...]:
    """The actions of one scheduling cycle."""
    return schedule_cycle(snapshot, policy, interval_s).actions
