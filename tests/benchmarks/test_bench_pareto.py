"""Pareto benchmark (issue 35): the shipped default's knobs over a grid (capping's max_slowdown per class times
a scale, sleep's warm reserve fraction, its idle timeout), each grid point replayed on a stress scenario; prints
each scenario's frontier of facility energy against p95 and p99 wait, and where the default sits on it (on the
frontier, or which points dominate it and by how much). always-on and idle-timeout are printed for reference
(not grid points).

Run on demand (about 10 minutes of CPU on two worker processes; 13.6 minutes of wall time on a shared 2-core machine):
    nice -n 10 python3 -m pytest tests/benchmarks/test_bench_pareto.py -s
With GREENGPU_PARETO_CHART=docs/pareto-frontier.png it also writes the chart (matplotlib, the plan extra).
Scenarios (tests/benchmarks/test_bench_stress.py): lab, a (the whole Philly trace), b3 (the first three days of
b's window on b's 640-GPU cluster: the cluster still filling, little queueing) and b (b's ten days: the queue
forms). Figures in docs/SIMULATOR.md.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

import pytest
from forked import forked_map
from test_bench_stress import SCENARIOS, WINDOW, philly_jobs, scaled_philly_cluster

from greengpu.config.policy import load_policy
from greengpu.model import Cluster, Job
from greengpu.policy import Policy
from greengpu.sim.engine import Simulation
from greengpu.sim.pareto import Point, describe, dominates, frontier, place, point_of
from greengpu.sim.sweep_knobs import knob_grid

pytestmark = pytest.mark.benchmark
B3_DAYS = 3


def b3_jobs() -> list[Job]:
    low = WINDOW[0].timestamp()
    high = (WINDOW[0] + timedelta(days=B3_DAYS)).timestamp()
    return [j for j in philly_jobs() if low <= j.submit_time_s < high]


INPUTS: dict[str, tuple[Callable[[], Cluster], Callable[[], list[Job]]]] = {
    "lab": (SCENARIOS["lab"].cluster, SCENARIOS["lab"].jobs),
    "a": (SCENARIOS["a"].cluster, SCENARIOS["a"].jobs),
    "b3": (lambda: scaled_philly_cluster(640), b3_jobs),
    "b": (SCENARIOS["b"].cluster, SCENARIOS["b"].jobs),
}
GRIDS: dict[str, tuple[tuple[float, ...], tuple[float, ...], tuple[float, ...]]] = {
    # (max_slowdown scales, warm reserve fractions, idle timeouts in seconds); the default is (1, 0.35, 300).
    "lab": ((0.0, 0.5, 1.0, 2.0), (0.2, 0.35, 0.5), (300.0, 900.0)),
    "a": ((0.0, 1.0, 2.0), (0.2, 0.35, 0.5), (300.0,)),
    "b3": ((0.0, 1.0, 2.0), (0.2, 0.35, 0.5), (300.0, 900.0)),
    "b": ((0.0, 1.0, 2.0), (0.2, 0.35, 0.5), (300.0,)),
}
_LOADED: dict[str, tuple[Cluster, list[Job]]] = {}


def _replay(scenario: str, policy: Policy) -> tuple[dict, float]:
    if scenario not in _LOADED:
        cluster, jobs = INPUTS[scenario]
        _LOADED[scenario] = (cluster(), jobs())
    cluster, jobs = _LOADED[scenario]
    started = time.process_time()
    result = Simulation(cluster, policy, jobs).run().to_json()
    return result, time.process_time() - started


def _replays(scenario: str, policies: list[tuple[str, Policy]]) -> tuple[list[dict], float]:
    """Results in the grid's order, on two forked workers (inputs loaded first, shared); total CPU seconds."""
    _replay(scenario, policies[0][1])  # load the inputs in this process: the workers fork with them
    done = forked_map(_replay, [scenario] * len(policies), [p for _, p in policies])
    return [r for r, _ in done], sum(cpu for _, cpu in done)


@pytest.mark.parametrize("scenario", list(GRIDS))
def test_pareto_frontier(scenario: str) -> None:
    default = load_policy("default")
    grid = knob_grid(default, *GRIDS[scenario])
    references = [(name, load_policy(name)) for name in ("always-on", "idle-timeout")]
    results, cpu_s = _replays(scenario, grid + references)
    points = [point_of(label, r) for (label, _), r in zip(grid, results, strict=False)]
    assert all(p is not None for p in points)
    chosen = [p for p in points if p is not None]
    print(f"\n[pareto] {scenario}: {len(grid)} grid points + 2 references, {cpu_s:.0f} s of CPU")
    for (name, _), r in zip(references, results[len(grid):], strict=True):
        ref = point_of(name, r)
        assert ref is not None
        print(f"[pareto] {scenario} reference {name:<12} energy {ref.energy_kwh:>12,.1f} kWh  "
              f"p95 {ref.p95_s:,.0f} s  p99 {ref.p99_s:,.0f} s")
    for line in describe(chosen, "default"):
        print(f"[pareto] {scenario} {line}")
    for r in results:
        assert r["invariant_violations"] == 0
    edge = frontier(chosen)
    assert edge and all(p in edge or any(dominates(q, p) for q in edge) for p in chosen)
    _CHART.append((scenario, chosen, place(chosen, "default").point.label))


_CHART: list[tuple[str, list[Point], str]] = []


def test_write_chart(tmp_path: Path) -> None:
    """Runs after the scenarios (file order): the chart of every frontier measured, to GREENGPU_PARETO_CHART
    (or a temporary file, so that the chart is drawn in every run)."""
    if not _CHART:
        pytest.skip("no scenario ran in this session (-k left them out): nothing to draw")
    from greengpu.sim.sweep_chart import write_chart

    target = Path(os.environ.get("GREENGPU_PARETO_CHART") or tmp_path / "pareto-frontier.png")
    write_chart(_CHART, target)
    assert target.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    print(f"\n[pareto] chart written to {target}")
