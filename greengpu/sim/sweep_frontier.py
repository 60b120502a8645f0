"""`greengpu sweep --frontier` and `--plot`: the Pareto frontier (greengpu/sim/pareto.py) of a sweep's policies,
one per month and seed of the grid (each policy a point: its facility energy, p95 and p99 wait)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from greengpu.errors import BadInput
from greengpu.json_types import JsonObject, JsonValue
from greengpu.sim.pareto import Point, describe, frontier, place, point_of
from greengpu.sim.sweep import ReplaySpec
from greengpu.sim.sweep_chart import check_chart_path


@dataclass(frozen=True)
class FrontierGroup:
    """The policies of one month and seed of the grid."""

    month: str
    seed: int
    points: tuple[Point, ...]
    mark: str | None

    def title(self) -> str:
        return f"{self.month or 'whole trace'}, seed {self.seed}"


def policy_label(spec: ReplaySpec) -> str:
    """A policy's name on the frontier: a built-in's name, a file's stem."""
    return Path(spec.policy).stem if spec.policy_sha256 else spec.policy


def check_labels(specs: Sequence[ReplaySpec], mark: str | None) -> str | None:
    """The point to mark (`mark`, or `default` when the grid has it); one line when two policies share a name
    or `mark` is not one of them. Called before any replay runs."""
    labels: dict[str, str] = {}
    for spec in specs:
        label = policy_label(spec)
        if labels.setdefault(label, spec.policy) != spec.policy:
            raise BadInput(f"--policy: {labels[label]} and {spec.policy} would both be {label!r} on the frontier; "
                           "rename one file")
    if mark is None:
        return "default" if "default" in labels else None
    if mark not in labels:
        raise BadInput(f"--mark: {mark!r} is not a policy of the sweep ({', '.join(labels)})")
    return mark


def check_frontier_flags(specs: Sequence[ReplaySpec], mark: str | None, show: bool, plot_file: str | None
                         ) -> str | None:
    """`--frontier`, `--mark` and `--plot` checked before any replay runs; the point to mark."""
    if mark is not None and not (show or plot_file):
        raise BadInput("--mark: names a point of the frontier: give --frontier or --plot too")
    if plot_file is not None:
        check_chart_path(Path(plot_file))
    return check_labels(specs, mark)


def frontier_text(groups: Sequence[FrontierGroup]) -> list[str]:
    """What `--frontier` prints: each group's title, its frontier and where the marked point sits."""
    lines = []
    for group in groups:
        lines.append(f"{group.title()}:")
        lines.extend(f"  {line}" for line in describe(group.points, group.mark))
    return lines


def frontier_groups(specs: Sequence[ReplaySpec], results: Sequence[JsonObject],
                    mark: str | None) -> list[FrontierGroup]:
    """One group per (month, seed), in the grid's order; a month with no jobs has no group."""
    grouped: dict[tuple[str, int], list[Point]] = {}
    for spec, result in zip(specs, results, strict=True):
        point = point_of(policy_label(spec), result)
        if point is not None:
            grouped.setdefault((spec.month, spec.seed), []).append(point)
    return [FrontierGroup(month, seed, tuple(points), mark if any(p.label == mark for p in points) else None)
            for (month, seed), points in grouped.items()]


def group_json(group: FrontierGroup) -> JsonObject:
    """A group as JSON: its frontier's labels and where the marked point sits."""
    out: JsonObject = {"month": group.month or None, "seed": group.seed,
                       "frontier": [p.label for p in frontier(group.points)], "mark": group.mark}
    if group.mark is not None:
        placement = place(group.points, group.mark)
        dominators: list[JsonValue] = [
            {"policy": d.point.label, "energy_saved_fraction": round(d.energy_saved_fraction, 6),
             "p95_saved_s": d.p95_saved_s, "p99_saved_s": d.p99_saved_s} for d in placement.dominated_by]
        out["on_frontier"] = placement.on_frontier
        out["dominated_by"] = dominators
    return out
