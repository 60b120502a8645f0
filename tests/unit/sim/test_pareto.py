"""The Pareto frontier of a sweep (greengpu/sim/pareto.py) and the knob grid (greengpu/sim/sweep_knobs.py)."""

from __future__ import annotations

import itertools
import math

import pytest

from greengpu.config.policy import load_policy
from greengpu.errors import BadInput
from greengpu.sim.pareto import Point, describe, dominates, frontier, place, point_of
from greengpu.sim.sweep_knobs import Knobs, knob_grid, knobs_of, with_knobs


def P(label: str, energy: float, p95: float, p99: float) -> Point:
    return Point(label, energy, p95, p99)


def test_dominance_needs_all_three_no_worse_and_one_better() -> None:
    base = P("base", 100, 50, 200)
    assert dominates(P("less energy", 90, 50, 200), base)
    assert dominates(P("better p95", 100, 40, 200), base)
    assert dominates(P("better p99", 100, 50, 150), base)
    assert not dominates(P("same", 100, 50, 200), base)
    assert not dominates(P("trade", 90, 60, 200), base)
    assert not dominates(P("worse p99", 90, 40, 201), base)
    assert not dominates(base, P("better p99", 100, 50, 150))


def test_frontier_keeps_exactly_the_undominated_points() -> None:
    points = [P("cheap slow", 80, 300, 900), P("dear fast", 120, 10, 60), P("middle", 100, 100, 300),
              P("dominated", 105, 120, 300), P("dominated twice", 130, 300, 900), P("tail trade", 100, 120, 250)]
    edge = frontier(points)
    assert [p.label for p in edge] == ["cheap slow", "middle", "tail trade", "dear fast"]
    for p in points:
        assert (p in edge) == (not any(dominates(q, p) for q in points))


def test_equal_points_both_stay_on_the_frontier() -> None:
    points = [P("a", 100, 10, 20), P("b", 100, 10, 20), P("c", 101, 10, 20)]
    assert [p.label for p in frontier(points)] == ["a", "b"]


def test_a_dominated_default_names_its_dominators_and_by_how_much() -> None:
    points = [P("default", 200, 100, 400), P("saves 10%", 180, 100, 400), P("saves 5% and waits less", 190, 40, 300),
              P("trade", 150, 500, 400)]
    placement = place(points, "default")
    assert not placement.on_frontier
    assert [d.point.label for d in placement.dominated_by] == ["saves 10%", "saves 5% and waits less"]
    first, second = placement.dominated_by
    assert math.isclose(first.energy_saved_fraction, 0.10)
    assert (first.p95_saved_s, first.p99_saved_s) == (0, 0)
    assert math.isclose(second.energy_saved_fraction, 0.05)
    assert (second.p95_saved_s, second.p99_saved_s) == (60, 100)
    text = "\n".join(describe(points, "default"))
    assert "default (energy 200.0 kWh, wait p95 100 s, p99 400 s): dominated by 2 point(s)" in text
    assert "saves 10.00% energy, p95 +0 s better, p99 +0 s better" in text


def test_a_default_on_the_frontier_has_no_dominators() -> None:
    points = [P("default", 100, 10, 20), P("cheaper, slower", 90, 30, 20), P("worse", 100, 10, 21)]
    assert place(points, "default").on_frontier
    assert describe(points, "default")[-1] == "default: on the frontier"


def test_bad_points_and_unknown_marks_are_one_line() -> None:
    with pytest.raises(BadInput, match="not a point of the sweep"):
        place([P("a", 1, 1, 1)], "default")
    for bad in (math.nan, math.inf, -1.0):
        with pytest.raises(BadInput, match="finite and not negative"):
            frontier([P("a", bad, 1, 1)])
    with pytest.raises(BadInput, match="wait_s.p95"):
        point_of("x", {"energy_kwh": 1.0, "wait_s": {"p95": "slow", "p99": 1.0}})
    with pytest.raises(BadInput, match="no wait_s"):
        point_of("x", {"energy_kwh": 1.0})
    assert point_of("x", {"empty": True}) is None
    assert point_of("x", {"energy_kwh": 3, "wait_s": {"p95": 1, "p99": 2}}) == P("x", 3.0, 1.0, 2.0)


def test_the_grid_holds_the_default_itself_and_changes_only_its_knobs() -> None:
    default = load_policy("default")
    grid = knob_grid(default, (0.0, 2.0), (0.2,), (900.0,))
    labels = [label for label, _ in grid]
    assert labels[-1] == "default" and grid[-1][1] is default  # not in the asked grid: added, unchanged
    assert len(grid) == 3
    doubled = dict(grid)["slow x2 reserve 0.2 idle 900s"]
    for name, rule in default.capping.classes.items():
        assert doubled.capping.classes[name].max_slowdown == min(1.0, 2 * rule.max_slowdown)
        assert doubled.capping.classes[name].mode == rule.mode
    assert doubled.sleep.warm_reserve_busy_fraction == 0.2 and doubled.sleep.idle_timeout_s == 900.0
    assert doubled.scheduler == default.scheduler and doubled.spot == default.spot
    assert with_knobs(default, knobs_of(default)) is default
    assert knobs_of(default) == Knobs(1.0, default.sleep.warm_reserve_busy_fraction, default.sleep.idle_timeout_s)
    full = knob_grid(default, (0.0, 1.0), (0.2, 0.35), (300.0, 900.0))
    assert len(full) == 8 and [label for label, _ in full].count("default") == 1
    assert len({label for label, _ in full}) == len(full)
    training = default.capping.classes["training"].max_slowdown
    assert {(p.capping.classes["training"].max_slowdown, p.sleep.warm_reserve_busy_fraction, p.sleep.idle_timeout_s)
            for _, p in full} == {(training * s, r, t) for s, r, t in
                                  itertools.product((0.0, 1.0), (0.2, 0.35), (300.0, 900.0))}
