"""The steps that decide one waiting job: expire the graces run out, check its quota, place it, let it backfill
reserved nodes, wait for the victims stopping for it, preempt, or reserve nodes so that backfill cannot starve it."""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import replace

from greengpu.model import (
    GpuSlot,
    Job,
    KillJob,
    PendingJob,
    PlaceJob,
    PreemptJob,
    RunningJob,
)
from greengpu.sched.backfill import ends_by_node, reserve
from greengpu.sched.cycle.lending import Lending
from greengpu.sched.cycle.vocabulary import _RESERVED_WAITS_KEPT, alike_key
from greengpu.sched.placement import place, warning_gpus_by_node
from greengpu.sched.preemption import VictimChoice
from greengpu.sched.waits import (
    Wait,
    WaitReason,
)


class StartSteps(Lending):
    """Each way one waiting job may start, be held for, or be reserved for."""

    def expire_grace(self, pending: tuple[PendingJob, ...], waiting_ids: Collection[str] | None = None) -> None:
        """Take in the running jobs asked to stop: withdraw those whose beneficiary no longer waits, hold the nodes of
        the rest for it, and stop those whose grace has run out. `waiting_ids`: the ids of `pending`, when the caller
        has them (else built here, only if some job was asked to stop)."""
        if self.shortcuts and not self.books.signalled:
            return  # no running job was asked to stop (the books know without walking them)
        grace_s = self.policy.preemption.grace_s
        pending_ids = waiting_ids
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

    def quota_blocked(self, job: Job, models: tuple[str, ...], key: tuple[object, ...] | None = None) -> Wait | None:
        """Why quota keeps `job` waiting, or None (`key`: its `alike_key`, when the caller has it)."""
        if not self.shortcuts:
            return self._quota_blocked(job, models)
        # The verdict reads only the job's own tenant's usage: kept until that tenant's usage changes.
        version = self.ledger.tenant_version.get(job.tenant, 0)
        if key is None:
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
