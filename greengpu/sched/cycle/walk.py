"""The cycle's entry, read as its steps: expire graces, order the queue, read the lending rule, walk the queue
deciding each job (or each kind), give the rest their waits, plan wakes for jobs blocked on capacity."""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Hashable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import cast

from greengpu.model import (
    Job,
    PendingJob,
    PlaceJob,
    WakeNode,
)
from greengpu.sched.backfill import reservation_unchanged_until_s
from greengpu.sched.claims import Claims
from greengpu.sched.claims_kept import KeptClaims
from greengpu.sched.cycle.known_kinds import KnownKinds
from greengpu.sched.cycle.vocabulary import CycleResult, alike_key
from greengpu.sched.index_order import IndexOrder
from greengpu.sched.node_rules import WAKEABLE
from greengpu.sched.order import queue_order
from greengpu.sched.pending_index import AlikeRestWaits, PendingIndex, QueueWaits
from greengpu.sched.steady import MARGIN_S as STEADY_MARGIN_S
from greengpu.sched.steady import order_unchanged_until_s
from greengpu.sched.waits import (
    Wait,
    WaitReason,
    distinct_of,
)
from greengpu.sched.wake import WakePlan


@dataclass
class _KindsAsked:
    """The walk's record of the kinds found waiting (`_waiting_kinds`) since the cycle's state last changed.

    Found only once no job with held nodes or victims of its own waits undecided (none gains any then). Each
    kind's entry holds while its memos do (`_valid_now`): a start drops only the kinds it could change.
    Asking every kind costs about one question per kind; the walk asks a job only when its kind's memo is
    gone. So the kinds are asked once as many jobs have waited as there are kinds: a queue where jobs start
    often pays per job, never per kind per start, and a queue where nothing starts is skipped after one round
    of questions (at most twice the job-by-job cost)."""

    ask_after: int
    waiting: dict[Hashable, tuple[Wait, object]] = field(default_factory=dict)
    seen_token: tuple[int, int] | None = None
    asked: bool = False
    """`_waiting_kinds` was asked since the state last changed."""
    asked_kinds: int = 0
    """How many kinds it found waiting then."""
    waited_since: int = 0
    """Jobs that waited since the state last changed, or since the kinds were last asked."""

    def changed(self, token: tuple[int, int]) -> None:
        self.waiting = {}
        self.seen_token, self.asked, self.waited_since = token, False, 0

    def due(self) -> bool:
        """Whether to ask every kind again: enough jobs waited, and not asked yet or some kind's entry went."""
        return self.waited_since >= self.ask_after and (not self.asked or len(self.waiting) < self.asked_kinds)


class Cycle(KnownKinds):
    """The decisions of one cycle, in the order of greengpu.sched.core's docstring."""

    _wakes_claimed = False
    """Whether plan_wakes gave a job room on a waking or asleep node (which jobs get it follows the order)."""

    def run(self) -> CycleResult:
        """The cycle's steps, in order (greengpu.sched.core's docstring)."""
        index = self._synced_index()
        # The kept queue knows the waiting jobs by id: a queue of 50,000 is not walked to look up a few beneficiaries.
        self.expire_grace(self.snapshot.pending, index.by_job_id if index is not None else None)
        policy = self.policy
        self.attempts_left = policy.preemption.max_attempts_per_cycle if policy.preemption.enabled else 0
        self.reservations_left = policy.backfill.reservations if policy.backfill.enabled else 0
        models_for = self.models_for
        in_order = self._queue_in_order(index)
        self._read_lending_rule(index)
        if index is not None:
            self._keep_standings(index)
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
            then, later, waits_out = self._when_full(index, considered)
        waits_out = self.plan_wakes(considered, then, later, models_for, waits_out)
        if index is not None:
            self._carry_kinds()
        # The claims read this cycle's changes token (a reference back to it): dropped now, so that reference
        # counting frees both (a replay runs with the cyclic collector off, and would keep every cycle).
        del self.claims
        return CycleResult(tuple(self.actions), waits_out, tuple(self.reservations), tuple(self.withdrawn),
                           self._unchanged_until_s(index))

    def _synced_index(self) -> PendingIndex | None:
        """The queue kept between cycles, brought up to this snapshot's; None without shortcuts, or when it cannot
        stand for the snapshot (the same job object twice: this cycle walks the snapshot itself)."""
        if not self.shortcuts:
            return None
        index = self.books.pending
        if index is None:
            index = self.books.pending = PendingIndex(alike_key)
        return index if index.sync(self.snapshot.pending, self._capacity_wait) else None

    def _queue_in_order(self, index: PendingIndex | None) -> Iterator[PendingJob]:
        """The waiting jobs in queue order, taken lazily from the queue kept between cycles where there is one."""
        if index is None:
            return queue_order(self.snapshot.pending, self.now_s, self.policy, self.share_of)
        return index.ordered(self.now_s, self.policy, self.share_of)

    def _read_lending_rule(self, index: PendingIndex | None) -> None:
        """The nodes owed to claimants within their quota, found anew or kept between starts (the same answers,
        cross-checked by the first)."""
        preemption = self.policy.preemption
        self._lending_checked = preemption.enabled and preemption.reclaim
        if index is None:
            self.claims = Claims(self.state, self.ledger, self._claimants_reader(index),
                                 self.finder.reclaims_within_nominal, self.books.on_node, self.started,
                                 self.finder.stopping, self._claims_token)
        else:
            self.claims = KeptClaims(self.state, self.ledger, index, self.finder.reclaims_within_nominal,
                                     self.books.on_node, self.started, self.finder.stopping, self._claims_token,
                                     self.books.running, self.finder.promised_now)

    def _keep_standings(self, index: PendingIndex) -> None:
        """Take the kinds' standings and vouched waits kept in the books from the last cycles (each stamped with its
        tenant's usage version, which the books' ledger keeps), unless what else they read has changed: whether the
        lending rule applies, and which nodes are asleep or on their way (a refused kind waits for capacity or for a
        node to wake). A thousand tenants' kinds are then not read afresh every cycle, only those whose tenant's
        usage moved. Cleared too once they hold far more kinds than the queue (kinds long gone)."""
        states = self.snapshot.node_states
        wakeable = frozenset(name for name, node_state in states.items()
                             if node_state.power in WAKEABLE and not node_state.drained) if states else frozenset()
        key = (self._lending_checked, isinstance(self.claims, KeptClaims), wakeable)
        books = self.books
        if books.standings_key != key or len(books.standings) > 4 * len(index.by_kind) + 1000:
            books.standings.clear()
            books.vouched.clear()
            books.vouched_refused.clear()
            books.standings_key = key
        self._kind_standing, self._vouched, self._vouched_refused = \
            books.standings, books.vouched, books.vouched_refused

    def _when_full(self, index: PendingIndex | None, considered: list[PendingJob]) -> tuple[
            Callable[[], Sequence[PendingJob]], Callable[[], list[PendingJob]], Mapping[str, Wait]]:
        """The cluster is full for ordinary jobs: only jobs with held nodes (their victims were just stopped) and
        jobs short enough to backfill reserved nodes can still start. Those are decided, the rest skipped; returns
        the waiting jobs after `considered` in queue order, the rest not yet ordered, and every job's wait."""
        pending, policy = self.snapshot.pending, self.policy
        then: Callable[[], Sequence[PendingJob]] = tuple
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
                special_order = index.ordered(self.now_s, policy, self.share_of, among=special_ids())
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
            return then, later, QueueWaits(pending, self._capacity_wait, decided, waits, placed,
                                           distinct_of([*distinct, *distinct_of(waits)]),
                                           [(entries, wait) for _, entries, wait in by_kind])
        for job_id in decided:  # decided jobs come after the skipped ones, in the order they were decided
            skipped_waits.pop(job_id, None)
        skipped_waits.update(self.waits)
        for job_id in placed:
            skipped_waits.pop(job_id, None)
        self.waits = skipped_waits
        return then, later, skipped_waits

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

        Once no preemption attempt or reservation is left, every job whose kind's wait is known (a job alike
        ending no later was asked since the state last changed, or its kind was found waiting by
        `_waiting_kinds`, asked once per change of the cycle's state) takes that wait without being asked,
        taken from the kept queue's order a run at a time (`_skip_known`): the walk does Python work only for
        jobs that might start and for the first job of each kind, and a step per job only to record its wait.
        With a thousand tenants most kinds are never asked all at once (measured: 20% off a 50,000-job cycle)."""
        waits = self.waits
        runs = in_order if isinstance(in_order, IndexOrder) else None
        # Each job's alike_key, found when the kept queue took the job in.
        kind_of = cast(Mapping[str, tuple[object, ...]], index.kind_of) if index is not None else None
        kinds = _KindsAsked(ask_after=len(index.by_kind) if index is not None else 0)
        for item in in_order:
            considered.append(item)
            job = item.job
            self._decide_in_walk(item, kind_of, kinds)
            if index is None or self.attempts_left or self.reservations_left:
                if job.job_id in waits and not full and self._nothing_left_to_try():
                    return True, None
                continue
            token = self._alike_state()
            if token != kinds.seen_token:
                kinds.changed(token)  # GPUs released or nodes held: every kind is asked again
            if job.job_id not in waits:
                continue
            if not full and self._nothing_left_to_try():
                return True, None
            kinds.waited_since += 1
            if kinds.due():
                kinds.asked, kinds.waited_since = True, 0
                found = self._waiting_kinds(index)
                if found is not None:
                    every, every_kind = found
                    if every_kind:
                        return False, every
                    marks = cast(dict[Hashable, tuple[int, object]], self._alike_marks)
                    kinds.waiting = {key: (wait, marks.get(key)) for key, wait in every.items()}
                    kinds.asked_kinds = len(kinds.waiting)
            if runs is not None:
                self._skip_known(runs, index, kinds.waiting, considered)
        return False, None

    def _decide_in_walk(self, item: PendingJob, kind_of: Mapping[str, tuple[object, ...]] | None,
                        kinds: _KindsAsked) -> None:
        """Decide one job of the walk: asked on its own while preemption attempts or reservations are left (unless
        a job alike waits for a node to wake), else given its kind's known wait, else decided for its kind."""
        job = item.job
        waits = self.waits
        if not self.shortcuts:
            self.consider(item, self.models_for(job))
            return
        key = kind_of[job.job_id] if kind_of is not None else alike_key(job)
        if self.attempts_left or self.reservations_left:
            self.head.append(item)
            # A job alike to one that waits for a node to wake waits for it too (`_remember_wake`): in a
            # queue behind sleeping nodes that is most of the jobs asked while attempts are left.
            wait = self._known_wait(job, key)
            if wait is not None and wait.reason is WaitReason.WAKE:
                waits[job.job_id] = wait
            else:
                self.consider(item, self.models_for(job))
            return
        entry = kinds.waiting.get(key) if kinds.waiting else None
        if entry is not None and not (self._alike_marks.get(key) is entry[1]
                                      and self._valid_now(key, job, self._epoch())):
            del kinds.waiting[key]
            entry = None
        if entry is not None:
            waits[job.job_id] = entry[0]  # and on to the walk's checks: a start may have filled the cluster
            return
        wait = self._known_wait(job, key)
        if wait is not None:
            waits[job.job_id] = wait
        else:
            self.consider_alike(item, self.models_for(job), key)

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
