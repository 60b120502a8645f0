"""The GPU power model: idle and busy power from the inventory, and how a power limit changes both
power and speed, from a normalised curve fitted to the public Zeus power-limit traces.

Normalisation: for each measured workload (GPU, dataset, network, batch size, optimizer) the run at
its highest power limit is the reference, and a limit is taken as a fraction f = limit / the
reference's average draw: what the limit leaves of the power the workload draws uncapped. At f the
curve gives the run-time factor (>= 1) and the average-power factor (<= f: a GPU never draws above
its limit). The curve is the median over all workloads and GPUs in 0.05-wide bins below f = 1 (where
the cap binds), made monotone (less power never runs faster), with (1, 1) at f = 1, and scaled to each
node type by its `gpu_max_w` (the inventory's full-load draw at the default limit). Below the
measured range power follows the limit and energy per unit of work stays at the lowest point's.
docs/POWER-MODEL.md has the fit and its error.
"""

from __future__ import annotations

import bisect
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from greengpu.model import NodeType


@dataclass(frozen=True)
class PowerCurve:
    """Run-time and power factors at limit fractions (ascending, ending at 1.0); linear in between."""

    fractions: tuple[float, ...]
    time_factor: tuple[float, ...]
    power_factor: tuple[float, ...]

    def at(self, fraction: float) -> tuple[float, float]:
        """(time factor, power factor) at `fraction` of the reference; above the range as at its top, below
        it the power follows the limit down and the energy per unit of work stays the lowest point's."""
        if fraction < self.fractions[0]:
            power = min(self.power_factor[0], max(fraction, 1e-6))
            return self.time_factor[0] * self.power_factor[0] / power, power
        f = min(fraction, self.fractions[-1])
        i = bisect.bisect_left(self.fractions, f)
        if self.fractions[i] == f or i == 0:
            return self.time_factor[i], self.power_factor[i]
        lo, hi = self.fractions[i - 1], self.fractions[i]
        w = (f - lo) / (hi - lo)
        return (self.time_factor[i - 1] + w * (self.time_factor[i] - self.time_factor[i - 1]),
                self.power_factor[i - 1] + w * (self.power_factor[i] - self.power_factor[i - 1]))

    def energy_factor(self, fraction: float) -> float:
        """Energy for the same work relative to the reference limit."""
        time_factor, power_factor = self.at(fraction)
        return time_factor * power_factor


# Fitted by fit_curve() from the public Zeus power-limit traces (1,609 measurements, 4 GPUs,
# 6 workloads; Zeus, NSDI'23, Apache-2.0). tests/unit/energy/test_power_model.py refits and compares;
# scripts/fit_power_curves.py prints it.
TRAINING_CURVE = PowerCurve(
    fractions=(0.35, 0.40, 0.45, 0.50, 0.55, 0.60, 0.65, 0.70, 0.75, 0.80, 0.85, 0.90, 0.95, 1.00),
    time_factor=(4.068, 2.824, 2.171, 1.634, 1.49, 1.401, 1.219, 1.181, 1.12, 1.092, 1.067, 1.059, 1.031, 1.0),
    power_factor=(0.35, 0.4, 0.447, 0.498, 0.538, 0.586, 0.621, 0.66, 0.694, 0.739, 0.782, 0.821, 0.858, 1.0),
)


@dataclass(frozen=True)
class Measurement:
    """One Zeus row: a workload at one power limit."""

    workload: tuple[str, ...]
    limit_w: float
    time_s: float
    power_w: float


def normalise(rows: Iterable[Measurement]) -> list[tuple[float, float, float]]:
    """(limit over the uncapped draw, time factor, power factor) per row, against each workload's run at
    its highest limit."""
    by_workload: dict[tuple[str, ...], list[Measurement]] = {}
    for row in rows:
        by_workload.setdefault(row.workload, []).append(row)
    points = []
    for measured in by_workload.values():
        reference = max(measured, key=lambda m: m.limit_w)
        for m in measured:
            points.append((m.limit_w / reference.power_w, m.time_s / reference.time_s, m.power_w / reference.power_w))
    return points


def fit_curve(rows: Sequence[Measurement], bin_width: float = 0.05) -> PowerCurve:
    """Median factors per fraction bin below 1, made monotone: time never rises, power never falls, with
    the limit, and power never above the limit; (1, 1) at 1 (a limit at the uncapped draw)."""
    bins: dict[float, list[tuple[float, float]]] = {1.0: [(1.0, 1.0)]}
    for fraction, time_factor, power_factor in normalise(rows):
        key = round(round(fraction / bin_width) * bin_width, 4)
        if key < 1.0:
            bins.setdefault(key, []).append((time_factor, power_factor))
    fractions = tuple(sorted(bins))
    times = [statistics.median(t for t, _ in bins[f]) for f in fractions]
    powers = [min(f, statistics.median(p for _, p in bins[f])) for f in fractions]
    for i in range(len(fractions) - 2, -1, -1):  # walking down in limit: time can only grow
        times[i] = max(times[i], times[i + 1])
    for i in range(1, len(fractions)):  # walking up in limit: power can only grow
        powers[i] = max(powers[i], powers[i - 1])
    # The reference point is exact by construction; keep it at (1, 1).
    return PowerCurve(fractions, tuple(round(t, 3) for t in times[:-1]) + (1.0,),
                      tuple(round(min(p, 1.0), 3) for p in powers[:-1]) + (1.0,))


def fit_error(curve: PowerCurve, rows: Sequence[Measurement]) -> dict[str, float]:
    """Median and 90th-percentile absolute error of predicted energy per unit of work, in percent."""
    errors = sorted(abs(curve.energy_factor(f) - t * p) / (t * p) * 100 for f, t, p in normalise(rows))
    return {"median_pct": statistics.median(errors), "p90_pct": errors[int(0.9 * (len(errors) - 1))],
            "points": float(len(errors))}


def busy_gpu(node_type: NodeType, limit_w: float | None, curve: PowerCurve = TRAINING_CURVE) -> tuple[float, float]:
    """(power in W, speed relative to uncapped) of one busy GPU at `limit_w` (None: the default limit).

    The limit is clamped to [gpu_min_limit_w, gpu_max_w], as NVML would refuse anything outside; the
    draw is never above the limit nor below idle.
    """
    if limit_w is None:
        return node_type.gpu_max_w, 1.0
    limit = min(max(limit_w, node_type.gpu_min_limit_w), node_type.gpu_max_w)
    time_factor, power_factor = curve.at(limit / node_type.gpu_max_w)
    return min(limit, max(node_type.gpu_idle_w, node_type.gpu_max_w * power_factor)), 1.0 / time_factor
