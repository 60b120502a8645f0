"""A grid of a policy's knobs for a Pareto sweep (greengpu/sim/pareto.py): capping's max_slowdown per class
(every class's value times a scale: 0 caps nothing that a slowdown bounds), sleep's warm reserve fraction
(`warm_reserve_busy_fraction`) and its idle timeout (`idle_timeout_s`). The point with scale 1 and the base
policy's own reserve and timeout is the base policy itself, unchanged, so it is labelled with its name."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from greengpu.policy import Policy


@dataclass(frozen=True)
class Knobs:
    """One grid point."""

    slowdown_scale: float
    reserve_fraction: float
    idle_timeout_s: float

    def label(self) -> str:
        return f"slow x{self.slowdown_scale:g} reserve {self.reserve_fraction:g} idle {self.idle_timeout_s:g}s"


def knobs_of(base: Policy) -> Knobs:
    """The base policy's own grid point."""
    return Knobs(1.0, base.sleep.warm_reserve_busy_fraction, base.sleep.idle_timeout_s)


def with_knobs(base: Policy, knobs: Knobs) -> Policy:
    """The base policy with these knobs; the base itself (same object) at its own point."""
    if knobs == knobs_of(base):
        return base
    classes = {name: replace(c, max_slowdown=min(1.0, c.max_slowdown * knobs.slowdown_scale))
               for name, c in base.capping.classes.items()}
    return replace(base, name=knobs.label(), capping=replace(base.capping, classes=classes),
                   sleep=replace(base.sleep, warm_reserve_busy_fraction=knobs.reserve_fraction,
                                 idle_timeout_s=knobs.idle_timeout_s))


def knob_grid(base: Policy, slowdown_scales: Sequence[float], reserve_fractions: Sequence[float],
              idle_timeouts_s: Sequence[float]) -> list[tuple[str, Policy]]:
    """Every combination (scale, then reserve, then timeout), labelled; the base policy's own point is always
    in the grid, labelled with the base's name."""
    own = knobs_of(base)
    points = [Knobs(s, r, t) for s in dict.fromkeys(slowdown_scales) for r in dict.fromkeys(reserve_fractions)
              for t in dict.fromkeys(idle_timeouts_s)]
    if own not in points:
        points.append(own)
    return [(base.name if k == own else k.label(), with_knobs(base, k)) for k in points]
