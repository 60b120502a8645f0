"""The inference curve: how a lower SM clock, or a power limit, slows LLM serving, from ML.ENERGY data. Pure.

Token decoding reads the model's weights once per step whatever the batch, and that part of a step is
bound by memory bandwidth, not by the SM clock. The ML.ENERGY benchmark measured, for each model and GPU,
the inter-token latency (ITL) at several batch sizes; per such group a straight line ITL = a + c * batch
splits a step into the part that does not grow with the batch (a: the weight reads) and the part that
does (c * batch). Counting all of the second part as clock-bound over-counts it (the KV-cache reads grow
with the batch too and are memory-bound), so the share fitted here is an upper bound: the curve predicts
at least the slowdown the GPU will show. At SM clock fraction s the step takes a + c * batch / s, so the
run-time factor is 1 + share * (1 / s - 1). docs/POWER-MODEL.md gives the fit; `scripts/fit_power_curves.py`
reproduces it from the published files.

Power under a clock is the model's common assumption (dynamic power above idle scales with the square
of the clock: voltage follows frequency); under a power limit the GPU lowers its clock until that
power meets the limit, so the inference limit curve follows from the same two relations.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable
from dataclasses import dataclass

from greengpu.energy.power_model import PowerCurve

INFERENCE_CLOCK_BOUND_SHARE = 0.35
"""Median clock-bound share of a decode step over the 733 LLM and multimodal configurations of the
ML.ENERGY leaderboard (H100 and B200; 98 model x GPU x parallelism groups with 3 or more batch sizes)
that fit; quartiles 0.12 and 0.61 (`fit_clock_bound_share`, docs/POWER-MODEL.md)."""
NOMINAL_IDLE_FRACTION = 0.11
"""Idle power as a fraction of full-load power used to tabulate the limit curve (A100: 46 of 407 W,
H100: 75 of 700 W). The tabulated curve stands for every node type; the clock relation itself uses
each node type's own idle power (greengpu.energy.curves.gpu_draw)."""
LIMIT_FRACTIONS = tuple(round(0.30 + 0.05 * i, 2) for i in range(15))
"""0.30, 0.35, ..., 1.00: the limit fractions of the tabulated curve (the shipped node types accept
limits down to 0.25-0.5 of their maximum; below 0.30 `PowerCurve.at` extrapolates)."""


@dataclass(frozen=True)
class ItlPoint:
    """One ML.ENERGY configuration: a serving group (model, GPU, parallelism) at one batch size."""

    group: tuple[str, ...]
    batch: float
    itl_ms: float


def fit_clock_bound_share(points: Iterable[ItlPoint], min_batches: int = 3) -> dict[str, float]:
    """Per group the least-squares line ITL = a + c * batch; per configuration the share c * batch / ITL
    of its step that grows with the batch; their median and quartiles over every configuration of a
    group with at least `min_batches` batch sizes whose line has a >= 0 and c >= 0."""
    groups: dict[tuple[str, ...], list[ItlPoint]] = {}
    for point in points:
        groups.setdefault(point.group, []).append(point)
    shares: list[float] = []
    used = 0
    for members in groups.values():
        if len({p.batch for p in members}) < min_batches:
            continue
        n = len(members)
        mean_b = sum(p.batch for p in members) / n
        mean_t = sum(p.itl_ms for p in members) / n
        spread = sum((p.batch - mean_b) ** 2 for p in members)
        slope = sum((p.batch - mean_b) * (p.itl_ms - mean_t) for p in members) / spread
        intercept = mean_t - slope * mean_b
        if intercept < 0 or slope < 0:
            continue
        used += 1
        shares.extend(slope * p.batch / (intercept + slope * p.batch) for p in members)
    if not shares:
        raise ValueError("no group with enough batch sizes to fit")
    q1, median, q3 = statistics.quantiles(shares, n=4, method="inclusive")
    return {"share": median, "q1": q1, "q3": q3, "configurations": float(len(shares)), "groups": float(used)}


def clock_slowdown(share: float, clock_fraction: float) -> float:
    """Run-time increase (0.05: 5% slower) at `clock_fraction` of the maximum SM clock."""
    return share * (1.0 / clock_fraction - 1.0)


def clock_power_factor(clock_fraction: float, idle_fraction: float) -> float:
    """Busy power at `clock_fraction`, as a fraction of full-load power (idle plus dynamic times s squared)."""
    return idle_fraction + (1.0 - idle_fraction) * clock_fraction * clock_fraction


def clock_at_power(power_fraction: float, idle_fraction: float) -> float:
    """The clock fraction at which busy power comes down to `power_fraction` of full load (0 if it cannot)."""
    return math.sqrt(max(0.0, power_fraction - idle_fraction) / (1.0 - idle_fraction))


def clock_limit_curve(share: float, idle_fraction: float = NOMINAL_IDLE_FRACTION,
                      fractions: tuple[float, ...] = LIMIT_FRACTIONS) -> PowerCurve:
    """The limit curve of work whose clock-bound share is `share`: at limit fraction f the cap binds
    (power f), the clock falls to where power meets it, and the run time follows the clock."""
    times = []
    for f in fractions:
        clock = max(clock_at_power(f, idle_fraction), 1e-3)
        times.append(round(1.0 + clock_slowdown(share, clock), 3))
    return PowerCurve(fractions, tuple(times), fractions)


INFERENCE_LIMIT_CURVE = clock_limit_curve(INFERENCE_CLOCK_BOUND_SHARE)
"""Run-time and power factors of inference under a power limit (tabulated at the nominal idle fraction)."""
