"""The discrete-event simulator: replay a job trace through the same control tick the live bodies run.

Virtual clock (`sim/clock.py`), events in a heap: arrivals, finishes, wake and suspend completions,
exact idle-timeout checks, grace expiries and control ticks. At each point in time where something
changed, the tick's scheduling part runs (`greengpu.tick.tick.schedule`: one cycle of the core and
whether work waits), then its capping and sleep parts where their inputs changed: caps lift or come
back when "work waits" flips (`sim/pace.py`), wakes follow the core's WakeNode actions and the warm
reserve, and idle nodes are looked at when their idle timeout comes due (`sim/sleep_body.py`).
Waking asks the core itself: a second, hypothetical cycle in which sleeping nodes count as up shows
which nodes blocked jobs would go to, and exactly those are woken. Power is integrated piecewise
between events (`sim/nodes.py`); the figures are typed (`sim/results.py`).
"""

from __future__ import annotations

import gc
import math
import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import replace
from typing import Any

from greengpu.accounting.attribution import Attribution
from greengpu.accounting.meter import EnergyMeter
from greengpu.errors import BadInput
from greengpu.model import (
    Cluster,
    ClusterSnapshot,
    Job,
    KillJob,
    PendingJob,
    PlaceJob,
    PowerState,
    PreemptionRecord,
    PreemptJob,
    RunningJob,
    WakeNode,
)
from greengpu.policy import Policy
from greengpu.sched.invariants import check_invariants
from greengpu.sched.preemption import last_checkpoint_s
from greengpu.sim.checks import PlacementChecks
from greengpu.sim.clock import EventClock, EventKind
from greengpu.sim.nodes import NodeFleet, SimNode
from greengpu.sim.pace import Pacer
from greengpu.sim.results import JobOutcomes, SimResult, wait_stats
from greengpu.sim.sleep_body import SleepBody
from greengpu.sim.usage import TenantUsage
from greengpu.tick.tick import schedule
from greengpu.tick.waiting import NOTHING_WAITS, WorkWaiting

__all__ = ["Simulation", "SimResult", "simulate", "wait_stats"]


class Simulation:
    """One replay of `jobs` on `cluster` under `policy`."""

    def __init__(self, cluster: Cluster, policy: Policy, jobs: Sequence[Job], *, until_s: float | None = None,
                 check_every_cycle: bool = True, progress: Callable[[int, int], None] | None = None,
                 attribute: bool = False, never_wake: Collection[str] = ()) -> None:
        self.cluster = cluster
        self.policy = policy
        self.jobs = list(jobs)
        for job in self.jobs:  # a nan time would never leave the event heap: refuse it, never hang on it
            if not (math.isfinite(job.submit_time_s) and math.isfinite(job.duration_s) and job.duration_s > 0):
                raise BadInput(f"job {job.job_id}: submit time and duration must be finite (duration > 0)")
        self.until_s = until_s
        self.check_every_cycle = check_every_cycle
        self.progress = progress
        self.clock = EventClock()
        self.meter = EnergyMeter(cluster.site)
        self.attribution = Attribution(self.meter) if attribute else None
        """Per hour, tenant, node and job usage, for --ledger (None: not asked for, costs nothing)."""
        self.fleet = NodeFleet(cluster, self.attribution)
        self.pacer = Pacer(cluster, policy.capping)
        self.sleep = SleepBody(policy, self.fleet, self.clock, never_wake,
                               lambda: (self.allocated_gpus, self.offered_gpus))
        self.checks = PlacementChecks(cluster)
        self.usage = TenantUsage(policy.scheduler.fair_share)
        self.running: dict[str, RunningJob] = {}
        self.pending: dict[str, PendingJob] = {}
        self.outcomes = JobOutcomes(first_start={}, run_s={}, completed=set())
        self.segment_start: dict[str, float] = {}
        self.finish_token: dict[str, int] = {}
        """Bumped whenever a job's finish time moves (a new run, a new pace): older finish events are stale."""
        self.finish_s: dict[str, float] = {}
        """When each completed job finished (greengpu plan derives running + pending demand from it)."""
        self.allocated_gpus = 0.0
        self.offered_gpus = 0.0
        """Running + pending GPUs: the demand the forecast-driven warm reserve follows."""
        self.gpu_hours_allocated = 0.0
        self.sleep_s = 0.0
        self.last_finish_s = 0.0
        self.preemptions = 0
        self.lost_gpu_s = 0.0
        self.cycles = 0
        self.waiting: WorkWaiting = NOTHING_WAITS
        """What the last cycle said waits for capacity (the capping and sleep levers' input)."""
        self.stopping: set[str] = set()
        self.arrivals_left = 0
        self.stalled = False
        """Set when only work that can never be placed is left: the replay stops instead of retrying forever."""
        self._lifts_caps = policy.capping.relaxes_when_queued
        self._dirty = False
        self._sleep_check = False
        self._tick_pending = False
        self._running_version = 0
        self._running_cache: tuple[int, tuple[RunningJob, ...]] | None = None

    # ------------------------------------------------------------------ views kept for callers

    @property
    def now_s(self) -> float:
        return self.clock.now_s

    @property
    def nodes(self) -> dict[str, SimNode]:
        return self.fleet.nodes

    @property
    def first_start(self) -> dict[str, float]:
        return self.outcomes.first_start

    # ------------------------------------------------------------------ time and power

    def _advance(self, to_s: float) -> None:
        now_s = self.clock.now_s
        if to_s <= now_s:
            return
        dt = to_s - now_s
        self.meter.add(now_s, to_s, self.fleet.gpu_w, self.fleet.host_w)
        self.gpu_hours_allocated += self.allocated_gpus * dt / 3600.0
        self.sleep_s += self.fleet.asleep_nodes * dt
        self.clock.now_s = to_s

    def _charge_job(self, running: RunningJob, end_s: float, busy_w: dict[str, float] | None = None) -> None:
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

    def _push_finish(self, job_id: str, at_s: float) -> None:
        token = self.finish_token.get(job_id, 0) + 1
        self.finish_token[job_id] = token
        self.clock.push(at_s, EventKind.FINISH, (job_id, token))

    def _set_lifted(self, lifted: bool) -> None:
        """Lift every running job's cap while work waits for capacity; cap them again once none waits.

        This is the capping lever's answer to "work waits" (`gpu_setting`): a slower job would
        lengthen the queue, and once the queue is gone the cap saves energy again.
        """
        for running in list(self.running.values()):
            watts_then = self.pacer.busy_w(running, self.fleet.nodes)
            if lifted:
                self.pacer.lifted.add(running.job.job_id)
            else:
                self.pacer.lifted.discard(running.job.job_id)
            self._repace(running, watts_then)

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
            self._charge_job(running, now_s, watts_then)
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
        self._running_version += 1
        self._push_finish(job_id, end_s)

    # ------------------------------------------------------------------ jobs

    def _start(self, action: PlaceJob) -> None:
        waiting = self.pending.pop(action.job_id)
        job = waiting.job
        now_s = self.clock.now_s
        if self._lifts_caps and self.waiting.waiting:
            self.pacer.lifted.add(job.job_id)  # others waited for capacity at the last cycle
        else:
            self.pacer.lifted.discard(job.job_id)
        nodes = self.fleet.nodes
        speed = self.pacer.speed(job, (nodes[name] for name in dict.fromkeys(s.node for s in action.slots)))
        run_s = self.pacer.run_s(job.duration_s, speed)
        running = RunningJob(job=job, slots=action.slots, start_time_s=now_s, expected_end_s=now_s + run_s,
                             preemptions=waiting.preemptions)
        self.running[job.job_id] = running
        self._running_version += 1
        self.outcomes.first_start.setdefault(job.job_id, now_s)
        self.segment_start[job.job_id] = now_s
        self.pacer.begin(job.job_id, now_s, speed)
        self._push_finish(job.job_id, now_s + run_s)
        self.allocated_gpus += job.gpus
        self.usage.started(job.tenant, job.gpus, now_s)
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
            self._charge_job(running, now_s)
        self._running_version += 1
        self.checks.stopped(running)
        self.outcomes.run_s[job_id] = self.outcomes.run_s.get(job_id, 0.0) + now_s - self.segment_start.pop(job_id)
        self.pacer.paces.pop(job_id, None)
        self.allocated_gpus -= running.job.gpus
        self.usage.stopped(running.job.tenant, running.job.gpus, now_s)
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

    def _kill(self, action: KillJob) -> None:
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

    def _signal(self, action: PreemptJob) -> None:
        victim = self.running[action.job_id]
        self.running[action.job_id] = replace(victim, preempt_signalled_s=self.clock.now_s,
                                              preempted_for=action.for_job_id)
        self.stopping.add(action.job_id)
        self._running_version += 1
        self.clock.push(self.clock.now_s + self.policy.scheduler.preemption.grace_s, EventKind.TICK, "grace")

    # ------------------------------------------------------------------ the loop

    def _ensure_tick(self) -> None:
        if not self._tick_pending:
            self._tick_pending = True
            interval = self.policy.interval_s
            self.clock.push((math.floor(self.clock.now_s / interval) + 1) * interval, EventKind.TICK, None)

    def _snapshot(self) -> ClusterSnapshot:
        return ClusterSnapshot(time_s=self.clock.now_s, cluster=self.cluster, running=self._running_tuple(),
                               pending=tuple(self.pending.values()), node_states=self.fleet.node_states,
                               tenant_usage_gpu_s=self.usage.snapshot(self.clock.now_s))

    def _cycle(self) -> None:
        self.cycles += 1
        scheduled = schedule(self._snapshot(), self.policy)
        actions = scheduled.cycle.actions
        for action in actions:
            if isinstance(action, KillJob):
                self._kill(action)
            elif isinstance(action, PreemptJob):
                self._signal(action)
            elif isinstance(action, PlaceJob):
                self._start(action)
        if self.check_every_cycle:
            placed = [self.running[a.job_id] for a in actions if isinstance(a, PlaceJob)]
            self.checks.record(self.checks.check_placements(placed, self.fleet.nodes))
            if self.cycles % self.checks.full_check_every == 0:
                self._check_all()
        was_waiting = self.waiting.waiting
        self.waiting = scheduled.waiting
        if self._lifts_caps and self.waiting.waiting != was_waiting:
            self._set_lifted(self.waiting.waiting)
        if self.policy.sleep.enabled:
            self.sleep.apply_wakes([a for a in actions if isinstance(a, WakeNode)])
            if self._sleep_check:  # only when an idle timeout has come due (IDLE_CHECK events)
                self._sleep_check = False
                self.sleep.suspend_idle(self.waiting)
        if self.pending and not actions and self._nothing_can_change():
            self.stalled = True  # every later cycle would be this one: the pending jobs never start
        elif self.pending:
            self._ensure_tick()  # retry: age boost, grace expiry, backfill windows

    def _check_all(self) -> None:
        self.checks.record(check_invariants(ClusterSnapshot(
            time_s=self.clock.now_s, cluster=self.cluster, running=tuple(self.running.values()),
            node_states=self.fleet.node_states)))

    def _nothing_can_change(self) -> bool:
        """No job runs, none is still to arrive, no node is waking or suspending: a cycle that placed
        and woke nothing now would place and wake nothing at any later time."""
        return not self.running and self.arrivals_left == 0 and not self.fleet.any_in_transition()

    def run(self) -> SimResult:
        """Replay every job; return the figures."""
        started = time.perf_counter()
        was_enabled = gc.isenabled()
        gc.disable()  # the replay builds no reference cycles; the collector would re-walk every job
        try:
            self._run()
        finally:
            if was_enabled:
                gc.enable()
        return self._result(time.perf_counter() - started)

    def _run(self) -> None:
        if not self.jobs:
            return
        origin_s = self.jobs[0].submit_time_s
        self.clock.now_s = origin_s
        self.usage.start(origin_s)
        self.fleet.start(origin_s)
        for node in self.fleet.nodes.values():
            self.sleep.schedule_idle_check(node)
        for index, job in enumerate(self.jobs):
            self.clock.push(job.submit_time_s, EventKind.ARRIVE, index)
        self.sleep.start_forecast(origin_s)
        self.arrivals_left = len(self.jobs)
        end_s = origin_s + self.until_s if self.until_s is not None else math.inf
        processed = 0
        clock = self.clock
        while clock.events:
            time_s = clock.events[0][0]
            if time_s > end_s:
                break
            self._advance(time_s)
            while (event := clock.pop_at(time_s)) is not None:
                processed += 1
                self._handle(*event)
            if self._dirty and (self.pending or any(r.preempt_signalled_s is not None for r in self._signalled())):
                self._dirty = False
                self._cycle()
            elif self._dirty:
                self._dirty = False  # nothing waits: a cycle could not place anything
            elif self._sleep_check:
                self._sleep_check = False
                self.sleep.suspend_idle(self.waiting)
            if self.progress is not None and processed % 5000 < 8:
                self.progress(len(self.outcomes.completed), len(self.jobs))
            if (not self.pending and not self.running and self.arrivals_left == 0) or self.stalled:
                break
        if end_s < math.inf:
            self._advance(end_s)
        if self.attribution is not None:
            self.fleet.meter_all(self.clock.now_s)
            for running in self.running.values():
                self._charge_job(running, self.clock.now_s)
        if self.check_every_cycle:
            self._check_all()

    def _running_tuple(self) -> tuple[RunningJob, ...]:
        """The running jobs as one tuple, rebuilt only when they change (the core skips its diff then)."""
        if self._running_cache is None or self._running_cache[0] != self._running_version:
            self._running_cache = (self._running_version, tuple(self.running.values()))
        return self._running_cache[1]

    def _signalled(self) -> list[RunningJob]:
        return [self.running[j] for j in self.stopping if j in self.running]

    def _handle(self, kind: EventKind, data: Any) -> None:
        if kind is EventKind.ARRIVE:
            job = self.jobs[data]
            self.pending[job.job_id] = PendingJob(job)
            self.arrivals_left -= 1
            self._dirty = True
            self._demand_changed(job.gpus)
        elif kind is EventKind.FINISH:
            job_id, token = data
            if job_id in self.running and self.finish_token.get(job_id) == token:
                gpus = self.running[job_id].job.gpus
                self._stop(job_id)
                self.outcomes.completed.add(job_id)
                self.finish_s[job_id] = self.clock.now_s
                self.last_finish_s = self.clock.now_s
                self._dirty = True
                self._demand_changed(-gpus)
        elif kind is EventKind.WAKE_DONE:
            if self.sleep.wake_done(data):
                self._dirty = True
        elif kind is EventKind.WAKE_CHECK:
            if self.sleep.verify_wake(data):
                self._dirty = True  # the core plans the waiting work elsewhere
        elif kind is EventKind.SUSPEND_DONE:
            if self.sleep.suspend_done(data):
                self._dirty = bool(self.pending)
        elif kind is EventKind.IDLE_CHECK and data is None:
            self._sleep_check = True  # the shared re-check of deferred idle nodes
        elif kind is EventKind.IDLE_CHECK:
            name, token = data
            node = self.fleet.nodes[name]
            if node.idle_token == token and node.power is PowerState.AWAKE and node.jobs == 0:
                self._sleep_check = True
        elif kind is EventKind.TICK:
            if data is None:
                self._tick_pending = False
            self._dirty = True
        elif kind is EventKind.HOUR:
            self.sleep.hour_turns(bool(self.arrivals_left or self.pending or self.running))

    def _demand_changed(self, delta_gpus: float) -> None:
        self.offered_gpus += delta_gpus
        self.sleep.demand_changed()

    # ------------------------------------------------------------------ results

    def _result(self, wall_s: float) -> SimResult:
        jobs = self.jobs
        waits, by_class, sla, slowdown = self.outcomes.waits(jobs)
        origin = jobs[0].submit_time_s if jobs else 0.0
        span_s = (self.clock.now_s - origin) if jobs else 0.0
        completed = self.outcomes.completed
        return SimResult(
            policy=self.policy.name, jobs=len(jobs), jobs_completed=len(completed),
            jobs_not_started=len(jobs) - len(self.outcomes.first_start),
            unplaceable_jobs=tuple(sorted(self.pending)[:10]) if self.stalled else (),
            makespan_s=(self.last_finish_s - origin) if completed else 0.0,
            energy_kwh=self.meter.facility_energy_kwh, gpu_energy_kwh=self.meter.gpu_energy_kwh,
            cost=self.meter.cost, co2_kg=self.meter.co2_g / 1000.0, wait_s=waits, wait_s_by_class=by_class,
            gpu_hours_allocated=self.gpu_hours_allocated,
            gpu_hours_capacity=self.cluster.total_gpus * span_s / 3600.0, slowdown_mean=slowdown,
            preemptions=self.preemptions, lost_gpu_hours=self.lost_gpu_s / 3600.0,
            node_sleep_hours=self.sleep_s / 3600.0, wakes=self.sleep.wakes,
            failed_nodes=tuple(sorted(self.sleep.failed_nodes)), sla_violations=sla,
            invariant_violations=self.checks.violations, sim_wall_s=wall_s, pue=self.cluster.site.pue,
            currency=self.cluster.site.currency, scheduling_cycles=self.cycles)


def simulate(cluster: Cluster, policy: Policy, jobs: Sequence[Job], *, until_s: float | None = None,
             progress: Callable[[int, int], None] | None = None) -> dict[str, Any]:
    """Replay `jobs` under `policy`; the result keys of docs/SIMULATOR.md."""
    return Simulation(cluster, policy, jobs, until_s=until_s, progress=progress).run().to_json()
