"""Sleep and wake in a replay: the tick's sleep lever carried out on simulated nodes.

Decisions come from `greengpu.sleep.sleep_wake` (`plan_sleep`, `plan_wakes`) on an observation built
here, as a live body builds one from its cluster. What is the body's own: suspends and boots take
time, wake-ups to nodes that never answer go through verification (`greengpu.sleep.wake_verify`)
until the node is marked failed, and idle nodes held awake are looked at again when that can change.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Collection

from greengpu.forecast.reserve import HOUR_S, reserve_forecaster
from greengpu.model import PowerState, WakeNode
from greengpu.policy import Policy
from greengpu.sim.clock import EventClock, EventKind
from greengpu.sim.nodes import NodeFleet, SimNode
from greengpu.sleep.sleep_wake import SleepObservation, plan_sleep, plan_wakes, reserve_short
from greengpu.sleep.suspends import in_window, next_window_start_s, warm_reserve_target_gpus
from greengpu.sleep.wake_verify import WakeStage, WakeTrack, advance, next_due_s, start_wake
from greengpu.sleep.work_waiting import WorkWaiting

SUSPEND_S = 30.0
"""Seconds from the suspend command to the node drawing sleep power (it draws idle power meanwhile)."""
RATE_WINDOW_S = 60.0


class SleepBody:
    """Suspends, wakes and wake verification of one replay."""

    def __init__(self, policy: Policy, fleet: NodeFleet, clock: EventClock, never_wake: Collection[str],
                 demand: Callable[[], tuple[float, float]], arrived: Callable[[], float] | None = None,
                 timezone: str = "UTC") -> None:
        self.policy = policy
        self.sleep = policy.sleep
        self.fleet = fleet
        self.clock = clock
        self.never_wake = frozenset(never_wake)
        """Nodes whose wake-ups are lost (a dead NIC or BMC): verification retries, then marks them failed."""
        self.demand = demand
        """(GPUs allocated, GPUs offered: running + pending) now."""
        self.arrived = arrived
        """GPUs asked by the last day's arrivals (greengpu.sleep.arrivals); None: the reserve follows use alone."""
        self.rise_forecast = (reserve_forecaster(self.sleep.warm_reserve_from_forecast,
                                                 max((n.boot_s for n in fleet.nodes.values()), default=HOUR_S),
                                                 sum(n.gpus for n in fleet.nodes.values()), timezone)
                              if self.sleep.enabled and self.sleep.forecasts_demand else None)
        self.wake_tracks: dict[str, WakeTrack] = {}
        self.failed_nodes: list[str] = []
        self.suspend_times: deque[float] = deque()
        self.wake_times: deque[float] = deque()
        self.wakes = 0
        self._recheck_at = float("-inf")
        self._due: dict[str, int] = {}
        """Nodes whose idle check came due, with their idle token then: the only ones `plan_sleep` can choose."""
        self.timezone = timezone
        """The site's time zone: the windows are read on its wall clock."""

    # ------------------------------------------------------------------ observation

    def _recent(self, times: deque[float]) -> int:
        now_s = self.clock.now_s
        while times and times[0] <= now_s - RATE_WINDOW_S:
            times.popleft()
        return len(times)

    def forecast_headroom_gpus(self) -> int | None:
        """The demand forecast's reserve now (None without a forecast or before it knows this hour)."""
        if self.rise_forecast is None:
            return None
        return self.rise_forecast.reserve_gpus(self.clock.now_s, self.demand()[1],
                                              self.sleep.warm_reserve_from_forecast)

    def arrived_gpus(self) -> float | None:
        return self.arrived() if self.arrived is not None else None

    def observe_for_sleep(self) -> SleepObservation:
        """What `plan_sleep` needs: the idle awake nodes, use, forecast and the suspend rate."""
        return SleepObservation(now_s=self.clock.now_s, idle_awake=self.fleet.idle_awake_views(),
                                busy_gpus=self.demand()[0], forecast_headroom_gpus=self.forecast_headroom_gpus(),
                                arrived_gpus=self.arrived_gpus(), suspends_last_minute=self._recent(self.suspend_times),
                                timezone=self.timezone)

    def observe_for_wakes(self) -> SleepObservation:
        """What `plan_wakes` needs: the asleep nodes, the ready free GPUs, use, forecast and the wake rate."""
        return SleepObservation(now_s=self.clock.now_s, asleep=self.fleet.asleep_views(),
                                ready_idle_gpus=self.fleet.ready_idle_gpus(), busy_gpus=self.demand()[0],
                                forecast_headroom_gpus=self.forecast_headroom_gpus(), arrived_gpus=self.arrived_gpus(),
                                wakes_last_minute=self._recent(self.wake_times))

    # ------------------------------------------------------------------ suspends

    def schedule_idle_check(self, node: SimNode) -> None:
        """Look at `node` again when its idle timeout and minimum awake time have both passed."""
        if not self.sleep.enabled or node.idle_since_s is None:
            return
        due = max(node.idle_since_s + self.sleep.idle_timeout_s, node.power_since_s + self.sleep.min_awake_s)
        self.clock.push(max(due, self.clock.now_s), EventKind.IDLE_CHECK, (node.name, node.idle_token))

    def ask(self, asked: list[WakeNode], waiting: WorkWaiting) -> None:
        """Ask the sleep lever what a daemon's tick asks it now: the wakes (the core's and the warm reserve's),
        then the suspends. The replay asks at every point where its observation may have changed (every
        cycle, every idle timeout come due, every change in use), so a node the warm reserve held sleeps as
        soon as the reserve lets it, as under the daemon (tests/integration/test_differential_one_brain.py)."""
        if self.sleep.enabled:
            self.apply_wakes(asked)
            if self._any_due():  # else the lever would put none to sleep (asked every cycle: keep it cheap)
                self.suspend_idle(waiting)

    def came_due(self, node: SimNode) -> bool:
        """`node`'s idle timeout and minimum awake time have passed while it stayed idle (an IDLE_CHECK)."""
        self._due[node.name] = node.idle_token
        return True

    def _any_due(self) -> bool:
        """Whether a node is still idle and awake since its idle check came due (those left behind are dropped)."""
        nodes = self.fleet.nodes
        for name in [n for n, token in self._due.items() if nodes[n].idle_token != token
                     or nodes[n].power is not PowerState.AWAKE or nodes[n].jobs]:
            del self._due[name]
        return bool(self._due)

    def suspend_idle(self, waiting: WorkWaiting) -> None:
        """Put to sleep the idle nodes the sleep lever chooses now."""
        now_s = self.clock.now_s
        for action in plan_sleep(self.observe_for_sleep(), self.sleep, waiting):
            node = self.fleet.nodes[action.node]
            self.fleet.set_power(node, PowerState.SUSPENDING, now_s)
            self.suspend_times.append(now_s)
            self.clock.push(now_s + SUSPEND_S, EventKind.SUSPEND_DONE, node.name)
        # Nodes still idle but not allowed to sleep now are looked at again when that can change: at the
        # next window opening, or at the next tick when work was waiting or the rate limit held them.
        # (One held by the warm reserve is looked at again at the next cycle or change in use: `ask`.)
        if not self.fleet.overdue_idle(now_s, self.sleep.idle_timeout_s):
            return
        recheck: float | None = None
        if not in_window(now_s, self.sleep.windows, self.timezone):
            recheck = next_window_start_s(now_s, self.sleep.windows, self.timezone)
        elif ((self.sleep.priority_aware and waiting.waiting)
              or self._recent(self.suspend_times) >= self.sleep.max_suspends_per_min):
            recheck = now_s + self.policy.interval_s
        if recheck is not None and (self._recheck_at <= now_s or recheck < self._recheck_at):
            self._recheck_at = recheck
            self.clock.push(recheck, EventKind.IDLE_CHECK, None)

    def suspend_done(self, name: str) -> bool:
        """A suspend completes; True when the node is now asleep."""
        node = self.fleet.nodes[name]
        if node.power is not PowerState.SUSPENDING:
            return False
        self.fleet.set_power(node, PowerState.ASLEEP, self.clock.now_s)
        return True

    # ------------------------------------------------------------------ wakes

    def _wake(self, node: SimNode, reason: str) -> None:
        now_s = self.clock.now_s
        self.fleet.set_power(node, PowerState.WAKING, now_s)
        self.wakes += 1
        self.wake_times.append(now_s)
        if node.name in self.never_wake:
            track, _ = start_wake(node.name, now_s, self.sleep, reason)
            self.wake_tracks[node.name] = track
            self.clock.push(track.deadline_s, EventKind.WAKE_CHECK, node.name)
        else:
            self.clock.push(now_s + node.boot_s, EventKind.WAKE_DONE, node.name)

    def apply_wakes(self, asked: list[WakeNode]) -> None:
        """Wake what the sleep lever chooses: the nodes the core `asked` for, then the warm reserve's."""
        if self.fleet.asleep_nodes == 0:
            return
        if not asked:
            # Only the warm reserve could wake a node: when it is not short, the lever would choose none
            # (this runs every cycle; building the observation each time cost 15% of a replay).
            reserve = warm_reserve_target_gpus(self.sleep, self.demand()[0], self.forecast_headroom_gpus(),
                                               self.arrived_gpus())
            if not reserve_short(reserve, self.fleet.ready_idle_gpus()):
                return
        for action in plan_wakes(self.observe_for_wakes(), self.sleep, asked):
            self._wake(self.fleet.nodes[action.node], action.reason)

    def wake_done(self, name: str) -> bool:
        """A boot completes; True when the node is now awake (and idle)."""
        node = self.fleet.nodes[name]
        if node.power is not PowerState.WAKING:
            return False
        self.fleet.set_power(node, PowerState.AWAKE, self.clock.now_s)
        node.idle_since_s = self.clock.now_s
        node.idle_token += 1
        self.schedule_idle_check(node)
        return True

    def verify_wake(self, name: str) -> bool:
        """A node under verification did not come up: retry after backoff, or mark it failed (wake_verify).

        True when the node was just marked failed (the core then plans its waiting work elsewhere).
        """
        node = self.fleet.nodes[name]
        track = self.wake_tracks.get(name)
        if track is None or node.power is not PowerState.WAKING:
            return False
        track, events = advance(track, self.clock.now_s, False, self.sleep)
        self.wake_tracks[name] = track
        self.wakes += sum(1 for e in events if e.kind == "send")
        if track.stage is WakeStage.FAILED:
            self.fleet.set_power(node, PowerState.FAILED, self.clock.now_s)
            self.failed_nodes.append(name)
            return True
        due = next_due_s(track)
        if due is not None:
            self.clock.push(due, EventKind.WAKE_CHECK, name)
        return False

    # ------------------------------------------------------------------ the demand forecast

    def start_forecast(self, origin_s: float) -> None:
        if self.rise_forecast is not None:
            self.clock.push((math.floor(origin_s / HOUR_S) + 1) * HOUR_S, EventKind.HOUR, None)

    def demand_changed(self) -> None:
        if self.rise_forecast is not None:
            self.rise_forecast.observe(self.clock.now_s, self.demand()[1])

    def hour_turns(self, more_to_come: bool) -> None:
        """The forecast's hour turns: its reserve may ask for nodes before any job waits (the ramp)."""
        assert self.rise_forecast is not None
        self.rise_forecast.observe(self.clock.now_s, self.demand()[1])
        if self.fleet.asleep_nodes:
            self.apply_wakes([])
        if more_to_come:
            self.clock.push(self.clock.now_s + HOUR_S, EventKind.HOUR, None)

