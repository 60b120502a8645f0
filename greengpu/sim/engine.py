"""The discrete-event simulator: replay a job trace through the same decision core the daemon runs.

Virtual clock, events in a heap: arrivals, finishes, wake and suspend completions, exact idle-timeout
checks, grace expiries and control ticks. At each point in time where something changed, one
scheduling cycle runs (`greengpu.sched.core.schedule_cycle`), then the sleep planner
(`greengpu.energy.sleep`). Waking asks the core itself: a second, hypothetical cycle in which
sleeping nodes count as up shows which nodes blocked jobs would go to, and exactly those are woken
(a whole free node for a gang, never two halves). Power is integrated piecewise between events.
"""

from __future__ import annotations

import bisect
import gc
import heapq
import math
import time
from collections import deque
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from greengpu.accounting.attribution import Attribution
from greengpu.accounting.meter import EnergyMeter
from greengpu.energy.capping import busy_effect, constraints_of, decide
from greengpu.energy.sleep import (
    NodeView,
    in_window,
    next_window_start_s,
    plan_suspends,
    warm_reserve_target_gpus,
)
from greengpu.energy.wake_verify import WakeStage, WakeTrack, advance, next_due_s, start_wake
from greengpu.errors import BadInput
from greengpu.forecast.reserve import HOUR_S, DemandRiseForecaster
from greengpu.model import (
    GPU_UNITS,
    Cluster,
    ClusterSnapshot,
    Job,
    KillJob,
    NodeState,
    PendingJob,
    PlaceJob,
    PowerState,
    PreemptionRecord,
    PreemptJob,
    RunningJob,
    WakeNode,
)
from greengpu.policy import Policy
from greengpu.sched.core import schedule_cycle
from greengpu.sched.invariants import check_invariants
from greengpu.sched.preemption import last_checkpoint_s
from greengpu.sched.quota import QuotaLedger
from greengpu.sched.slack import NO_WAIT, QueueGuard, model_of_nodes, queue_guard
from greengpu.sched.state import cluster_layout

FULL_CHECK_EVERY = 2000
"""Cycles between full invariant checks (every cycle checks what its own placements could break)."""
SUSPEND_S = 30.0
"""Seconds from the suspend command to the node drawing sleep power (it draws idle power meanwhile)."""
CLASS_WAIT_SLA_S = {"inference": 300.0, "interactive": 300.0}
"""Longest wait before an inference or interactive job counts as an SLA violation."""

_READY = (PowerState.AWAKE, PowerState.WAKING)
_ARRIVE, _FINISH, _WAKE_DONE, _SUSPEND_DONE, _IDLE_CHECK, _TICK, _WAKE_CHECK, _HOUR = range(8)


@dataclass
class _Node:
    name: str
    type_name: str
    gpus: int
    gpu_idle_w: float
    host_idle_w: float
    host_sleep_w: float
    boot_s: float
    power: PowerState = PowerState.AWAKE
    power_since_s: float = 0.0
    jobs: int = 0
    gpu_users: dict[int, list[float]] = field(default_factory=dict)
    """Per busy GPU, the busy watts of each job on it (capping differs by class; a shared GPU draws the most)."""
    idle_since_s: float | None = 0.0
    idle_token: int = 0
    draw_since_s: float = 0.0
    """When the node's draw last changed (per-node metering for the ledger)."""

    def draw_w(self) -> tuple[float, float]:
        """(GPU watts, host watts) in the node's current state."""
        if self.power is PowerState.ASLEEP:
            return 0.0, self.host_sleep_w
        if self.power is PowerState.FAILED:
            return 0.0, 0.0
        users = self.gpu_users
        busy_w = sum(max(watts) for watts in users.values()) if users else 0.0
        return busy_w + (self.gpus - len(users)) * self.gpu_idle_w, self.host_idle_w


@dataclass
class SimResult:
    """The figures of one simulated policy (docs/SIMULATOR.md)."""

    values: dict[str, Any]


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
        self.meter = EnergyMeter(cluster.site)
        self.attribution = Attribution(self.meter) if attribute else None
        self.never_wake = frozenset(never_wake)
        """Nodes whose wake-ups are lost (a dead NIC or BMC): verification retries, then marks them failed."""
        self.wake_tracks: dict[str, WakeTrack] = {}
        self.failed_nodes: list[str] = []
        """Per hour, tenant, node and job usage, for --ledger (None: not asked for, costs nothing)."""
        self.nodes: dict[str, _Node] = {}
        for node in cluster.nodes:
            t = cluster.node_types[node.type_name]
            self.nodes[node.name] = _Node(node.name, node.type_name, t.gpus, t.gpu_idle_w, t.host_idle_w,
                                          t.host_sleep_w, t.boot_s)
        self._capping: dict[tuple[str, str, bool], tuple[float, float]] = {}
        self._relaxed: set[str] = set()
        """Running jobs that run uncapped because others wait for capacity (`relax_when_queued`)."""
        self._paces: dict[str, list[tuple[float, float, float]]] = {}
        """Per running job, its paces in this run: (since when, speed, uncapped seconds of work done before).
        Capping changes while a job runs (uncapped while a queue lasts), so work is integrated piecewise."""
        self.node_states: dict[str, NodeState] = {}
        self.running: dict[str, RunningJob] = {}
        self.pending: dict[str, PendingJob] = {}
        self.events: list[tuple[float, int, int, Any]] = []
        self._seq = 0
        self.now_s = 0.0
        self.gpu_w = 0.0
        self.host_w = 0.0
        self.allocated_gpus = 0.0
        self.gpu_hours_allocated = 0.0
        self.offered_gpus = 0.0
        """Running + pending GPUs: the demand the forecast-driven warm reserve follows."""
        self.rise_forecast = (DemandRiseForecaster() if policy.sleep.enabled and policy.sleep.use_forecast
                              else None)
        self.first_start: dict[str, float] = {}
        self.run_s: dict[str, float] = {}
        self.segment_start: dict[str, float] = {}
        self.finish_token: dict[str, int] = {}
        """Bumped whenever a job's finish time moves (a new run, a new pace): older finish events are stale."""
        self.completed: set[str] = set()
        self.last_finish_s = 0.0
        self.finish_s: dict[str, float] = {}
        """When each completed job finished (greengpu plan derives running + pending demand from it)."""
        self.preemptions = 0
        self.lost_gpu_s = 0.0
        self.sleep_s = 0.0
        self.wakes = 0
        self.violations = 0
        self.violation_examples: list[str] = []
        self.cycles = 0
        self.suspend_times: deque[float] = deque()
        self.wake_times: deque[float] = deque()
        self._dirty = False
        self._sleep_check = False
        self._tick_pending = False
        self._blocked = False
        self.stalled = False
        """Set when only work that can never be placed is left: the replay stops instead of retrying forever."""
        self._relaxes = policy.capping.relaxes_when_queued
        """Whether running jobs in a waiting job's way go uncapped (`_guard` says which)."""
        self._guard: QueueGuard = NO_WAIT
        """The last cycle's slack rule (greengpu.sched.slack): caps to lift, nodes to keep awake."""
        self._model_of = model_of_nodes(cluster)
        self.asleep_nodes = 0
        self.arrivals_left = 0
        self.stopping: set[str] = set()
        self._running_version = 0
        self._recheck_at = -math.inf
        self._running_cache: tuple[int, tuple[RunningJob, ...]] | None = None
        layout = cluster_layout(cluster)
        # The simulator's own quota books (independent of the core's) for the invariant checks.
        self.ledger = QuotaLedger(cluster, layout.model_of_node, layout.memory_of_node, True)
        self.gpu_units: dict[tuple[str, int], int] = {}

    # ------------------------------------------------------------------ events and power

    def _push(self, time_s: float, kind: int, data: Any) -> None:
        self._seq += 1
        heapq.heappush(self.events, (time_s, self._seq, kind, data))

    def _advance(self, to_s: float) -> None:
        if to_s <= self.now_s:
            return
        dt = to_s - self.now_s
        self.meter.add(self.now_s, to_s, self.gpu_w, self.host_w)
        self.gpu_hours_allocated += self.allocated_gpus * dt / 3600.0
        self.sleep_s += self.asleep_nodes * dt
        self.now_s = to_s

    def _set_node(self, node: _Node, change: Callable[[], None]) -> None:
        gpu_before, host_before = node.draw_w()
        if self.attribution is not None:
            self._meter_node(node, gpu_before, host_before)
        change()
        gpu_after, host_after = node.draw_w()
        self.gpu_w += gpu_after - gpu_before
        self.host_w += host_after - host_before

    def _meter_node(self, node: _Node, gpu_w: float, host_w: float) -> None:
        assert self.attribution is not None
        if self.now_s > node.draw_since_s:
            self.attribution.node_draw(node.name, node.gpus, node.draw_since_s, self.now_s, gpu_w, host_w,
                                       node.power is PowerState.ASLEEP)
        node.draw_since_s = self.now_s

    def _charge_job(self, running: RunningJob, end_s: float, busy_w: dict[str, float] | None = None) -> None:
        """Charge a job's run segment to its tenant (ledger only); `busy_w`: its GPUs' watts per node
        over the segment (default: what its capping gives now)."""
        assert self.attribution is not None
        start_s = self.segment_start[running.job.job_id]
        if end_s <= start_s:
            return
        units = running.units_by_node
        nodes = {name: self.nodes[name] for name in units}
        self.attribution.job_ran(running.job, dict(units), start_s, end_s,
                                 busy_w if busy_w is not None else self._busy_w(running),
                                 {n: node.host_idle_w for n, node in nodes.items()},
                                 {n: node.gpus for n, node in nodes.items()})

    def _capped(self, job: Job, node: _Node) -> tuple[float, float]:
        """(busy watts per GPU, speed) of `job` on `node` under the policy's capping (lever 1)."""
        relaxed = job.job_id in self._relaxed
        key = (node.type_name, job.job_class, relaxed)
        effect = self._capping.get(key)
        if effect is None:
            node_type = self.cluster.node_types[node.type_name]
            if self.policy.capping.enabled:
                # Only the decision's limit and expected slowdown matter here, not the clock in MHz.
                decision = decide(job.job_class, self.policy.capping, constraints_of(node_type), max_clock_mhz=1000,
                                  host_share_w=node_type.host_idle_w / node_type.gpus, capacity_short=relaxed)
                effect = busy_effect(decision, node_type)
            else:
                effect = (node_type.gpu_max_w, 1.0)
            self._capping[key] = effect
        return effect

    def _speed(self, job: Job, node_names: Iterable[str]) -> float:
        """The rate `job` runs at on these nodes relative to uncapped: the slowest node sets the pace."""
        return min(self._capped(job, self.nodes[name])[1] for name in node_names)

    @staticmethod
    def _run_s(work_s: float, speed: float) -> float:
        """Wall seconds for `work_s` of uncapped work at `speed` (whole seconds, like the trace)."""
        return float(math.ceil(work_s / speed - 1e-9))

    def _push_finish(self, job_id: str, at_s: float) -> None:
        token = self.finish_token.get(job_id, 0) + 1
        self.finish_token[job_id] = token
        self._push(at_s, _FINISH, (job_id, token))

    def _work_done_s(self, running: RunningJob, at_s: float) -> float:
        """Uncapped seconds of work `running` had done by `at_s` in this run (its paces integrated)."""
        paces = self._paces[running.job.job_id]
        index = max(0, bisect.bisect_right(paces, at_s, key=lambda pace: pace[0]) - 1)
        since_s, speed, before_s = paces[index]
        return before_s + max(0.0, at_s - since_s) * speed

    def _busy_w(self, running: RunningJob) -> dict[str, float]:
        """Watts of each of `running`'s busy GPUs, per node, under its capping now."""
        return {name: self._capped(running.job, self.nodes[name])[0] for name in running.nodes}

    def _apply_guard(self) -> None:
        """Uncap exactly the running jobs in a waiting job's way; cap the rest again (the slack rule).

        A per-tick controller does exactly this (capping.decide with `capacity_short` from
        greengpu.sched.slack): a slower job in a waiting job's way lengthens the queue; a job in no one's
        way saves energy at no queue time.
        """
        guard, model_of, relaxed = self._guard, self._model_of, self._relaxed
        for running in list(self.running.values()):
            job_id = running.job.job_id
            lift = guard.lifts(running.job.tenant, running.nodes, model_of)
            if lift == (job_id in relaxed):
                continue
            watts_then = self._busy_w(running)
            if lift:
                relaxed.add(job_id)
            else:
                relaxed.discard(job_id)
            self._repace(running, watts_then)

    def _repace(self, running: RunningJob, watts_then: dict[str, float]) -> None:
        """Carry a running job over to the pace and power its capping now gives."""
        job = running.job
        job_id = job.job_id
        paces = self._paces[job_id]
        since_s, old_speed, before_s = paces[-1]
        speed = self._speed(job, running.nodes)
        watts_now = self._busy_w(running)
        if speed == old_speed and watts_now == watts_then:
            return  # a class that is never capped
        if self.attribution is not None:
            self._charge_job(running, self.now_s, watts_then)
        self.run_s[job_id] = self.run_s.get(job_id, 0.0) + self.now_s - self.segment_start[job_id]
        self.segment_start[job_id] = self.now_s
        done_s = before_s + (self.now_s - since_s) * old_speed
        paces.append((self.now_s, speed, done_s))
        for slot in running.slots:
            node = self.nodes[slot.node]

            def change(node: _Node = node, gpu: int = slot.gpu_index) -> None:
                watts = node.gpu_users[gpu]
                watts.remove(watts_then[node.name])
                watts.append(watts_now[node.name])

            self._set_node(node, change)
        end_s = self.now_s + self._run_s(max(0.0, job.duration_s - done_s), speed)
        self.running[job_id] = replace(running, expected_end_s=end_s)
        self._running_version += 1
        self._push_finish(job_id, end_s)

    def _set_power(self, node: _Node, power: PowerState) -> None:
        self.asleep_nodes += (power is PowerState.ASLEEP) - (node.power is PowerState.ASLEEP)

        def change() -> None:
            node.power = power
            node.power_since_s = self.now_s

        self._set_node(node, change)
        # A new mapping, never an in-place change: the core recognises a mapping it has already applied.
        states = dict(self.node_states)
        if power is PowerState.AWAKE:
            states.pop(node.name, None)
        else:
            states[node.name] = NodeState(power=power, since_s=self.now_s)
        self.node_states = states

    # ------------------------------------------------------------------ jobs

    def _start(self, action: PlaceJob) -> None:
        waiting = self.pending.pop(action.job_id)
        job = waiting.job
        nodes = dict.fromkeys(s.node for s in action.slots)
        if self._relaxes and self._guard.lifts(job.tenant, nodes, self._model_of):
            self._relaxed.add(job.job_id)  # in a waiting job's way at the last cycle
        else:
            self._relaxed.discard(job.job_id)
        speed = self._speed(job, dict.fromkeys(s.node for s in action.slots))
        run_s = self._run_s(job.duration_s, speed)
        self.running[job.job_id] = RunningJob(job=job, slots=action.slots, start_time_s=self.now_s,
                                              expected_end_s=self.now_s + run_s,
                                              preemptions=waiting.preemptions)
        self._running_version += 1
        self.first_start.setdefault(job.job_id, self.now_s)
        self.segment_start[job.job_id] = self.now_s
        self._paces[job.job_id] = [(self.now_s, speed, 0.0)]
        self._push_finish(job.job_id, self.now_s + run_s)
        self.allocated_gpus += job.gpus
        self.ledger.charge(self.running[job.job_id])
        for slot in action.slots:
            node = self.nodes[slot.node]

            def change(node: _Node = node, gpu: int = slot.gpu_index) -> None:
                node.gpu_users.setdefault(gpu, []).append(self._capped(job, node)[0])

            self._set_node(node, change)
            key = (slot.node, slot.gpu_index)
            self.gpu_units[key] = self.gpu_units.get(key, 0) + slot.units
        for name in dict.fromkeys(s.node for s in action.slots):
            node = self.nodes[name]
            node.jobs += 1
            node.idle_since_s = None
            node.idle_token += 1

    def _stop(self, job_id: str) -> RunningJob:
        running = self.running.pop(job_id)
        if self.attribution is not None:
            self._charge_job(running, self.now_s)
        self._running_version += 1
        self.ledger.charge(running, -1)
        self.run_s[job_id] = self.run_s.get(job_id, 0.0) + self.now_s - self.segment_start.pop(job_id)
        self._paces.pop(job_id, None)
        self.allocated_gpus -= running.job.gpus
        for slot in running.slots:
            node = self.nodes[slot.node]

            def change(node: _Node = node, gpu: int = slot.gpu_index) -> None:
                watts = node.gpu_users[gpu]
                watts.remove(self._capped(running.job, node)[0])
                if not watts:
                    del node.gpu_users[gpu]

            self._set_node(node, change)
            self.gpu_units[(slot.node, slot.gpu_index)] -= slot.units
        for name in dict.fromkeys(s.node for s in running.slots):
            node = self.nodes[name]
            node.jobs -= 1
            if node.jobs == 0:
                node.idle_since_s = self.now_s
                node.idle_token += 1
                self._schedule_idle_check(node)
        self._relaxed.discard(job_id)
        return running

    def _kill(self, action: KillJob) -> None:
        victim = self.running[action.job_id]
        by = action.for_job_id or victim.preempted_for
        checkpoint_s = last_checkpoint_s(victim, self.now_s)
        self.lost_gpu_s += (self.now_s - checkpoint_s) * victim.job.gpus
        saved_s = self._work_done_s(victim, checkpoint_s)  # before _stop forgets the job's pace
        self._stop(action.job_id)
        self.stopping.discard(action.job_id)
        self.preemptions += 1
        history = victim.preemptions + ((PreemptionRecord(self.now_s, by),) if by else ())
        remaining = replace(victim.job, duration_s=max(1.0, victim.job.duration_s - saved_s))
        self.pending[victim.job.job_id] = PendingJob(remaining, preemptions=history)

    # ------------------------------------------------------------------ sleep and wake

    def _schedule_idle_check(self, node: _Node) -> None:
        sleep = self.policy.sleep
        if not sleep.enabled or node.idle_since_s is None:
            return
        due = max(node.idle_since_s + sleep.idle_timeout_s, node.power_since_s + sleep.min_awake_s)
        self._push(max(due, self.now_s), _IDLE_CHECK, (node.name, node.idle_token))

    def _idle_awake_views(self) -> list[NodeView]:
        """Views of the awake nodes without work: the only ones plan_suspends can put to sleep or count
        towards the warm reserve (building a view of every node each time cost 10% of a replay)."""
        return [NodeView(n.name, n.gpus, n.power, n.power_since_s, False, n.idle_since_s)
                for n in self.nodes.values() if n.jobs == 0 and n.power is PowerState.AWAKE]

    def _recent(self, times: deque[float]) -> int:
        while times and times[0] <= self.now_s - 60.0:
            times.popleft()
        return len(times)

    def _plan_suspends(self, blocked: bool) -> None:
        views = self._idle_awake_views()
        reserve = self._reserve_target_gpus()
        for action in plan_suspends(self.now_s, views, self.policy.sleep, blocked_pending=blocked,
                                    suspends_last_minute=self._recent(self.suspend_times), reserve_gpus=reserve,
                                    keep_awake=self._guard.keep_awake):
            node = self.nodes[action.node]
            self._set_power(node, PowerState.SUSPENDING)
            self.suspend_times.append(self.now_s)
            self._push(self.now_s + SUSPEND_S, _SUSPEND_DONE, node.name)
        # Nodes still idle but not allowed to sleep now are looked at again when that can change: at the
        # next window opening, or at the next tick when work was waiting or the rate limit held them.
        # (One held by the warm reserve is looked at again when another node's idle timeout comes due.)
        deferred = any(
            node.power is PowerState.AWAKE and node.jobs == 0 and node.idle_since_s is not None
            and self.now_s - node.idle_since_s >= self.policy.sleep.idle_timeout_s
            for node in self.nodes.values())
        if not deferred:
            return
        sleep = self.policy.sleep
        recheck: float | None = None
        if not in_window(self.now_s, sleep.windows):
            recheck = next_window_start_s(self.now_s, sleep.windows)
        elif (sleep.priority_aware and blocked) or self._recent(self.suspend_times) >= sleep.max_suspends_per_min:
            recheck = self.now_s + self.policy.interval_s
        if recheck is not None and (self._recheck_at <= self.now_s or recheck < self._recheck_at):
            self._recheck_at = recheck
            self._push(recheck, _IDLE_CHECK, None)

    def _wake(self, node: _Node, reason: str) -> None:
        self._set_power(node, PowerState.WAKING)
        self.wakes += 1
        self.wake_times.append(self.now_s)
        if node.name in self.never_wake:
            track, _ = start_wake(node.name, self.now_s, self.policy.sleep, reason)
            self.wake_tracks[node.name] = track
            self._push(track.deadline_s, _WAKE_CHECK, node.name)
        else:
            self._push(self.now_s + node.boot_s, _WAKE_DONE, node.name)

    def _verify_wake(self, node: _Node) -> None:
        """A node under verification did not come up: retry after backoff, or mark it failed (wake_verify)."""
        track = self.wake_tracks.get(node.name)
        if track is None or node.power is not PowerState.WAKING:
            return
        track, events = advance(track, self.now_s, False, self.policy.sleep)
        self.wake_tracks[node.name] = track
        self.wakes += sum(1 for e in events if e.kind == "send")
        if track.stage is WakeStage.FAILED:
            self._set_power(node, PowerState.FAILED)
            self.failed_nodes.append(node.name)
            self._dirty = True  # the core plans the waiting work elsewhere
            return
        due = next_due_s(track)
        if due is not None:
            self._push(due, _WAKE_CHECK, node.name)

    def _apply_wakes(self, wakes: list[WakeNode]) -> None:
        """Wake the nodes the core asked for, within the wake rate limit and minimum asleep time.

        A wake held back now is asked for again by a later cycle (the job stays blocked).
        """
        sleep = self.policy.sleep
        if self.asleep_nodes == 0:
            return
        budget = sleep.max_wakes_per_min - self._recent(self.wake_times)
        for action in wakes:
            node = self.nodes[action.node]
            if budget <= 0:
                break
            if node.power is PowerState.ASLEEP and self.now_s - node.power_since_s >= sleep.min_asleep_s:
                self._wake(node, action.reason)
                budget -= 1
        self._wake_for_reserve(budget)

    def _wake_for_reserve(self, budget: int) -> None:
        """Wake sleeping nodes (by name, within `budget`) while the warm reserve is short."""
        sleep = self.policy.sleep
        reserve = self._reserve_target_gpus()
        if reserve <= 0:
            return
        # warm_reserve_shortfall_gpus without building a view per node: this runs every cycle.
        ready = sum(n.gpus for n in self.nodes.values() if n.jobs == 0 and n.power in _READY)
        shortfall = max(0, reserve - ready)
        for node in sorted(self.nodes.values(), key=lambda n: n.name):
            if shortfall <= 0 or budget <= 0:
                break
            if node.power is PowerState.ASLEEP and self.now_s - node.power_since_s >= sleep.min_asleep_s:
                self._wake(node, "warm reserve")
                shortfall -= node.gpus
                budget -= 1

    def _ensure_tick(self) -> None:
        if not self._tick_pending:
            self._tick_pending = True
            interval = self.policy.interval_s
            self._push((math.floor(self.now_s / interval) + 1) * interval, _TICK, None)

    # ------------------------------------------------------------------ the loop

    def _cycle(self) -> None:
        self.cycles += 1
        snapshot = ClusterSnapshot(time_s=self.now_s, cluster=self.cluster, running=self._running_tuple(),
                                   pending=tuple(self.pending.values()), node_states=self.node_states)
        result = schedule_cycle(snapshot, self.policy.scheduler, self.policy.interval_s)
        grace_s = self.policy.scheduler.preemption.grace_s
        for action in result.actions:
            if isinstance(action, KillJob):
                self._kill(action)
            elif isinstance(action, PreemptJob):
                victim = self.running[action.job_id]
                self.running[action.job_id] = replace(victim, preempt_signalled_s=self.now_s,
                                                      preempted_for=action.for_job_id)
                self.stopping.add(action.job_id)
                self._running_version += 1
                self._push(self.now_s + grace_s, _TICK, "grace")
            elif isinstance(action, PlaceJob):
                self._start(action)
        for job_id in result.withdrawn:  # its beneficiary started elsewhere: it runs on, unsignalled
            signalled = self.running.get(job_id)
            if signalled is not None:
                self.running[job_id] = replace(signalled, preempt_signalled_s=None, preempted_for=None)
                self.stopping.discard(job_id)
                self._running_version += 1
        if self.check_every_cycle:
            placed = [self.running[a.job_id] for a in result.actions if isinstance(a, PlaceJob)]
            self._record(self._check_placements(placed))
            if self.cycles % FULL_CHECK_EVERY == 0:
                self._record(check_invariants(ClusterSnapshot(
                    time_s=self.now_s, cluster=self.cluster, running=tuple(self.running.values()),
                    node_states=self.node_states)))
        guard = queue_guard(result.waits, self.cluster)
        self._blocked = bool(guard.keep_awake)
        if guard != self._guard:
            self._guard = guard
            if self._relaxes:
                self._apply_guard()
        if self.policy.sleep.enabled:
            self._apply_wakes([a for a in result.actions if isinstance(a, WakeNode)])
            if self._sleep_check:  # only when an idle timeout has come due (IDLE_CHECK events)
                self._sleep_check = False
                self._plan_suspends(self._blocked)
        if self.pending and not result.actions and self._nothing_can_change():
            self.stalled = True  # every later cycle would be this one: the pending jobs never start
        elif self.pending:
            self._ensure_tick()  # retry: age boost, grace expiry, backfill windows

    def _nothing_can_change(self) -> bool:
        """No job runs, none is still to arrive, no node is waking or suspending: a cycle that placed
        and woke nothing now would place and wake nothing at any later time."""
        return not self.running and self.arrivals_left == 0 and not any(
            node.power in (PowerState.WAKING, PowerState.SUSPENDING) for node in self.nodes.values())

    def _record(self, problems: list[str]) -> None:
        if problems:
            self.violations += len(problems)
            self.violation_examples.extend(problems[: max(0, 5 - len(self.violation_examples))])

    def _check_placements(self, placed: list[RunningJob]) -> list[str]:
        """The invariants a cycle's placements could break, checked against the simulator's own books.

        A full check_invariants() over every running job also runs every FULL_CHECK_EVERY cycles and
        at the end; this incremental one keeps 'at every event' affordable on 64k-job traces.
        """
        problems: list[str] = []
        for running in placed:
            job = running.job
            if sum(s.units for s in running.slots) != job.units:
                problems.append(f"partial gang: {job.job_id}")
            for slot in running.slots:
                key = (slot.node, slot.gpu_index)
                if self.gpu_units.get(key, 0) > GPU_UNITS:
                    problems.append(f"over-committed GPU {slot.node}:{slot.gpu_index}")
                if self.nodes[slot.node].power is not PowerState.AWAKE:
                    problems.append(f"{job.job_id} placed on {slot.node}, which is {self.nodes[slot.node].power}")
        if placed:
            problems.extend(self.ledger.violations())
        return problems

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
        self.now_s = origin_s
        for node in self.nodes.values():
            node.idle_since_s = origin_s
            node.power_since_s = origin_s - 86_400.0  # awake long before the trace starts
            node.draw_since_s = origin_s
            gpu_w, host_w = node.draw_w()
            self.gpu_w += gpu_w
            self.host_w += host_w
            self._schedule_idle_check(node)
        for index, job in enumerate(self.jobs):
            self._push(job.submit_time_s, _ARRIVE, index)
        if self.rise_forecast is not None:
            self._push((math.floor(origin_s / HOUR_S) + 1) * HOUR_S, _HOUR, None)
        self.arrivals_left = len(self.jobs)
        end_s = origin_s + self.until_s if self.until_s is not None else math.inf
        processed = 0
        while self.events:
            time_s = self.events[0][0]
            if time_s > end_s:
                break
            self._advance(time_s)
            while self.events and self.events[0][0] == time_s:
                _, _, kind, data = heapq.heappop(self.events)
                processed += 1
                self._handle(kind, data)
            if self._dirty and (self.pending or any(r.preempt_signalled_s is not None for r in self._signalled())):
                self._dirty = False
                self._cycle()
            elif self._dirty:
                self._dirty = False  # nothing waits: a cycle could not place anything
            elif self._sleep_check:
                self._sleep_check = False
                self._plan_suspends(self._blocked)
            if self.progress is not None and processed % 5000 < 8:
                self.progress(len(self.completed), len(self.jobs))
            if (not self.pending and not self.running and self.arrivals_left == 0) or self.stalled:
                break
        if end_s < math.inf:
            self._advance(end_s)
        if self.attribution is not None:
            for node in self.nodes.values():
                self._meter_node(node, *node.draw_w())
            for running in self.running.values():
                self._charge_job(running, self.now_s)
        if self.check_every_cycle:
            self._record(check_invariants(ClusterSnapshot(
                time_s=self.now_s, cluster=self.cluster, running=tuple(self.running.values()),
                node_states=self.node_states)))

    def _running_tuple(self) -> tuple[RunningJob, ...]:
        """The running jobs as one tuple, rebuilt only when they change (the core skips its diff then)."""
        if self._running_cache is None or self._running_cache[0] != self._running_version:
            self._running_cache = (self._running_version, tuple(self.running.values()))
        return self._running_cache[1]

    def _signalled(self) -> list[RunningJob]:
        return [self.running[j] for j in self.stopping if j in self.running]

    def _handle(self, kind: int, data: Any) -> None:
        if kind == _ARRIVE:
            job = self.jobs[data]
            self.pending[job.job_id] = PendingJob(job)
            self.arrivals_left -= 1
            self._dirty = True
            self._demand_changed(job.gpus)
        elif kind == _FINISH:
            job_id, token = data
            if job_id in self.running and self.finish_token.get(job_id) == token:
                gpus = self.running[job_id].job.gpus
                self._stop(job_id)
                self.completed.add(job_id)
                self.finish_s[job_id] = self.now_s
                self.last_finish_s = self.now_s
                self._dirty = True
                self._demand_changed(-gpus)
        elif kind == _WAKE_DONE:
            node = self.nodes[data]
            if node.power is PowerState.WAKING:
                self._set_power(node, PowerState.AWAKE)
                node.idle_since_s = self.now_s
                node.idle_token += 1
                self._schedule_idle_check(node)
                self._dirty = True
        elif kind == _WAKE_CHECK:
            self._verify_wake(self.nodes[data])
        elif kind == _SUSPEND_DONE:
            node = self.nodes[data]
            if node.power is PowerState.SUSPENDING:
                self._set_power(node, PowerState.ASLEEP)
                self._dirty = bool(self.pending)
        elif kind == _IDLE_CHECK and data is None:
            self._sleep_check = True  # the shared re-check of deferred idle nodes
        elif kind == _IDLE_CHECK:
            name, token = data
            node = self.nodes[name]
            if node.idle_token == token and node.power is PowerState.AWAKE and node.jobs == 0:
                self._sleep_check = True
        elif kind == _TICK:
            if data is None:
                self._tick_pending = False
            self._dirty = True
        elif kind == _HOUR:
            # The forecast's hour turns: its reserve may ask for nodes before any job waits (the ramp).
            assert self.rise_forecast is not None
            self.rise_forecast.observe(self.now_s, self.offered_gpus)
            if self.asleep_nodes:  # (the forecast exists only when sleep is enabled)
                self._wake_for_reserve(self.policy.sleep.max_wakes_per_min - self._recent(self.wake_times))
            if self.arrivals_left or self.pending or self.running:
                self._push(self.now_s + HOUR_S, _HOUR, None)

    def _demand_changed(self, delta_gpus: float) -> None:
        self.offered_gpus += delta_gpus
        if self.rise_forecast is not None:
            self.rise_forecast.observe(self.now_s, self.offered_gpus)

    def _reserve_target_gpus(self) -> int:
        headroom = (self.rise_forecast.headroom_gpus(self.now_s, self.offered_gpus)
                    if self.rise_forecast is not None else 0)
        return warm_reserve_target_gpus(self.policy.sleep, self.allocated_gpus, headroom)

    # ------------------------------------------------------------------ results

    def _result(self, wall_s: float) -> SimResult:
        jobs = self.jobs
        waits: list[float] = []
        by_class: dict[str, list[float]] = {}
        sla = 0
        slowdowns: list[float] = []
        for job in jobs:
            start = self.first_start.get(job.job_id)
            if start is None:
                continue
            wait = start - job.submit_time_s
            waits.append(wait)
            by_class.setdefault(job.job_class, []).append(wait)
            limit = CLASS_WAIT_SLA_S.get(job.job_class)
            if limit is not None and wait > limit:
                sla += 1
            if job.job_id in self.completed:
                slowdowns.append(self.run_s[job.job_id] / job.duration_s)
        origin = jobs[0].submit_time_s if jobs else 0.0
        span_s = (self.now_s - origin) if jobs else 0.0
        # Work done, at full speed, by the jobs that completed: capping stretches run time and a
        # preemption re-runs lost work, and neither adds to it (so overload runs compare like with like).
        completed_gpu_hours = sum(j.gpus * j.duration_s for j in jobs if j.job_id in self.completed) / 3600.0
        values: dict[str, Any] = {
            "policy": self.policy.name,
            "jobs": len(jobs),
            "jobs_completed": len(self.completed),
            "jobs_not_started": len(jobs) - len(self.first_start),
            "unplaceable_jobs": sorted(self.pending)[:10] if self.stalled else [],
            "makespan_s": (self.last_finish_s - origin) if self.completed else 0.0,
            "energy_kwh": self.meter.facility_energy_kwh,
            "gpu_energy_kwh": self.meter.gpu_energy_kwh,
            "energy_kwh_per_gpu_hour": (self.meter.facility_energy_kwh / completed_gpu_hours
                                        if completed_gpu_hours > 0 else None),
            "cost": self.meter.cost,
            "co2_kg": self.meter.co2_g / 1000.0,
            "wait_s": wait_stats(waits),
            "wait_s_by_class": {c: wait_stats(v) for c, v in sorted(by_class.items())},
            "gpu_hours_allocated": self.gpu_hours_allocated,
            "gpu_hours_capacity": self.cluster.total_gpus * span_s / 3600.0,
            "slowdown_mean": (sum(slowdowns) / len(slowdowns)) if slowdowns else None,
            "preemptions": self.preemptions,
            "lost_gpu_hours": self.lost_gpu_s / 3600.0,
            "node_sleep_hours": self.sleep_s / 3600.0,
            "wakes": self.wakes,
            "failed_nodes": sorted(self.failed_nodes),
            "sla_violations": sla,
            "invariant_violations": self.violations,
            "sim_wall_s": wall_s,
            "pue": self.cluster.site.pue,
            "currency": self.cluster.site.currency,
            "scheduling_cycles": self.cycles,
        }
        return SimResult(values)


def wait_stats(waits: Sequence[float]) -> dict[str, float | None]:
    """p50, p95, p99 and mean of waits (nearest-rank percentiles); nulls when there are none."""
    if not waits:
        return {"p50": None, "p95": None, "p99": None, "mean": None}
    ordered = sorted(waits)

    def rank(q: float) -> float:
        return ordered[max(0, math.ceil(q * len(ordered)) - 1)]

    return {"p50": rank(0.50), "p95": rank(0.95), "p99": rank(0.99), "mean": sum(ordered) / len(ordered)}


def simulate(cluster: Cluster, policy: Policy, jobs: Sequence[Job], *, until_s: float | None = None,
             progress: Callable[[int, int], None] | None = None) -> dict[str, Any]:
    """Replay `jobs` under `policy`; the result keys of docs/SIMULATOR.md."""
    return Simulation(cluster, policy, jobs, until_s=until_s, progress=progress).run().values
