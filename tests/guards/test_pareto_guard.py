"""Pareto guard: the reduced tests/benchmarks/test_bench_pareto.py. Five points of the default's knob grid on the
lab example, end to end: the grid replayed in this process (greengpu/sim/sweep_knobs.py) and the same five
policies written as files and swept by `greengpu sweep --frontier --plot` must give the same figures, the same
frontier and the same place for the default; every point off the frontier is dominated by one on it; the
chart is a PNG. A few seconds (each lab replay takes about a tenth of one)."""

from __future__ import annotations

import json
import re
from pathlib import Path

from fleet_inputs import run_cli

from greengpu.config.inventory import load_cluster
from greengpu.config.policy import builtin_policy_text, load_policy
from greengpu.policy import Policy
from greengpu.sim.engine import Simulation
from greengpu.sim.pareto import dominates, frontier, place, point_of
from greengpu.sim.sweep_knobs import Knobs, knobs_of, with_knobs
from greengpu.sim.traces import read_trace

REPO = Path(__file__).resolve().parents[2]
TRACE = REPO / "examples" / "lab-a100.week.trace.csv"
CLUSTER = REPO / "examples" / "lab-a100.cluster.yaml"
POINTS = (Knobs(0.0, 0.35, 300.0), Knobs(2.0, 0.35, 300.0), Knobs(1.0, 0.2, 300.0), Knobs(1.0, 0.35, 900.0))


def policy_file(folder: Path, name: str, knobs: Knobs) -> Path:
    """The built-in default's text with these knobs: what a user writes to sweep a knob."""
    text = builtin_policy_text("default").replace("name: default", f"name: {name}")
    text = re.sub(r"max_slowdown: ([0-9.]+)", lambda m: f"max_slowdown: {float(m[1]) * knobs.slowdown_scale:g}",
                  text)
    text = re.sub(r"warm_reserve_busy_fraction: [0-9.]+", f"warm_reserve_busy_fraction: {knobs.reserve_fraction}",
                  text)
    text = re.sub(r"idle_timeout_s: [0-9.]+", f"idle_timeout_s: {knobs.idle_timeout_s:g}", text)
    path = folder / f"{name}.yaml"
    path.write_text(text)
    return path


def test_the_frontier_of_a_lab_sweep_end_to_end(tmp_path: Path) -> None:
    default = load_policy("default")
    cluster, jobs = load_cluster(CLUSTER), read_trace(TRACE).jobs
    names = [f"k{i}" for i in range(len(POINTS))]
    policies: list[tuple[str, Policy]] = [("default", default)]
    policies += [(name, with_knobs(default, k)) for name, k in zip(names, POINTS, strict=True)]
    assert knobs_of(default) not in POINTS and len({id(p) for _, p in policies}) == 5
    points = []
    for label, policy in policies:
        point = point_of(label, Simulation(cluster, policy, jobs).run().to_json())
        assert point is not None
        points.append(point)
    edge = frontier(points)
    assert edge
    assert all(p in edge or any(dominates(q, p) for q in edge) for p in points)
    assert not any(dominates(q, p) for p in edge for q in edge)

    files = [policy_file(tmp_path, name, k) for name, k in zip(names, POINTS, strict=True)]
    chart = tmp_path / "frontier.png"
    args = ["sweep", "--trace", str(TRACE), "--cluster", str(CLUSTER), "--policy", "default"]
    for path in files:
        args += ["--policy", str(path)]
    code, out, err = run_cli(*args, "--workers", "1", "--store", str(tmp_path / "s.db"), "--frontier", "--plot",
                             str(chart), "--json")
    assert code == 0, err
    doc = json.loads(out)
    swept = [point_of(label, r) for (label, _), r in zip(policies, doc["results"], strict=True)]
    assert swept == points  # a policy file with the knobs replays as the knobs applied in process
    (group,) = doc["frontiers"]
    assert group["frontier"] == [p.label for p in edge]
    placement = place(points, "default")
    assert group["mark"] == "default" and group["on_frontier"] == placement.on_frontier
    assert [d["policy"] for d in group["dominated_by"]] == [d.point.label for d in placement.dominated_by]
    assert chart.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    code, text, err = run_cli(*args, "--store", str(tmp_path / "s.db"), "--frontier", "--mark", "k1")
    assert code == 0, err
    k1 = place(points, "k1")
    told = "k1: on the frontier" if k1.on_frontier else f"dominated by {len(k1.dominated_by)} point(s):"
    assert f"frontier: {len(edge)} of 5 points" in text and told in text
