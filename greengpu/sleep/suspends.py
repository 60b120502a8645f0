"""Which idle nodes may sleep now: windows, idle timeout, anti-flapping, warm reserve, rate limit.

Pure: the body passes what it observed (per node: power state, since when, whether it holds work,
since when it is idle) and gets back the nodes to suspend. Waking is decided by asking the
scheduling core where pending work would go if sleeping nodes were up (see sim.engine and the
daemon), so a wake never happens for a node the core would not use.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, replace

from greengpu.localtime import UTC_NAME, local_day, moment_s, weekday_and_minute
from greengpu.model import NodeType, PowerState, SleepNode
from greengpu.policy import WEEKDAYS, SleepPolicy, SleepWindow

DAY_S = 86_400


def in_window(time_s: float, windows: Sequence[SleepWindow], timezone: str = UTC_NAME) -> bool:
    """Whether `time_s` falls in any window on the wall clock of `timezone` (a window may cross midnight)."""
    day_index, minute = weekday_and_minute(time_s, timezone)
    today = WEEKDAYS[day_index]
    yesterday = WEEKDAYS[(day_index - 1) % 7]
    for window in windows:
        start, end = window.start_minute, window.end_minute
        if start < end:
            if today in window.days and start <= minute < end:
                return True
        else:  # crosses midnight: [start, 24:00) on the day named, [00:00, end) the day after
            if today in window.days and minute >= start:
                return True
            if yesterday in window.days and minute < end:
                return True
    return False


def next_window_start_s(time_s: float, windows: Sequence[SleepWindow], timezone: str = UTC_NAME) -> float | None:
    """The first time after `time_s` at which a window opens on the wall clock of `timezone` (None when there is
    no window). Days are the local calendar's, so a window opens at its wall-clock time across a DST change."""
    today, first_day = local_day(time_s, timezone)
    best: float | None = None
    for offset in range(8):
        weekday = WEEKDAYS[(first_day + offset) % 7]
        date = today + dt.timedelta(days=offset)
        for window in windows:
            if weekday in window.days:
                start = moment_s(date, window.start_minute, timezone)
                if start > time_s and (best is None or start < best):
                    best = start
        if best is not None:
            break
    return best


@dataclass(frozen=True)
class NodeView:
    """What the sleep planner needs to know of one node."""

    name: str
    gpus: int
    power: PowerState
    power_since_s: float
    busy: bool
    idle_since_s: float | None
    """When the node last became free of work; None while it holds work."""
    idle_w: float = 0.0
    """What the node draws awake and without work (host and idle GPUs, from the inventory): the warm
    reserve is held by the nodes that cost least to keep awake. 0 where a body does not know it."""


@dataclass(frozen=True)
class NodeUse:
    """What a node's agent last reported of its GPUs' use (the daemon's report channel)."""

    gpu_util_max: float | None
    """The highest utilisation of its GPUs in [0, 1]; None: no fresh report (unknown)."""
    job_processes: int = 0
    """Processes seen on its GPUs."""
    last_busy_s: float | None = None
    """The last time a report showed a process or a GPU at or above the idle threshold (None: never seen)."""


def idle_by_use(nodes: Sequence[NodeView], use: Mapping[str, NodeUse], idle_util_threshold: float) -> tuple[
        NodeView, ...]:
    """The nodes without work that are idle by measured use too: a node with a report is idle only when all
    its GPUs are below `idle_util_threshold` and run no process, and its idle time counts from the last report
    that showed it busy. A node whose report is stale is unknown: it stays awake (unknown never makes a node
    look idle). A node without any report (a body without agents) is idle as before: it holds no work."""
    kept: list[NodeView] = []
    for node in nodes:
        seen = use.get(node.name)
        if seen is None:
            kept.append(node)
            continue
        if seen.gpu_util_max is None or seen.job_processes or seen.gpu_util_max >= idle_util_threshold:
            continue
        if seen.last_busy_s is not None and node.idle_since_s is not None and seen.last_busy_s > node.idle_since_s:
            node = replace(node, idle_since_s=seen.last_busy_s)
        kept.append(node)
    return tuple(kept)


def idle_draw_w(node_type: NodeType) -> float:
    """What a node of `node_type` draws awake and without work: its host and its idle GPUs (W)."""
    return node_type.host_idle_w + node_type.gpus * node_type.gpu_idle_w


def warm_reserve_target_gpus(policy: SleepPolicy, busy_gpus: float, forecast_headroom_gpus: int | None = None,
                             arrived_gpus: float | None = None) -> int:
    """Free GPUs to keep awake: the fixed floor, a share of the GPUs in use, and (with `use_forecast`)
    the forecast's headroom, whichever is most. With `arrived_gpus` (GPUs asked by the jobs that arrived
    over the last day, greengpu.sleep.arrivals), the share counts no more GPUs than arrived: a reserve
    is for work that arrives, and a cluster that only drains what it holds needs none.

    Demand arrives in bursts (a sweep of hundreds of one-GPU jobs), and bursts come when the
    cluster is busy: a reserve that follows use keeps them from waiting a boot at busy times and
    costs little at quiet ones (docs/SLEEP.md has the Philly figures). The forecast's headroom
    (greengpu.forecast.reserve: the calibrated upper rise of demand at this hour of day, less what has
    already arrived; None: the forecast has no history of this hour yet, or there is none) wakes nodes
    before a daily ramp. With `warm_reserve_from_forecast`, a known headroom sizes the reserve alone
    (above the fixed floor): the reserve is for the work that may arrive before a node could boot, and
    the forecast's upper bound is that; the share of use holds until the forecast knows the hour.
    """
    # The share of use rounds down: a reserve is what use justifies, in whole GPUs. Rounded up, a third
    # of a GPU in use kept a whole GPU (on a small cluster, a whole server) awake; a site that wants a
    # minimum whatever the use says sets the fixed floor.
    followed_gpus = busy_gpus if arrived_gpus is None else min(busy_gpus, arrived_gpus)
    share = math.floor(policy.warm_reserve_busy_fraction * followed_gpus + 1e-9)
    if policy.warm_reserve_from_forecast and forecast_headroom_gpus is not None:
        return max(policy.warm_reserve_gpus, forecast_headroom_gpus)
    headroom = (forecast_headroom_gpus or 0) if policy.use_forecast else 0
    return max(policy.warm_reserve_gpus, share, headroom)


def plan_suspends(now_s: float, nodes: Sequence[NodeView], policy: SleepPolicy, *, blocked_pending: bool,
                  suspends_last_minute: int, timezone: str = UTC_NAME,
                  reserve_gpus: int | None = None, keep_awake: Collection[str] = ()) -> list[SleepNode]:
    """The idle nodes to suspend now, in a stable order (longest idle first).

    `reserve_gpus` is the warm reserve to keep (`warm_reserve_target_gpus`); None: the fixed floor.
    `keep_awake` names nodes a waiting job could use (greengpu.sched.slack): a lever may spend slack,
    never queue time, so with `priority_aware` none of them sleeps. `blocked_pending` without
    `keep_awake` (a body that only knows that something waits for capacity) keeps every node awake.
    """
    reserve = policy.warm_reserve_gpus if reserve_gpus is None else reserve_gpus
    if not policy.enabled or not in_window(now_s, policy.windows, timezone):
        return []
    if policy.priority_aware and blocked_pending and not keep_awake:
        return []  # work is waiting for capacity: putting capacity to sleep now would only delay it
    protected = keep_awake if policy.priority_aware else ()
    budget = policy.max_suspends_per_min - suspends_last_minute
    if budget <= 0:
        return []
    free_awake_gpus = sum(n.gpus for n in nodes if n.power is PowerState.AWAKE and not n.busy)
    candidates = sorted(
        (n for n in nodes
         if n.power is PowerState.AWAKE and not n.busy and n.idle_since_s is not None
         and now_s - n.idle_since_s >= policy.idle_timeout_s
         and now_s - n.power_since_s >= policy.min_awake_s and n.name not in protected),
        key=lambda n: (n.idle_since_s, n.name),
    )
    if reserve > 0:
        # The reserve is held by the nodes that cost least to keep awake: the dearest go to sleep first
        # (a one-GPU reserve on a workstation, not on an 8-GPU server). Stable: ties by idle time.
        candidates.sort(key=lambda n: -n.idle_w)
    chosen: list[SleepNode] = []
    for node in candidates:
        if len(chosen) >= budget:
            break
        if free_awake_gpus - node.gpus < reserve:
            continue
        free_awake_gpus -= node.gpus
        chosen.append(SleepNode(node.name, f"idle {now_s - (node.idle_since_s or now_s):.0f} s"))
    return chosen


def warm_reserve_shortfall_gpus(nodes: Sequence[NodeView], policy: SleepPolicy,
                                reserve_gpus: int | None = None) -> int:
    """Free GPUs missing from the warm reserve (awake or waking nodes without work count)."""
    reserve = policy.warm_reserve_gpus if reserve_gpus is None else reserve_gpus
    if not policy.enabled or reserve <= 0:
        return 0
    ready = sum(n.gpus for n in nodes if n.power in (PowerState.AWAKE, PowerState.WAKING) and not n.busy)
    return max(0, reserve - ready)
