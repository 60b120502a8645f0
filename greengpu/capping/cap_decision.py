"""Lever 1, the decision: which power limit or locked clocks each GPU should run at. Pure.

Per workload class the policy gives a mode:
- `efficiency`: the power limit that needs the least energy per unit of work while running at
  most `max_slowdown` slower than at the default limit. Chosen from a profile of (limit,
  throughput, power) points: measured for the job when the agent has them (Zeus-style profiling),
  otherwise predicted by the power model's curve for the class (`curves.curve_for`: Zeus-fitted for
  training and batch, ML.ENERGY-derived for inference and interactive). The default limit is always a
  candidate, so the pick never needs more energy than not capping, by the profile's account.
- `clocks`: lock SM clocks at `clock_fraction` of the maximum; the fraction is raised when the class
  curve's slowdown there would exceed the class's `max_slowdown` (the latency budget of inference;
  memory-bound decoding slows by only part of the clock's drop, compute-bound work by all of it).
- `fixed`: a limit in watts, clamped to the GPU's constraints (NVML refuses anything outside).
- `off`: the default limit, clocks unlocked.
A cap that does not bind (power stays under it and the SwPowerCap clock event reason is never set)
saves nothing: with `switch_to_clocks_when_not_binding` the GPU is moved to locked clocks instead.
Idle GPUs go to their minimum limit when `idle_to_min_limit` is set.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from greengpu.energy.curves import ClassCurve, curve_for, gpu_draw
from greengpu.energy.power_model import TRAINING_CURVE, PowerCurve
from greengpu.model import LimitConstraints, NodeType
from greengpu.policy import CappingPolicy, ClassCapping

MODEL_STEP_W = 1.0
"""Step of the model-based profile. Zeus measures in 25 W steps because each step costs the job run
time; the model costs nothing to evaluate, so it is taken at every watt (NVML takes milliwatts). A
25 W grid missed the model's least-energy limit within budget (P100: 175 W instead of 162 W)."""
BINDING_MARGIN = 0.95
"""A cap binds when power reaches this fraction of it (NVML averages power over about a second)."""


@dataclass(frozen=True)
class ProfilePoint:
    """One power limit tried: work per second and average power there."""

    limit_w: float
    throughput: float
    power_w: float

    @property
    def energy_per_work_j(self) -> float:
        return self.power_w / self.throughput


@dataclass(frozen=True)
class CapDecision:
    """What to set on a GPU: a power limit (None: the default) and locked SM clocks (None: unlocked)."""

    limit_w: float | None
    locked_clock_mhz: int | None
    reason: str
    expected_slowdown: float = 0.0
    """Expected run-time increase as a fraction (0.05: 5% slower), by the profile or the model."""
    job_class: str | None = None
    """The class the setting was decided for: its curve gives the GPU's draw and speed (`busy_effect`)."""
    clock_fraction: float | None = None
    """The locked clock as a fraction of the maximum (None: unlocked)."""


def model_profile(constraints: LimitConstraints, curve: PowerCurve = TRAINING_CURVE,
                  step_w: float = MODEL_STEP_W, draw_w: float | None = None) -> list[ProfilePoint]:
    """The profile the power model predicts for a busy GPU, from the default limit down in `step_w` steps.

    `draw_w` is what the GPU draws uncapped (None: its default limit, a full-load GPU as the inventory
    models it); the curve reads a limit as a fraction of it, and a limit above it does not bind."""
    points = []
    uncapped_w = constraints.default_w if draw_w is None else min(draw_w, constraints.default_w)
    limit = constraints.default_w
    while limit >= constraints.min_w - 1e-9:
        time_factor, power_factor = curve.at(limit / uncapped_w)
        points.append(ProfilePoint(limit, 1.0 / time_factor, min(limit, uncapped_w * power_factor)))
        limit -= step_w
    return points


def pick_limit(points: Sequence[ProfilePoint], max_slowdown: float,
               host_share_w: float = 0.0) -> tuple[ProfilePoint, float]:
    """The least-energy point within `max_slowdown` of the highest limit's speed, and its slowdown.

    The highest limit (the default, uncapped) is the reference and always allowed; on equal energy
    the higher limit wins (same energy, less slowdown). `host_share_w` is the GPU's share of the
    rest of the node (CPUs, memory, fans), which runs as long as the job does: counting it keeps a
    low cap from saving GPU watts only to spend them on a host that stays up longer.
    """
    if not points:
        raise ValueError("an empty profile")
    reference = max(points, key=lambda p: p.limit_w)
    allowed = [p for p in points if reference.throughput / p.throughput - 1.0 <= max_slowdown + 1e-9]
    best = min(allowed, key=lambda p: ((p.power_w + host_share_w) / p.throughput, -p.limit_w))
    return best, reference.throughput / best.throughput - 1.0


def clock_fraction_within(budget: float, wanted_fraction: float, curve: ClassCurve | None = None) -> float:
    """The lowest clock fraction, at least `wanted_fraction`, whose slowdown by `curve` (None: compute-bound,
    the training curve) stays in `budget`."""
    return (curve or curve_for(None)).clock_fraction_within(budget, wanted_fraction)


def cap_binds(power_samples_w: Sequence[float], limit_w: float, sw_power_cap_seen: bool) -> bool:
    """Whether a power limit is holding the GPU back: SwPowerCap was set, or power reached the limit."""
    return sw_power_cap_seen or any(p >= BINDING_MARGIN * limit_w for p in power_samples_w)


def _locked(max_clock_mhz: int, fraction: float) -> int:
    return max(1, int(round(max_clock_mhz * fraction)))


def decide(
    job_class: str | None,
    policy: CappingPolicy,
    constraints: LimitConstraints,
    max_clock_mhz: int,
    profile: Sequence[ProfilePoint] | None = None,
    cap_not_binding: bool = False,
    host_share_w: float = 0.0,
    capacity_short: bool = False,
) -> CapDecision:
    """The setting for one GPU running a job of `job_class` (None: the GPU is idle).

    `profile` is the job's measured profile, if any; `cap_not_binding` reports that the limit set
    earlier for this job never bound; `host_share_w` is the GPU's share of its node's host power
    (see `pick_limit`; 0 picks on GPU energy alone, as Zeus does); `capacity_short` says that
    this job's completion frees a waiting job's way right now (with `relax_when_queued`, the job then
    runs uncapped: a lever may spend slack, never queue time). Which jobs those are follows from the
    scheduling core's typed wait results (greengpu.sched.slack.queue_guard: the tenant's own jobs for
    a quota wait, the jobs on a reservation's nodes, the jobs on every node a capacity-bound job
    could use); a body that cannot tell passes True for every job while anything waits for capacity.
    """
    if not policy.enabled:
        return CapDecision(None, None, "capping disabled")
    if job_class is None:
        if policy.idle_to_min_limit:
            return CapDecision(constraints.min_w, None, "idle GPU at its minimum limit")
        return CapDecision(None, None, "idle GPU, left at its default limit")
    rule = policy.classes.get(job_class, ClassCapping())
    if capacity_short and policy.relax_when_queued and rule.mode != "off":
        return CapDecision(None, None, f"class {job_class}: jobs wait for capacity, so this one runs uncapped "
                                       "(a slower job would lengthen the queue)")
    if rule.mode == "off":
        return CapDecision(None, None, f"class {job_class}: capping off")
    curve = curve_for(job_class)
    if rule.mode == "fixed":
        wanted = rule.limit_w if rule.limit_w is not None else constraints.default_w
        limit = constraints.clamp(wanted)
        bounds = f"{constraints.min_w:g}-{constraints.max_w:g} W"
        note = "" if limit == wanted else f" (asked {wanted:g} W, clamped to {bounds})"
        time_factor, _ = curve.limit.at(limit / constraints.default_w)  # the model's slowdown at that limit
        return CapDecision(limit, None, f"class {job_class}: fixed {limit:g} W{note}",
                           expected_slowdown=max(0.0, time_factor - 1.0), job_class=job_class)
    if rule.mode == "clocks" or (rule.mode == "efficiency" and cap_not_binding
                                 and policy.switch_to_clocks_when_not_binding):
        # efficiency moved to clocks: the lowest clock the class's curve allows within the budget
        wanted = rule.clock_fraction if rule.mode == "clocks" else curve.clock_fraction_within(rule.max_slowdown, 0.0)
        fraction = curve.clock_fraction_within(rule.max_slowdown, wanted)
        why = "the power cap did not bind; " if rule.mode == "efficiency" else ""
        raised = f" (raised from {wanted:.2f} to keep within {rule.max_slowdown:.0%})" if fraction > wanted else ""
        return CapDecision(None, _locked(max_clock_mhz, fraction),
                           f"class {job_class}: {why}SM clocks locked at {fraction:.2f} of max{raised} "
                           f"({curve.name} curve)", expected_slowdown=curve.clock_slowdown(fraction),
                           job_class=job_class, clock_fraction=fraction)
    if rule.mode == "efficiency":
        points = list(profile) if profile else model_profile(constraints, curve.limit)
        best, slowdown = pick_limit(points, rule.max_slowdown, host_share_w)
        limit = constraints.clamp(best.limit_w)
        source = "measured profile" if profile else f"power model, {curve.name} curve"
        if limit >= constraints.default_w:
            return CapDecision(None, None, f"class {job_class}: no limit saves energy within "
                               f"{rule.max_slowdown:.0%} ({source})", job_class=job_class)
        return CapDecision(limit, None, f"class {job_class}: {limit:g} W, least energy within "
                           f"{rule.max_slowdown:.0%} slowdown ({source})", expected_slowdown=slowdown,
                           job_class=job_class)
    raise ValueError(f"unknown capping mode {rule.mode!r}")


def constraints_of(node_type: NodeType) -> LimitConstraints:
    """The limit constraints of a node type's GPUs (the inventory's figures; the default limit is the max)."""
    return LimitConstraints(min_w=node_type.gpu_min_limit_w, max_w=node_type.gpu_max_w, default_w=node_type.gpu_max_w)


def busy_effect(decision: CapDecision, node_type: NodeType) -> tuple[float, float]:
    """(power in W, speed relative to uncapped) of a busy GPU of `node_type` under `decision`: the
    decided class's curve (`curves.gpu_draw`, docs/POWER-MODEL.md), never above the limit. A decision
    with locked clocks but no clock fraction (made elsewhere) is taken at the clock its expected
    slowdown gives on a compute-bound curve."""
    clock = decision.clock_fraction
    job_class = decision.job_class
    if decision.locked_clock_mhz is not None and clock is None:
        clock, job_class = 1.0 / (1.0 + decision.expected_slowdown), None
    return gpu_draw(node_type, job_class, decision.limit_w, clock)
