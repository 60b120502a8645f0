"""The efficiency pick on the public Zeus measurements: per-workload savings at a 5% slowdown budget."""

from __future__ import annotations

import csv
import statistics

import pytest
from conftest import public_data

from greengpu.capping.cap_decision import LimitConstraints, ProfilePoint, model_profile, pick_limit

# Median energy saved by the best fixed limit per workload within 5% slowdown (from the Zeus measurements).
TARGET_PCT = {"a40": 11.7, "v100": 6.3, "rtx6000": 8.9, "p100": 7.2}


def workloads(gpu: str) -> dict[tuple[str, ...], list[ProfilePoint]]:
    path = public_data(f"zeus-power-limit-traces/summary_power_{gpu}.csv")
    found: dict[tuple[str, ...], list[ProfilePoint]] = {}
    with path.open() as handle:
        for row in csv.DictReader(handle):
            key = (row["dataset"], row["network"], row["batch_size"], row["optimizer"])
            found.setdefault(key, []).append(ProfilePoint(float(row["power_limit"]), 1.0 / float(row["time_per_epoch"]),
                                                          float(row["average_power"])))
    return found


def test_profiled_pick_saves_at_least_the_published_medians_and_never_costs_energy() -> None:
    lines = ["", f"{'GPU':<8} {'workloads':>9} {'target':>7} {'profiled':>9} {'worst':>7} {'model only':>11} "
             f"{'model worse than default':>25} {'model over budget':>18}"]
    for gpu, target in TARGET_PCT.items():
        savings, model_savings, model_worse, model_slow = [], [], 0, 0
        for points in workloads(gpu).values():
            default = max(points, key=lambda p: p.limit_w)
            best, slowdown = pick_limit(points, 0.05)
            assert slowdown <= 0.05 + 1e-9
            savings.append(1 - best.energy_per_work_j / default.energy_per_work_j)
            # The model-only pick (no profile): the limit the fitted curve suggests, judged on the real data.
            limits = sorted(p.limit_w for p in points)
            constraints = LimitConstraints(min_w=limits[0], max_w=limits[-1], default_w=limits[-1])
            # The model reads a limit against the uncapped draw, which an agent measures before capping.
            model_pick, _ = pick_limit(model_profile(constraints, draw_w=default.power_w), 0.05)
            measured = min(points, key=lambda p: abs(p.limit_w - model_pick.limit_w))
            model_savings.append(1 - measured.energy_per_work_j / default.energy_per_work_j)
            model_worse += measured.energy_per_work_j > default.energy_per_work_j
            model_slow += default.throughput / measured.throughput - 1.0 > 0.05 + 1e-9
        median = 100 * statistics.median(savings)
        lines.append(f"{gpu:<8} {len(savings):>9} {target:>6.1f}% {median:>8.1f}% {100 * min(savings):>6.1f}% "
                     f"{100 * statistics.median(model_savings):>10.1f}% {model_worse:>25} {model_slow:>18}")
        assert median >= target, gpu
        assert min(savings) >= 0.0, f"{gpu}: a pick used more energy than the default limit"
    print("\n".join(lines))


def test_pick_limit_respects_the_budget_and_prefers_the_higher_limit_on_ties() -> None:
    points = [ProfilePoint(300, 1.00, 300), ProfilePoint(250, 0.97, 240), ProfilePoint(200, 0.90, 170)]
    best, slowdown = pick_limit(points, 0.05)
    assert best.limit_w == 250 and slowdown == pytest.approx(1 / 0.97 - 1)
    best, _ = pick_limit(points, 0.20)
    assert best.limit_w == 200
    flat = [ProfilePoint(300, 1.0, 200), ProfilePoint(250, 1.0, 200)]
    assert pick_limit(flat, 0.05)[0].limit_w == 300
    with pytest.raises(ValueError):
        pick_limit([], 0.05)

