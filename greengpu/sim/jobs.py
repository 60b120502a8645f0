"""Jobs in a replay: the scheduler's actions carried out on simulated nodes.

A start puts the job's GPUs at the power its capping gives and schedules its finish at the pace it
runs; a preemption signal marks the victim; a kill requeues it with the work its last checkpoint
saved taken off; a finish frees its GPUs. While caps lift and return (work waits, then no longer),
every running job moves to its new pace and its finish moves with it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, TypeVar, overload

from greengpu.accounting.attribution import Attribution
from greengpu.model import Job, KillJob, PendingJob, PlaceJob, PreemptionRecord, PreemptJob, RunningJob
from greengpu.sched.preemption import last_checkpoint_s
from greengpu.sched.slack import QueueGuard
from greengpu.sim.checks import PlacementChecks
from greengpu.sim.clock import EventClock, EventKind
from greengpu.sim.nodes import NodeFleet, SimNode
from greengpu.sim.pace import Pacer
from greengpu.sim.results import JobOutcomes
from greengpu.sim.sleep_body import SleepBody
from greengpu.sim.usage import TenantUsage

if TYPE_CHECKING:
    from _typeshed import SupportsKeysAndGetItem

T = TypeVar("T")


class PendingJobs(dict[str, PendingJob]):
    """The waiting jobs by id, with their snapshot tuple rebuilt only after a change (`as_tuple`): on a saturated
    replay most cycles see the same queue, and the core's kept queue (greengpu.sched.pending_index) then knows
    it by identity instead of comparing thousands of jobs. Every way of changing a dict counts as a change."""

    def __init__(self) -> None:
        super().__init__()
        self._tuple: tuple[PendingJob, ...] | None = None

    def as_tuple(self) -> tuple[PendingJob, ...]:
        if self._tuple is None:
            self._tuple = tuple(self.values())
        return self._tuple

    def __setitem__(self, job_id: str, pending: PendingJob) -> None:
        self._tuple = None
        super().__setitem__(job_id, pending)

    def __delitem__(self, job_id: str) -> None:
        self._tuple = None
        super().__delitem__(job_id)

    @overload
    def pop(self, key: str, /) -> PendingJob: ...

    @overload
    def pop(self, key: str, default: PendingJob, /) -> PendingJob: ...

    @overload
    def pop(self, key: str, default: T, /) -> PendingJob | T: ...

    def pop(self, key: str, /, *default: PendingJob | T) -> PendingJob | T:
        self._tuple = None
        return super().pop(key, *default)

    def popitem(self) -> tuple[str, PendingJob]:
        self._tuple = None
        return super().popitem()

    def clear(self) -> None:
        self._tuple = None
        super().clear()

    def update(self, other: SupportsKeysAndGetItem[str, PendingJob] | Iterable[tuple[str, PendingJob]] = (),
               /, **kwargs: PendingJob) -> None:
        self._tuple = None
        super().update(other, **kwargs)

    def setdefault(self, key: str, default: PendingJob, /) -> PendingJob:
        self._tuple = None
        return super().setdefault(key, default)

    def __ior__(self, other: SupportsKeysAndGetItem[str, PendingJob]) -> PendingJobs:  # type: ignore[override,misc]
        self._tuple = None
        super().__ior__(other)
        return self


class JobRunner:
    """The running and pending jobs of a replay, and what happens to them."""

    def __init__(self, clock: EventClock, fleet: NodeFleet, pacer: Pacer, sleep: SleepBody, checks: PlacementChecks,
                 usage: TenantUsage, attribution: Attribution | None, grace_s: float) -> None:
        self.clock = clock
        self.fleet = fleet
        self.pacer = pacer
        self.sleep = sleep
        self.checks = checks
        self.usage = usage
        self.attribution = attribution
        self.grace_s = grace_s
        self.running: dict[str, RunningJob] = {}
        self.pending = PendingJobs()
        self.stopping: set[str] = set()
        self.outcomes = JobOutcomes(first_start={}, run_s={}, completed=set())
        self.segment_start: dict[str, float] = {}
        self.finish_token: dict[str, int] = {}
        """Bumped whenever a job's finish time moves (a new run, a new pace): older finish events are stale."""
        self.finish_s: dict[str, float] = {}
        """When each completed job finished (greengpu plan derives running + pending demand from it)."""
        self.last_finish_s = 0.0
        self.allocated_gpus = 0.0
        self.shares: dict[str, float] = {}
        """The share of a GPU each MIG or time-slice job held when it started (its GPU-hours count that)."""
        self.preemptions = 0
        self.lost_gpu_s = 0.0
        self.no_slack = False
        """The cluster has no GPUs to spare beyond the warm reserve: every cap lifts (greengpu.sleep.headroom)."""
        self.cap_refused: frozenset[str] = frozenset()
        """The running jobs whose caps the forecast slack does not cover (greengpu.capping.occupancy): they run
        uncapped. A job started since the last verdict is judged at the next one."""
        self._version = 0
        self._cache: tuple[int, tuple[RunningJob, ...]] | None = None

    def running_tuple(self) -> tuple[RunningJob, ...]:
        """The running jobs as one tuple, rebuilt only when they change (the core skips its diff then)."""
        if self._cache is None or self._cache[0] != self._version:
            self._cache = (self._version, tuple(self.running.values()))
        return self._cache[1]

    def any_signalled(self) -> bool:
        return any(self.running[j].preempt_signalled_s is not None for j in self.stopping if j in self.running)

    # ------------------------------------------------------------------ power and pace

    def charge(self, running: RunningJob, end_s: float, busy_w: dict[str, float] | None = None) -> None:
        """Charge a job's run segment to its tenant (ledger only); `busy_w`: its GPUs' watts per node
        over the segment (default: what its capping gives now)."""
        assert self.attribution is not None
        start_s = self.segment_start[running.job.job_id]
        if end_s <= start_s:
            return
        nodes = {name: self.fleet.nodes[name] for name in running.units_by_node}
        self.attribution.job_ran(running.job, dict(running.units_by_node), start_s, end_s,
                                 busy_w if busy_w is not None else self.pacer.busy_w(running, self.fleet.nodes),
                                 {n: node.host_idle_w for n, node in nodes.items()},
                                 {n: node.gpus for n, node in nodes.items()})

    def charge_all(self) -> None:
        for running in self.running.values():
            self.charge(running, self.clock.now_s)

    def _push_finish(self, job_id: str, at_s: float) -> None:
        token = self.finish_token.get(job_id, 0) + 1
        self.finish_token[job_id] = token
        self.clock.push(at_s, EventKind.FINISH, (job_id, token))

    def set_lifted(self, guard: QueueGuard, model_of: Mapping[str, str]) -> None:
        """Lift the caps of exactly the running jobs in a waiting job's way (of every job while the
        cluster has no slack); cap the rest again.

        This is the capping lever's answer to the slack rule (greengpu.sched.slack): a slower job in a
        waiting job's way lengthens the queue; a job in nobody's way saves energy at no queue time.
        """
        lifted = self.pacer.lifted
        for running in list(self.running.values()):
            job_id = running.job.job_id
            lift = (self.no_slack or guard.lifts(running.job.tenant, running.nodes, model_of)
                    or job_id in self.cap_refused)
            if lift == (job_id in lifted):
                continue
            watts_then = self.pacer.busy_w(running, self.fleet.nodes)
            if lift:
                lifted.add(job_id)
            else:
                lifted.discard(job_id)
            self._repace(running, watts_then)

    def withdraw(self, job_id: str) -> None:
        """The core withdrew a preemption (its beneficiary started elsewhere): the victim runs on, unsignalled."""
        signalled = self.running.get(job_id)
        if signalled is not None:
            self.running[job_id] = replace(signalled, preempt_signalled_s=None, preempted_for=None)
            self.stopping.discard(job_id)
            self._version += 1

    def _repace(self, running: RunningJob, watts_then: dict[str, float]) -> None:
        """Carry a running job over to the pace and power its capping now gives."""
        job = running.job
        job_id = job.job_id
        nodes = self.fleet.nodes
        now_s = self.clock.now_s
        speed = self.pacer.speed(job, (nodes[name] for name in running.nodes))
        watts_now = self.pacer.busy_w(running, nodes)
        if speed == self.pacer.current_speed(job_id) and watts_now == watts_then:
            return  # a class that is never capped
        if self.attribution is not None:
            self.charge(running, now_s, watts_then)
        self.outcomes.run_s[job_id] = self.outcomes.run_s.get(job_id, 0.0) + now_s - self.segment_start[job_id]
        self.segment_start[job_id] = now_s
        done_s = self.pacer.change(job_id, now_s, speed)
        for slot in running.slots:
            node = nodes[slot.node]

            def change(node: SimNode = node, gpu: int = slot.gpu_index) -> None:
                watts = node.gpu_users[gpu]
                watts.remove(watts_then[node.name])
                watts.append(watts_now[node.name])

            self.fleet.set_node(node, change, now_s)
        end_s = now_s + self.pacer.run_s(max(0.0, job.duration_s - done_s), speed)
        self.running[job_id] = replace(running, expected_end_s=end_s)
        self._version += 1
        self._push_finish(job_id, end_s)

    # ------------------------------------------------------------------ the scheduler's actions

    def arrive(self, pending: PendingJob) -> None:
        self.pending[pending.job.job_id] = pending

    def held_gpus(self, job: Job) -> float:
        """The GPUs a job counts as: `gpus`, or the share its MIG instance or replica held."""
        return self.shares.get(job.job_id, job.gpus) if job.gpu_profile else job.gpus

    def start(self, action: PlaceJob, lifted: bool) -> None:
        """Start a pending job where the core placed it (`lifted`: its cap lifted from the start)."""
        waiting = self.pending.pop(action.job_id)
        job = waiting.job
        now_s = self.clock.now_s
        if lifted or self.no_slack:
            self.pacer.lifted.add(job.job_id)  # in a waiting job's way at the last cycle
        else:
            self.pacer.lifted.discard(job.job_id)
        nodes = self.fleet.nodes
        speed = self.pacer.speed(job, (nodes[name] for name in dict.fromkeys(s.node for s in action.slots)))
        run_s = self.pacer.run_s(job.duration_s, speed)
        running = RunningJob(job=job, slots=action.slots, start_time_s=now_s, expected_end_s=now_s + run_s,
                             preemptions=waiting.preemptions)
        self.running[job.job_id] = running
        self._version += 1
        self.outcomes.first_start.setdefault(job.job_id, now_s)
        self.segment_start[job.job_id] = now_s
        self.pacer.begin(job.job_id, now_s, speed)
        self._push_finish(job.job_id, now_s + run_s)
        held = running.held_gpus  # a MIG instance or replica counts as its share
        if job.gpu_profile:
            self.shares[job.job_id] = held
        self.allocated_gpus += held
        self.usage.started(job.tenant, held, now_s)
        self.checks.started(running)
        for slot in action.slots:
            node = nodes[slot.node]

            def change(node: SimNode = node, gpu: int = slot.gpu_index) -> None:
                node.gpu_users.setdefault(gpu, []).append(self.pacer.effect(job, node)[0])

            self.fleet.set_node(node, change, now_s)
        for name in dict.fromkeys(s.node for s in action.slots):
            node = nodes[name]
            node.jobs += 1
            node.idle_since_s = None
            node.idle_token += 1

    def _stop(self, job_id: str) -> RunningJob:
        running = self.running.pop(job_id)
        now_s = self.clock.now_s
        if self.attribution is not None:
            self.charge(running, now_s)
        self._version += 1
        self.checks.stopped(running)
        self.outcomes.run_s[job_id] = self.outcomes.run_s.get(job_id, 0.0) + now_s - self.segment_start.pop(job_id)
        self.pacer.paces.pop(job_id, None)
        self.allocated_gpus -= running.held_gpus
        self.usage.stopped(running.job.tenant, running.held_gpus, now_s)
        nodes = self.fleet.nodes
        for slot in running.slots:
            node = nodes[slot.node]

            def change(node: SimNode = node, gpu: int = slot.gpu_index) -> None:
                watts = node.gpu_users[gpu]
                watts.remove(self.pacer.effect(running.job, node)[0])
                if not watts:
                    del node.gpu_users[gpu]

            self.fleet.set_node(node, change, now_s)
        for name in dict.fromkeys(s.node for s in running.slots):
            node = nodes[name]
            node.jobs -= 1
            if node.jobs == 0:
                node.idle_since_s = now_s
                node.idle_token += 1
                self.sleep.schedule_idle_check(node)
        self.pacer.end(job_id)
        return running

    def finish(self, job_id: str, token: int) -> float | None:
        """A finish event; the job's GPUs when it really finished now (None: a stale event)."""
        if job_id not in self.running or self.finish_token.get(job_id) != token:
            return None
        gpus = self.running[job_id].job.gpus
        self._stop(job_id)
        self.outcomes.completed.add(job_id)
        self.finish_s[job_id] = self.last_finish_s = self.clock.now_s
        return gpus

    def kill(self, action: KillJob) -> None:
        """Stop a job and requeue it with the work its last checkpoint saved taken off."""
        victim = self.running[action.job_id]
        now_s = self.clock.now_s
        by = action.for_job_id or victim.preempted_for
        checkpoint_s = last_checkpoint_s(victim, now_s)
        self.lost_gpu_s += (now_s - checkpoint_s) * victim.job.gpus
        saved_s = self.pacer.work_done_s(action.job_id, checkpoint_s)  # before _stop forgets the job's pace
        self._stop(action.job_id)
        self.stopping.discard(action.job_id)
        self.preemptions += 1
        history = victim.preemptions + ((PreemptionRecord(now_s, by),) if by else ())
        remaining = replace(victim.job, duration_s=max(1.0, victim.job.duration_s - saved_s))
        self.pending[victim.job.job_id] = PendingJob(remaining, preemptions=history)

    def fail(self, job_id: str) -> tuple[RunningJob, float]:
        """Stop a job a GPU failure hit and requeue it with the work since its last checkpoint lost; returns the
        job as it ran and the GPU-seconds lost (counted by the failure model, not as a preemption)."""
        victim = self.running[job_id]
        now_s = self.clock.now_s
        checkpoint_s = last_checkpoint_s(victim, now_s)
        saved_s = self.pacer.work_done_s(job_id, checkpoint_s)  # before _stop forgets the job's pace
        self._stop(job_id)
        self.stopping.discard(job_id)
        remaining = replace(victim.job, duration_s=max(1.0, victim.job.duration_s - saved_s))
        self.pending[job_id] = PendingJob(remaining, preemptions=victim.preemptions)
        return victim, (now_s - checkpoint_s) * victim.job.gpus

    def signal(self, action: PreemptJob) -> None:
        """Tell a victim to checkpoint and stop; the core kills it when the grace is over."""
        victim = self.running[action.job_id]
        self.running[action.job_id] = replace(victim, preempt_signalled_s=self.clock.now_s,
                                              preempted_for=action.for_job_id)
        self.stopping.add(action.job_id)
        self._version += 1
        self.clock.push(self.clock.now_s + self.grace_s, EventKind.TICK, "grace")
