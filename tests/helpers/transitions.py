"""Carry out scheduler actions on a snapshot: how a body that trusts nothing applies them (the tests' body).

The scheduling tests and benchmarks drive the core through this miniature body; the simulator has its
own, which also integrates power and paces (greengpu/sim/engine.py). It refuses actions that would
break the cluster's physics (a slot already taken, a job that is not pending) rather than silently
accepting them, so a scheduler bug shows up as an error, not as a wrong figure.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

from greengpu.model import (
    GPU_UNITS,
    Action,
    ClusterSnapshot,
    Job,
    KillJob,
    PendingJob,
    PlaceJob,
    PreemptionRecord,
    PreemptJob,
    RunningJob,
)


def remaining_work(victim: RunningJob, now_s: float, speed: float = 1.0) -> Job:
    """The victim's job with the work saved by its last checkpoint taken off its duration.

    `speed` is the rate it ran at relative to uncapped (a capped job does less work per second).
    """
    from greengpu.sched.preemption import last_checkpoint_s

    saved_s = (last_checkpoint_s(victim, now_s) - victim.start_time_s) * speed
    return replace(victim.job, duration_s=max(1.0, victim.job.duration_s - saved_s))


class InvalidAction(Exception):
    """An action that cannot be carried out on this snapshot."""


def apply_scheduler_actions(snapshot: ClusterSnapshot, actions: Iterable[Action]) -> ClusterSnapshot:
    """A new snapshot with PlaceJob, PreemptJob and KillJob carried out at `snapshot.time_s`.

    Killed (preempted) jobs go back to the queue with a record of who preempted them.
    """
    now_s = snapshot.time_s
    running = {r.job.job_id: r for r in snapshot.running}
    pending = {p.job.job_id: p for p in snapshot.pending}
    used: dict[tuple[str, int], int] = {}
    for r in snapshot.running:
        for slot in r.slots:
            used[(slot.node, slot.gpu_index)] = used.get((slot.node, slot.gpu_index), 0) + slot.units
    for action in actions:
        if isinstance(action, KillJob):
            victim = running.pop(action.job_id, None)
            if victim is None:
                raise InvalidAction(f"kill of {action.job_id}, which is not running")
            for slot in victim.slots:
                used[(slot.node, slot.gpu_index)] -= slot.units
            history = victim.preemptions
            by_job_id = action.for_job_id or victim.preempted_for
            if by_job_id is not None:
                history = (*history, PreemptionRecord(now_s, by_job_id))
            pending[victim.job.job_id] = PendingJob(remaining_work(victim, now_s), preemptions=history)
        elif isinstance(action, PreemptJob):
            victim = running.get(action.job_id)
            if victim is None:
                raise InvalidAction(f"preemption of {action.job_id}, which is not running")
            running[action.job_id] = replace(victim, preempt_signalled_s=now_s, preempted_for=action.for_job_id)
        elif isinstance(action, PlaceJob):
            waiting = pending.pop(action.job_id, None)
            if waiting is None:
                raise InvalidAction(f"placement of {action.job_id}, which is not pending")
            for slot in action.slots:
                key = (slot.node, slot.gpu_index)
                if used.get(key, 0) + slot.units > GPU_UNITS:
                    raise InvalidAction(f"placement of {action.job_id} on taken GPU {slot.node}:{slot.gpu_index}")
                used[key] = used.get(key, 0) + slot.units
            running[action.job_id] = RunningJob(
                job=waiting.job, slots=action.slots, start_time_s=now_s,
                expected_end_s=now_s + waiting.job.duration_s, preemptions=waiting.preemptions)
    return replace(snapshot, running=tuple(running.values()), pending=tuple(pending.values()))
