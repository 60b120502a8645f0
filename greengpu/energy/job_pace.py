"""How fast a job runs under its GPUs' settings, and the work it has done over changing paces. Pure.

One function for every body: the simulator paces a replayed job by the setting the capping lever gives
its GPUs, the fake cluster (`greengpu daemon --backend fake`) by the setting its GPUs hold, and both
turn that setting into a speed here (the power model's class curves, `curves.gpu_draw`), integrate the
work over the paces here, and round a run to whole seconds here. So a capped job ends when the replay
says it ends, whichever body runs it (tests/integration/test_differential_one_brain.py).
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence

from greengpu.energy.curves import gpu_draw
from greengpu.model import NodeType

Pace = tuple[float, float, float]
"""(since when, speed relative to uncapped, uncapped seconds of work done before then)."""


def setting_speed(node_type: NodeType, job_class: str | None, limit_w: float | None,
                  locked_clock_mhz: int | None, max_clock_mhz: int) -> float:
    """Speed relative to uncapped of `job_class` work on a GPU of `node_type` holding this setting.

    `limit_w`: the power limit it holds (None, or its default: uncapped); `locked_clock_mhz`: its locked SM
    clock (None: unlocked), read as a fraction of `max_clock_mhz`, the GPU's maximum SM clock."""
    clock = None if locked_clock_mhz is None else locked_clock_mhz / max_clock_mhz
    return gpu_draw(node_type, job_class, limit_w, clock)[1]


def run_s(work_s: float, speed: float) -> float:
    """Wall seconds for `work_s` of uncapped work at `speed` (whole seconds, like the traces)."""
    return float(math.ceil(work_s / speed - 1e-9))


def work_done_s(paces: Sequence[Pace], at_s: float) -> float:
    """Uncapped seconds of work done by `at_s` over `paces` (in time order)."""
    index = max(0, bisect.bisect_right(paces, at_s, key=lambda pace: pace[0]) - 1)
    since_s, speed, before_s = paces[index]
    return before_s + max(0.0, at_s - since_s) * speed


def next_pace(paces: Sequence[Pace], now_s: float, speed: float) -> Pace:
    """The pace a job goes on at from `now_s` at `speed` (its work so far is its third member)."""
    since_s, old_speed, before_s = paces[-1]
    return (now_s, speed, before_s + (now_s - since_s) * old_speed)


def end_s(duration_s: float, pace: Pace) -> float:
    """When a job of `duration_s` uncapped seconds ends if it keeps `pace`."""
    since_s, speed, before_s = pace
    return since_s + run_s(max(0.0, duration_s - before_s), speed)
