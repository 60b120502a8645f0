"""Lever 2 in the tick: which idle nodes sleep now, and which sleeping nodes wake.

Suspends come from `greengpu.sleep.suspends.plan_suspends` (windows, idle timeout, anti-flapping, warm
reserve, rate limit; none while work waits). Wakes are the core's (a cycle names the asleep nodes its
blocked jobs need) within the wake rate limit and the minimum time asleep, then as many more as the
warm reserve is short (first by name, so every body wakes the same ones).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from greengpu.model import GPU_UNITS, PlaceJob, SleepNode, WakeNode
from greengpu.policy import SleepPolicy
from greengpu.sleep.suspends import NodeUse, NodeView, idle_by_use, plan_suspends, warm_reserve_target_gpus
from greengpu.sleep.work_waiting import WorkWaiting

RESERVE_REASON = "warm reserve"


@dataclass(frozen=True)
class SleepObservation:
    """What the sleep lever needs to know of the cluster now."""

    now_s: float
    idle_awake: tuple[NodeView, ...] = ()
    """Awake nodes without work: the only ones that may go to sleep."""
    asleep: tuple[NodeView, ...] = ()
    """Asleep nodes (`power_since_s`: when they fell asleep): the only ones a wake-up reaches."""
    ready_idle_gpus: int = 0
    """GPUs on nodes without work that are awake or already waking (what the warm reserve counts)."""
    busy_gpus: float = 0.0
    forecast_headroom_gpus: int | None = None
    """The demand forecast's calibrated rise at this hour (greengpu.forecast.reserve); None without one, or
    before it has history of this hour."""
    arrived_gpus: float | None = None
    """GPUs asked by the jobs that arrived over the last day (greengpu.sleep.arrivals); None: not known,
    the warm reserve follows use alone."""
    suspends_last_minute: int = 0
    wakes_last_minute: int = 0
    timezone: str = "UTC"
    """The site's IANA time zone (`Site.timezone`): the sleep windows are read on its wall clock."""
    use: Mapping[str, NodeUse] = field(default_factory=dict, compare=False)
    """Measured GPU use per node from the agents' reports (greengpu.sleep.suspends.idle_by_use); empty: a body
    without reports, idle means without work."""


def after_placements(seen: SleepObservation, placements: Sequence[PlaceJob],
                     stopped_gpus: float = 0.0) -> SleepObservation:
    """The observation once the cycle's placements have started (a node that receives a job is busy) and
    its stops are done (`stopped_gpus`: the GPUs the jobs it stopped held are no longer in use).

    Bodies that carry out a cycle's actions before asking the sleep lever (the simulator does) see
    this already; a body that asks the whole tick at once (the daemon) gets the same view through it.
    """
    if stopped_gpus:
        seen = replace(seen, busy_gpus=seen.busy_gpus - stopped_gpus)
    if not placements:
        return seen
    taken = {slot.node for action in placements for slot in action.slots}
    started_gpus = sum(slot.units for action in placements for slot in action.slots) / GPU_UNITS
    now_busy = [view for view in seen.idle_awake if view.name in taken]
    return replace(seen, idle_awake=tuple(v for v in seen.idle_awake if v.name not in taken),
                   ready_idle_gpus=seen.ready_idle_gpus - sum(v.gpus for v in now_busy),
                   busy_gpus=seen.busy_gpus + started_gpus)


def reserve_target_gpus(seen: SleepObservation, policy: SleepPolicy) -> int:
    """Free GPUs to keep awake now (`warm_reserve_target_gpus` of the observation)."""
    return warm_reserve_target_gpus(policy, seen.busy_gpus, seen.forecast_headroom_gpus, seen.arrived_gpus)


def reserve_short(reserve_gpus: float, ready_idle_gpus: float) -> bool:
    """Whether the warm reserve lacks GPUs: the one test `plan_wakes` and the simulator's shortcut (no wake
    asked, so only the reserve could wake a node) both make."""
    return reserve_gpus > 0 and ready_idle_gpus < reserve_gpus


def plan_sleep(seen: SleepObservation, policy: SleepPolicy, waiting: WorkWaiting) -> tuple[SleepNode, ...]:
    """The idle nodes to suspend now, longest idle first."""
    idle = idle_by_use(seen.idle_awake, seen.use, policy.idle_util_threshold) if seen.use else seen.idle_awake
    return tuple(plan_suspends(seen.now_s, idle, policy, blocked_pending=waiting.waiting,
                               suspends_last_minute=seen.suspends_last_minute, timezone=seen.timezone,
                               reserve_gpus=reserve_target_gpus(seen, policy),
                               keep_awake=waiting.guard.keep_awake))


def plan_wakes(seen: SleepObservation, policy: SleepPolicy, asked: Sequence[WakeNode] = ()) -> tuple[WakeNode, ...]:
    """The asleep nodes to wake now: those the core `asked` for, then those the warm reserve lacks.

    A node the core asks for is woken however briefly it has slept: work waits for it, and a lever may
    spend slack, never queue time (`min_asleep_s` only keeps the warm reserve from waking a node that
    has just gone to sleep). A wake held back here (the rate limit) is asked for again by a later cycle.
    """
    if not policy.enabled or not seen.asleep:
        return ()
    budget = policy.max_wakes_per_min - seen.wakes_last_minute
    asleep = {view.name: view for view in seen.asleep}
    may_wake = {name: view for name, view in asleep.items() if seen.now_s - view.power_since_s >= policy.min_asleep_s}
    chosen: dict[str, WakeNode] = {}
    for action in asked:
        if budget <= 0:
            break
        if action.node in asleep and action.node not in chosen:
            chosen[action.node] = action
            budget -= 1
    reserve = reserve_target_gpus(seen, policy)
    if not reserve_short(reserve, seen.ready_idle_gpus):
        return tuple(chosen.values())
    # A node woken for a job holds no work yet: it counts towards the reserve as soon as it wakes.
    shortfall = reserve - seen.ready_idle_gpus - sum(asleep[name].gpus for name in chosen)
    # The cheapest nodes to keep awake wake first (the reserve is held by them; see plan_suspends).
    for name in sorted(may_wake, key=lambda n: (may_wake[n].idle_w, n)):
        if shortfall <= 0 or budget <= 0:
            break
        if name not in chosen:
            chosen[name] = WakeNode(name, RESERVE_REASON)
            shortfall -= may_wake[name].gpus
            budget -= 1
    return tuple(chosen.values())
