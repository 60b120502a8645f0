"""Whether a reclaim is worth the work it destroys: the claimant's gain from starting now against waiting for
the GPUs that free up on their own (greengpu.sched.preemption, its docstring states the rule)."""

from __future__ import annotations

import bisect
import math
from collections.abc import Collection, Sequence

from greengpu.model import GPU_UNITS, Job, PendingJob, RunningJob
from greengpu.sched.placement import chunks_for
from greengpu.sched.preemption.eligibility import Eligibility
from greengpu.sched.preemption.rules import WAIT_SENSITIVE_CLASSES, NodeEnd, free_after_s, lost_gpu_s


class ReclaimWorth:
    """Weighs a victim set taken as quota: when would the claimant start without it?"""

    def __init__(self, books: Eligibility, ahead_memo: list[object] | None = None) -> None:
        self.books = books
        self._ahead_memo = ahead_memo
        """[pending, submit times, cumulative units] of the last queue weighed, kept by the caller between cycles
        (`_ahead`): the queue of a saturated cluster is mostly the same from one cycle to the next."""
        self._ends: dict[int, list[NodeEnd]] | None = None
        """Per node, the running jobs' expected ends still to come (built on the first reclaim weighed)."""
        self._queue: tuple[list[float], list[int], list[tuple[float, int]], int] | None = None
        """The waiting jobs' submit times and cumulative GPUs, the running jobs' ends and GPUs, the free GPUs."""

    def outranks(self, job: Job, victim: RunningJob) -> bool:
        """Whether `job` may take `victim` by priority (not only as quota)."""
        return self.books.policy.priority_preemption and victim.job.priority < job.priority

    def reclaim_pays(self, pending: PendingJob, victims: Sequence[RunningJob], excluded: Collection[int],
                     models: Sequence[str]) -> bool:
        """Whether stopping `victims` for `pending` is worth the work it destroys.

        A set the job takes by priority alone is always worth it (priority is the site's own word on whose
        work matters more). A set taken as quota is stopped when the work lost is less than the job's GPUs
        times the time it gains (its expected start without preemption, minus the checkpoint grace it waits
        either way), or once the job has waited as long as the bound: its GPUs, idle since it was submitted,
        have missed as much work as the victims had unsaved then."""
        job = pending.job
        books = self.books
        if all(self.outranks(job, v) for v in victims):
            return True
        if job.job_class in WAIT_SENSITIVE_CLASSES or job.deadline_s is not None:
            return True  # its queue time is not ours to spend
        lost_s = sum(books.lost_now_gpu_s(v) for v in victims)
        if lost_s <= 0.0:
            return True
        gpus = job.units / GPU_UNITS
        waited_s = books.now_s - job.submit_time_s
        unsaved_when_submitted_s = sum(lost_gpu_s(v, job.submit_time_s) for v in victims
                                       if v.start_time_s < job.submit_time_s)
        if gpus * waited_s >= unsaved_when_submitted_s:  # the bound of the quota guarantee
            return True
        start_s = max(self.expected_start_s(job, excluded, models), self.queue_start_s(job))
        return gpus * (start_s - books.now_s - books.policy.grace_s) > lost_s

    def queue_start_s(self, job: Job) -> float:
        """When the GPUs that free up on their own have served the jobs waiting since before `job` and then
        `job` itself, counted in GPUs whatever their shape or model (the shape is `expected_start_s`'s part).

        Submission order stands for queue order here: the age boost puts older jobs first, and where a
        younger job goes first (higher priority, lower fair share) the estimate errs late, towards
        reclaiming as before. Built once per cycle, on the first reclaim weighed."""
        books = self.books
        if self._queue is None:
            submitted, cumulative = self._ahead()
            freeing = sorted((r.expected_end_s, r.job.units) for r in books.running
                             if r.expected_end_s > books.now_s and r.preempt_signalled_s is None)
            state = books.state
            free_units = sum(sum(state.gpu_free[n]) for n in range(len(state.names)) if state.schedulable[n])
            self._queue = (submitted, cumulative, freeing, free_units)
        submitted, cumulative, freeing, free_units = self._queue
        before = bisect.bisect_left(submitted, job.submit_time_s)
        demand = (cumulative[before - 1] if before else 0) + job.units - free_units
        if demand <= 0:
            return books.now_s
        for end_s, units in freeing:
            demand -= units
            if demand <= 0:
                return end_s
        return math.inf

    def _ahead(self) -> tuple[list[float], list[int]]:
        """The waiting jobs' submit times in order, and the milli-GPUs asked by those submitted up to each."""
        memo = self._ahead_memo
        pending = self.books.pending
        if memo and memo[0] is pending:
            return memo[1], memo[2]  # type: ignore[return-value]
        ahead = sorted((p.job.submit_time_s, p.job.units) for p in pending)
        submitted, cumulative, total = [], [], 0
        for submit_s, units in ahead:
            total += units
            submitted.append(submit_s)
            cumulative.append(total)
        if memo is not None:
            memo[:] = [pending, submitted, cumulative]
        return submitted, cumulative

    def _node_ends(self) -> dict[int, list[NodeEnd]]:
        if self._ends is None:
            self._ends = {}
            books = self.books
            index = books.state.index
            for running in books.running:
                if running.expected_end_s <= books.now_s:
                    continue
                by_node: dict[int, list[tuple[int, int]]] = {}
                for slot in running.slots:
                    node = index.get(slot.node)
                    if node is not None:
                        by_node.setdefault(node, []).append((slot.gpu_index, slot.units))
                for node, held in by_node.items():
                    self._ends.setdefault(node, []).append((running.expected_end_s, running.job.job_id, tuple(held)))
            for entries in self._ends.values():
                entries.sort()
        return self._ends

    def expected_start_s(self, job: Job, excluded: Collection[int], models: Sequence[str]) -> float:
        """When `job` could start if nobody were preempted: the earliest time the GPUs it needs come free on
        their own, from the running jobs' expected ends (infinite when the books expect none in time).

        Ends already past are not counted (a job running over its estimate frees nothing we can count on),
        nor are the GPUs of jobs already stopping (they go to the job they stop for)."""
        ends = self._node_ends()
        books = self.books
        state = books.state
        best = math.inf
        for model in models:
            if job.is_fractional:
                chunks = [job.units]
            else:
                found = chunks_for(job, state.node_size_by_model[model])
                if found is None:
                    continue
                chunks = found
            need = max(chunks)
            times = []
            for node in range(len(state.names)):
                if state.model[node] != model or not state.schedulable[node] or node in excluded:
                    continue
                free_s = free_after_s(state.gpu_free[node], need, job.is_fractional, ends.get(node, ()),
                                      books.stopping)
                if free_s is not None:
                    times.append(free_s)
            if len(times) >= len(chunks):
                times.sort()
                best = min(best, max(books.now_s, times[len(chunks) - 1]))
        return best
