"""The Pareto frontier of a sweep: energy against p95 and p99 wait (issue 35).

Pure: points in, points out. A point dominates another when its facility energy, p95 wait and p99 wait are each
less than or equal to the other's and at least one is strictly less; the frontier is the points no other point
dominates. A named point (the shipped default) either sits on the frontier or is dominated, and then the
points that dominate it say by how much: the share of its energy they save and the seconds of p95 and p99 wait.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from greengpu.errors import BadInput
from greengpu.json_types import JsonValue


@dataclass(frozen=True)
class Point:
    """One replay's figures: a grid point of the sweep."""

    label: str
    energy_kwh: float
    p95_s: float
    p99_s: float

    def figures(self) -> tuple[float, float, float]:
        return self.energy_kwh, self.p95_s, self.p99_s


@dataclass(frozen=True)
class Dominator:
    """A point that dominates the named one, and by how much (positive: the dominator is better)."""

    point: Point
    energy_saved_fraction: float
    p95_saved_s: float
    p99_saved_s: float


@dataclass(frozen=True)
class Placement:
    """Where a named point sits: on the frontier (no dominators) or below it."""

    point: Point
    dominated_by: tuple[Dominator, ...]

    @property
    def on_frontier(self) -> bool:
        return not self.dominated_by


def dominates(a: Point, b: Point) -> bool:
    """Whether `a` is at least as good as `b` on energy, p95 and p99, and strictly better on one."""
    pairs = tuple(zip(a.figures(), b.figures(), strict=True))
    return all(x <= y for x, y in pairs) and any(x < y for x, y in pairs)


def _checked(points: Sequence[Point]) -> None:
    for point in points:
        if not all(math.isfinite(value) and value >= 0 for value in point.figures()):
            raise BadInput(f"{point.label}: energy and waits must be finite and not negative, got "
                           f"{point.figures()}")


def frontier(points: Sequence[Point]) -> list[Point]:
    """The points no other point dominates, by energy (then p95, p99, label). Equal points are all kept."""
    _checked(points)
    kept = [p for p in points if not any(dominates(q, p) for q in points)]
    return sorted(kept, key=lambda p: (*p.figures(), p.label))


def place(points: Sequence[Point], label: str) -> Placement:
    """Where the point named `label` sits among `points`; its dominators, the largest energy saving first."""
    _checked(points)
    named = [p for p in points if p.label == label]
    if not named:
        raise BadInput(f"--mark: {label!r} is not a point of the sweep ({', '.join(p.label for p in points)})")
    point = named[0]
    dominators = [Dominator(q, (point.energy_kwh - q.energy_kwh) / point.energy_kwh if point.energy_kwh else 0.0,
                            point.p95_s - q.p95_s, point.p99_s - q.p99_s)
                  for q in points if dominates(q, point)]
    dominators.sort(key=lambda d: (-d.energy_saved_fraction, -d.p95_saved_s, -d.p99_saved_s, d.point.label))
    return Placement(point, tuple(dominators))


def point_of(label: str, result: dict[str, JsonValue]) -> Point | None:
    """The point of one `simulate --json` result (None for a replay with no jobs)."""
    if result.get("empty"):
        return None
    energy, waits = result.get("energy_kwh"), result.get("wait_s")
    if not isinstance(waits, dict):
        raise BadInput(f"{label}: result has no wait_s figures")
    p95, p99 = waits.get("p95"), waits.get("p99")
    for key, value in (("energy_kwh", energy), ("wait_s.p95", p95), ("wait_s.p99", p99)):
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            raise BadInput(f"{label}: result's {key} is not a number ({value!r})")
    assert isinstance(energy, (int, float)) and isinstance(p95, (int, float)) and isinstance(p99, (int, float))
    try:
        point = Point(label, float(energy), float(p95), float(p99))
    except OverflowError:
        raise BadInput(f"{label}: result's figures are out of range") from None
    _checked([point])
    return point


def describe(points: Sequence[Point], mark: str | None) -> list[str]:
    """The frontier as text lines (energy relative to the marked point when there is one), then where the
    marked point sits."""
    edge = frontier(points)
    placement = place(points, mark) if mark is not None else None
    base = placement.point.energy_kwh if placement and placement.point.energy_kwh else None
    lines = [f"frontier: {len(edge)} of {len(points)} points (energy, p95 and p99 wait; no point is better on all)"]
    for p in edge:
        ratio = f" ({p.energy_kwh / base:.3f} of {mark}'s)" if base else ""
        flag = "  <- " + str(mark) if p.label == mark else ""
        lines.append(f"  {p.label:<34} energy {p.energy_kwh:>12,.1f} kWh{ratio}  wait p95 {p.p95_s:>8,.0f} s  "
                     f"p99 {p.p99_s:>8,.0f} s{flag}")
    if placement is None:
        return lines
    if placement.on_frontier:
        lines.append(f"{mark}: on the frontier")
        return lines
    own = placement.point
    lines.append(f"{mark} (energy {own.energy_kwh:,.1f} kWh, wait p95 {own.p95_s:,.0f} s, p99 {own.p99_s:,.0f} s): "
                 f"dominated by {len(placement.dominated_by)} point(s):")
    for d in placement.dominated_by:
        lines.append(f"  {d.point.label:<34} saves {100 * d.energy_saved_fraction:5.2f}% energy, p95 "
                     f"{d.p95_saved_s:+,.0f} s better, p99 {d.p99_saved_s:+,.0f} s better")
    return lines


def unique_labels(labels: Iterable[str]) -> bool:
    """Whether no label repeats (a frontier names its points by label)."""
    seen = list(labels)
    return len(seen) == len(set(seen))
