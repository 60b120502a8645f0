"""Per-class power curves and the one function that turns a GPU's setting into its draw and speed. Pure.

Two curves, each for a power limit and for locked SM clocks:
- training (also batch): under a limit, the Zeus-fitted curve (`power_model.TRAINING_CURVE`); under
  locked clocks, compute-bound (run time grows as 1 / clock): the worst case, kept for work the model
  knows nothing more of.
- inference (also interactive): memory-bound decoding from the ML.ENERGY measurements
  (`inference_curve`): only the clock-bound share of a step slows with the clock, and under a limit the
  clock falls until the power meets it.
Batch jobs are throughput work like training (and the compute-bound curve is the cautious one for work
of unknown shape); interactive sessions are short, latency-bound steps on small batches, like serving.
A class the model does not know gets the training curve. docs/POWER-MODEL.md explains the choice.

Under a clock, dynamic power above idle scales with the square of the clock (the model's assumption,
docs/CAPPING.md). With both a limit and a clock, the lower power and the lower speed hold. Whatever the
setting, a GPU's draw is at most its limit and at least its idle power.
"""

from __future__ import annotations

from dataclasses import dataclass

from greengpu.energy import inference_curve
from greengpu.energy.power_model import TRAINING_CURVE, PowerCurve, busy_gpu
from greengpu.model import NodeType


@dataclass(frozen=True)
class ClassCurve:
    """How one kind of work responds to a power limit and to a locked SM clock."""

    name: str
    limit: PowerCurve
    """Run-time and power factors at a limit, as a fraction of the full-load draw."""
    clock_bound_share: float
    """The share of run time that grows as 1 / SM clock (1.0: compute-bound)."""

    def clock_slowdown(self, clock_fraction: float) -> float:
        """Run-time increase (0.05: 5% slower) at `clock_fraction` of the maximum SM clock."""
        return inference_curve.clock_slowdown(self.clock_bound_share, clock_fraction)

    def clock_fraction_within(self, budget: float, wanted_fraction: float) -> float:
        """The lowest clock fraction, at least `wanted_fraction` (and at most 1), slowing by at most `budget`."""
        if self.clock_bound_share <= 0.0:
            return min(1.0, wanted_fraction)
        return min(1.0, max(wanted_fraction, 1.0 / (1.0 + budget / self.clock_bound_share)))


TRAINING = ClassCurve("training", TRAINING_CURVE, 1.0)
INFERENCE = ClassCurve("inference", inference_curve.INFERENCE_LIMIT_CURVE,
                       inference_curve.INFERENCE_CLOCK_BOUND_SHARE)
CLASS_CURVES = {"training": TRAINING, "batch": TRAINING, "inference": INFERENCE, "interactive": INFERENCE}


def curve_for(job_class: str | None) -> ClassCurve:
    """The curve of a job class (the training curve for an idle GPU or a class the model does not know)."""
    return CLASS_CURVES.get(job_class or "", TRAINING)


def gpu_draw(node_type: NodeType, job_class: str | None, limit_w: float | None = None,
             clock_fraction: float | None = None, utilisation: float = 1.0) -> tuple[float, float]:
    """(power in W, speed relative to uncapped) of a GPU of `node_type` running `job_class` work.

    `limit_w`: its power limit (None: the default; clamped to what NVML accepts); `clock_fraction`: its
    locked SM clock as a fraction of the maximum (None: unlocked); `utilisation`: the share of the time
    it is busy (power between idle and busy in proportion). The draw never exceeds the limit, nor falls
    below idle power.
    """
    curve = curve_for(job_class)
    power_w, speed = busy_gpu(node_type, limit_w, curve.limit)
    if clock_fraction is not None and clock_fraction < 1.0:
        clock = max(clock_fraction, 1e-3)
        idle_fraction = node_type.gpu_idle_w / node_type.gpu_max_w if node_type.gpu_max_w > 0 else 0.0
        clocked_w = node_type.gpu_max_w * inference_curve.clock_power_factor(clock, idle_fraction)
        power_w = min(power_w, clocked_w)
        speed = min(speed, 1.0 / (1.0 + curve.clock_slowdown(clock)))
    busy = min(max(utilisation, 0.0), 1.0)
    power_w = node_type.gpu_idle_w + busy * (power_w - node_type.gpu_idle_w)
    ceiling_w = node_type.gpu_max_w if limit_w is None else min(max(limit_w, node_type.gpu_min_limit_w),
                                                                node_type.gpu_max_w)
    return min(ceiling_w, max(node_type.gpu_idle_w, power_w)), speed
