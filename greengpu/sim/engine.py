"""The discrete-event simulator: replay a job trace through the same control tick the live bodies run.

Virtual clock (`sim/clock.py`), events in a heap: arrivals, finishes, wake and suspend completions,
exact idle-timeout checks, grace expiries and control ticks. At each point in time where something
changed, the tick's scheduling part runs (`greengpu.brain.control_tick.schedule`: one cycle of the core and
whether work waits), then its capping and sleep parts where their inputs changed: caps lift or come
back when "work waits" flips (`sim/pace.py`), and the sleep lever is asked as a daemon's tick asks it: at
every cycle, at every idle timeout come due and whenever use falls (`sim/sleep_body.py`). The same
cycle says which sleeping nodes the waiting jobs would go to, and exactly those are woken. Power is
integrated piecewise between events (`sim/nodes.py`); the figures are typed (`sim/results.py`).
"""

from __future__ import annotations

import gc
import math
import time
from collections.abc import Callable, Collection, Sequence

from greengpu.accounting.attribution import Attribution
from greengpu.accounting.meter import EnergyMeter
from greengpu.brain.control_tick import Scheduled, schedule
from greengpu.capping.forecast_caps import ForecastCaps
from greengpu.errors import BadInput
from greengpu.json_types import JsonObject
from greengpu.model import (
    Cluster,
    ClusterSnapshot,
    Job,
    KillJob,
    PartitionGpu,
    PendingJob,
    PlaceJob,
    PreemptJob,
    RunningJob,
    WakeNode,
)
from greengpu.policy import Policy
from greengpu.sched.invariants import check_invariants
from greengpu.sched.memory import SchedulerMemory
from greengpu.sched.slack import QueueGuard, model_of_nodes
from greengpu.sim.cap_forecast import cap_candidates
from greengpu.sim.checks import PlacementChecks
from greengpu.sim.clock import EventClock, EventKind
from greengpu.sim.cloud import CloudPools
from greengpu.sim.cloud_choice import fits_free_awake
from greengpu.sim.cloud_ledger import MeteredCloudPools
from greengpu.sim.engine_events import ReplayEvents
from greengpu.sim.engine_results import known_result, result_of
from greengpu.sim.failures import FailureReplay
from greengpu.sim.jobs import JobRunner
from greengpu.sim.mig_body import MigPartitions
from greengpu.sim.nodes import NodeFleet, SimNode
from greengpu.sim.pace import Pacer
from greengpu.sim.results import SimResult, wait_stats
from greengpu.sim.sleep_body import SleepBody
from greengpu.sim.usage import TenantUsage
from greengpu.sleep.arrivals import RecentArrivals
from greengpu.sleep.headroom import levers_have_slack
from greengpu.sleep.work_waiting import NOTHING_WAITS, WorkWaiting

__all__ = ["Simulation", "SimResult", "simulate", "wait_stats"]


class Simulation:
    """One replay of `jobs` on `cluster` under `policy`."""

    def __init__(self, cluster: Cluster, policy: Policy, jobs: Sequence[Job], *, until_s: float | None = None,
                 check_every_cycle: bool = True, progress: Callable[[int, int], None] | None = None,
                 attribute: bool = False, never_wake: Collection[str] = (),
                 failures: FailureReplay | None = None, seed: int = 0, check_known_cycles: bool = False) -> None:
        self.cluster = cluster
        self.failures = failures
        """The optional GPU failure model (None: GPUs never fail; every figure as without it)."""
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
        self.arrivals = RecentArrivals()
        """The last day's arrivals: how much of its share of use the warm reserve keeps (sleep/arrivals.py)."""
        self.sleep = SleepBody(policy, self.fleet, self.clock, never_wake,
                               lambda: (self.work.allocated_gpus, self.offered_gpus),
                               lambda: self.arrivals.gpus(self.clock.now_s), timezone=cluster.site.timezone)
        self.checks = PlacementChecks(cluster)
        self.mig = MigPartitions(cluster)
        """MIG GPUs' partitions and repartitions (sim/mig_body.py; empty without MIG GPUs)."""
        self.usage = TenantUsage(policy.scheduler.fair_share)
        self.events = ReplayEvents(self)
        """What each event does (sim/engine_events.py)."""
        self.work = JobRunner(self.clock, self.fleet, self.pacer, self.sleep, self.checks, self.usage,
                              self.attribution, policy.scheduler.preemption.grace_s)
        self.cloud = ((MeteredCloudPools if attribute else CloudPools)(  # Metered: spans for --ledger
            cluster, policy, self.clock, self.work.outcomes, self.work.finish_s, {job.job_id: job for job in self.jobs},
            seed, self.events.requeued, self.events.demand_changed_by, self.meter.price_per_kwh)
            if cluster.pools else None)
        """The inventory's cloud pools (sim/cloud.py; None without pools: every figure as before)."""
        if self.cloud is not None:  # a come-back never jumps the on-premises queue
            self.cloud.fits_on_premises = lambda job: not self.pending and fits_free_awake(
                job, self.fleet.nodes.values(), cluster)
        self.offered_gpus = 0.0
        """Running + pending GPUs: the demand the forecast-driven warm reserve follows."""
        self.gpu_hours_allocated = 0.0
        self.sleep_s = 0.0
        self.cycles = 0
        self.waiting: WorkWaiting = NOTHING_WAITS
        """What the last cycle said waits for capacity (the capping and sleep levers' input)."""
        self.arrivals_left = 0
        self.stalled = False
        """Set when only work that can never be placed is left: the replay stops instead of retrying forever."""
        self._lifts_caps = policy.capping.relaxes_when_queued
        self.caps = ForecastCaps(policy, cluster.site.timezone)
        self.memory = SchedulerMemory()  # the scheduling core's, kept for the replay (greengpu.sched.memory)
        self._model_of = model_of_nodes(cluster, self.memory)
        self.dirty = False
        self.sleep_check = False
        self.tick_pending = False
        self._known: tuple[float, ClusterSnapshot, Scheduled] | None = None
        """The last cycle's result while it stands (`CycleResult.unchanged_until_s`), with its snapshot."""
        self.known_cycles = 0
        """Cycles whose result was known without asking the core: the same jobs and nodes as a cycle that
        promised to stand until after them."""
        self.check_known_cycles = check_known_cycles
        """Ask the core anyway at every known cycle and fail if it decides otherwise (tests)."""

    @property
    def now_s(self) -> float:
        return self.clock.now_s

    @property
    def nodes(self) -> dict[str, SimNode]:
        return self.fleet.nodes

    @property
    def first_start(self) -> dict[str, float]:
        return self.work.outcomes.first_start

    @property
    def finish_s(self) -> dict[str, float]:
        return self.work.finish_s

    @property
    def running(self) -> dict[str, RunningJob]:
        return self.work.running

    @property
    def pending(self) -> dict[str, PendingJob]:
        return self.work.pending

    # ------------------------------------------------------------------ time and power

    def _advance(self, to_s: float) -> None:
        now_s = self.clock.now_s
        if to_s <= now_s:
            return
        dt = to_s - now_s
        self.meter.add(now_s, to_s, self.fleet.gpu_w, self.fleet.host_w)
        self.gpu_hours_allocated += self.work.allocated_gpus * dt / 3600.0
        self.sleep_s += self.fleet.asleep_nodes * dt
        self.clock.now_s = to_s

    # ------------------------------------------------------------------ the loop

    def _ensure_tick(self) -> None:
        if not self.tick_pending:
            self.tick_pending = True
            interval = self.policy.interval_s
            self.clock.push((math.floor(self.clock.now_s / interval) + 1) * interval, EventKind.TICK, None)

    def _snapshot(self) -> ClusterSnapshot:
        node_states = self.fleet.node_states
        if self.failures is not None:  # GPU health the scheduler sees (docs/HEALTH.md)
            node_states = self.failures.node_states(node_states)
        return ClusterSnapshot(time_s=self.clock.now_s, cluster=self.cluster, running=self.work.running_tuple(),
                               pending=self.work.pending.as_tuple(), node_states=node_states,
                               tenant_usage_gpu_s=self.usage.snapshot(self.clock.now_s),
                               mig_partitions=self.mig.current)

    def _cycle(self) -> None:
        self.cycles += 1
        snapshot = self._snapshot()
        scheduled = known_result(self, snapshot)
        if scheduled is None:
            scheduled = schedule(snapshot, self.policy, self.memory)
            until_s = scheduled.cycle.unchanged_until_s
            self._known = (until_s, snapshot, scheduled) if until_s > snapshot.time_s else None
        actions = scheduled.cycle.actions
        guard = self.waiting.guard
        for action in actions:
            if isinstance(action, KillJob):
                self.work.kill(action)
            elif isinstance(action, PreemptJob):
                self.work.signal(action)
            elif isinstance(action, PlaceJob):
                # Lifted from the start when it lands in the way of a job that waited at the last cycle.
                tenant = self.pending[action.job_id].job.tenant
                nodes = dict.fromkeys(s.node for s in action.slots)
                self.work.start(action, self._lifts_caps and guard.lifts(tenant, nodes, self._model_of))
            elif isinstance(action, PartitionGpu):
                self.mig.apply(action, self.clock.now_s)
        for job_id in scheduled.cycle.withdrawn:  # its beneficiary started elsewhere: it runs on
            self.work.withdraw(job_id)
        if self.cloud is not None and self.pending:  # what still waits for capacity may go to the cloud
            self.cloud.burst(scheduled.cycle.waits, self.pending, self.clock.now_s, scheduled.cycle.reservations)
        if self.check_every_cycle:
            placed = [self.running[a.job_id] for a in actions if isinstance(a, PlaceJob)]
            self.checks.record(self.checks.check_placements(placed, self.fleet.nodes))
            if self.cycles % self.checks.full_check_every == 0:
                self._check_all()
        was = self.waiting.guard
        self.waiting = scheduled.waiting
        if self._lifts_caps:
            self._follow_slack(was)
        self.sleep_check = False  # the sleep lever is asked at every cycle, as a daemon asks it at every tick
        self.sleep.ask([a for a in actions if isinstance(a, WakeNode)], self.waiting)
        if self.pending and not actions and self._nothing_can_change():
            self.stalled = True  # every later cycle would be this one: the pending jobs never start
        elif self.pending:
            self._ensure_tick()  # retry: age boost, grace expiry, backfill windows

    def _follow_slack(self, guard_was: QueueGuard) -> None:
        """Lift or restore caps when the guard, the slack (sleep/headroom.py) or the forecast verdict changed."""
        now_s, arrived = self.clock.now_s, self.arrivals.gpus(self.clock.now_s)
        no_slack = not levers_have_slack(self.cluster.total_gpus, self.work.allocated_gpus, self.policy.sleep, arrived)
        refused = self.caps.refused(now_s, self.offered_gpus, self.cluster.total_gpus, lambda: cap_candidates(
            now_s, self.running, self.pacer, self.fleet.nodes), arrived)
        if refused != self.work.cap_refused or self.waiting.guard != guard_was or no_slack != self.work.no_slack:
            self.work.cap_refused = refused
            self.work.no_slack = no_slack
            self.work.set_lifted(self.waiting.guard, self._model_of)

    def _check_all(self) -> None:
        self.checks.record(check_invariants(ClusterSnapshot(
            time_s=self.clock.now_s, cluster=self.cluster, running=tuple(self.running.values()),
            node_states=self.fleet.node_states, mig_partitions=self.mig.current)))

    def _nothing_can_change(self) -> bool:
        """No job runs, none is still to arrive, no node is waking or suspending: a cycle that placed
        and woke nothing now would place and wake nothing at any later time."""
        return not self.running and self.arrivals_left == 0 and not self.fleet.any_in_transition() and not (
            self.failures is not None and self.failures.awaiting_repair) and not (  # a repaired GPU may take them
            self.cloud is not None and self.cloud.busy) and not self.mig.busy(  # an interrupted cloud job comes back
            self.clock.now_s)  # a job waits for a MIG GPU being repartitioned

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
        return result_of(self, time.perf_counter() - started)

    def _run(self) -> None:
        if not self.jobs:
            return
        origin_s = self.jobs[0].submit_time_s
        self._start(origin_s)
        end_s = origin_s + self.until_s if self.until_s is not None else math.inf
        processed = 0
        clock = self.clock
        handle = self.events.handle
        while clock.events:
            time_s = clock.events[0][0]
            if time_s > end_s:
                break
            self._advance(time_s)
            while (event := clock.pop_at(time_s)) is not None:
                processed += 1
                handle(*event)
            self._decide()
            if self.progress is not None and processed % 5000 < 8:
                self.progress(len(self.work.outcomes.completed), len(self.jobs))
            if (not self.pending and not self.running and self.arrivals_left == 0
                    and (self.cloud is None or not self.cloud.busy)) or self.stalled:
                break
        self._close(end_s)

    def _start(self, origin_s: float) -> None:
        """The clock at the first arrival, every arrival and GPU event queued, every node's idle check due."""
        self.clock.now_s = origin_s
        self.usage.start(origin_s)
        self.fleet.start(origin_s)
        for node in self.fleet.nodes.values():
            self.sleep.schedule_idle_check(node)
        for index, job in enumerate(self.jobs):
            self.clock.push(job.submit_time_s, EventKind.ARRIVE, index)
        if self.failures is not None:
            for gpu_event in self.failures.timeline:
                self.clock.push(gpu_event.time_s, EventKind.GPU_EVENT, gpu_event)
        self.sleep.start_forecast(origin_s)
        self.arrivals_left = len(self.jobs)

    def _decide(self) -> None:
        """After the events of one instant: a cycle when something changed and work waits, else the levers alone."""
        if (self.dirty or self.sleep_check) and (self.pending or self.work.any_signalled()):
            self.dirty = False  # the sleep lever is asked with a cycle, as a daemon's tick asks them together
            self._cycle()
        elif self.dirty or self.sleep_check:  # nothing waits: a cycle could not place anything
            # a finish may have given the slack back; the forecast rule is asked at each decision, as a tick does
            if self._lifts_caps and ((self.dirty and self.work.no_slack) or self.caps.active):
                self._follow_slack(self.waiting.guard)
            self.dirty = self.sleep_check = False  # use fell: the warm reserve may let a node it held sleep now
            self.sleep.ask([], self.waiting)

    def _close(self, end_s: float) -> None:
        if end_s < math.inf:
            self._advance(end_s)
        if self.cloud is not None:
            self.cloud.close(self.clock.now_s)
        if self.attribution is not None:
            self.fleet.meter_all(self.clock.now_s)
            self.work.charge_all()
        if self.check_every_cycle:
            self._check_all()


def simulate(cluster: Cluster, policy: Policy, jobs: Sequence[Job], *, until_s: float | None = None,
             progress: Callable[[int, int], None] | None = None) -> JsonObject:
    """Replay `jobs` under `policy`; the result keys of docs/SIMULATOR.md."""
    return Simulation(cluster, policy, jobs, until_s=until_s, progress=progress).run().to_json()
