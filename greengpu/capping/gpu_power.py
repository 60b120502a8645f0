"""Lever 1 in the tick: from what a body observes of each GPU to the power-limit and clock actions.

One observation type and one decision per GPU, whatever the body: the simulator builds observations
from the inventory's node types (`observe_typed_gpu`), the agent from NVML readings (with the
inventory's host power when it has it). `gpu_setting` is the only place either asks
`greengpu.capping.cap_decision.decide`, so both ask it with the same inputs for the same GPU.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from functools import cached_property

from greengpu.capping.cap_decision import CapDecision, ProfilePoint, constraints_of, decide
from greengpu.model import Job, LimitConstraints, LockClocks, NodeType, PlaceJob, SetPowerLimit
from greengpu.policy import CappingPolicy
from greengpu.sleep.work_waiting import WorkWaiting

NOMINAL_MAX_CLOCK_MHZ = 1000
"""Stands in for the maximum SM clock when the inventory does not give it: the decision's clock
fraction and expected slowdown do not depend on it, only the MHz written to a real GPU does."""

PowerAction = SetPowerLimit | LockClocks
GpuSettings = Mapping[tuple[str, int], tuple[float, int | None]]
"""(node, GPU index) -> the power limit (W) and locked SM clock (MHz; None: unlocked) a GPU holds now."""
LIMIT_TOLERANCE_W = 0.5
"""A limit within this of the wanted one is already right (NVML rounds to milliwatts, drivers to watts)."""


@dataclass(frozen=True)
class GpuObservation:
    """What the capping lever needs to know of one GPU."""

    node: str
    gpu_index: int
    job_class: str | None
    """The class of the job on the GPU; None: idle."""
    constraints: LimitConstraints
    max_clock_mhz: int
    host_share_w: float = 0.0
    """The GPU's share of its node's host power (it runs as long as the job does; see capping.pick_limit)."""
    cap_not_binding: bool = False
    """The limit set earlier for this job never bound (the agent learns this; a replay's caps always bind)."""
    profile: tuple[ProfilePoint, ...] | None = None
    """The job's measured (limit, throughput, power) profile, if one was taken."""
    job_id: str | None = None
    """The job on the GPU, where the body knows it: its cap lifts if the slack rule names it
    (`WorkWaiting.lifts_cap`); None: every cap lifts while work waits."""

    @cached_property
    def decision_key(self) -> tuple[object, ...]:
        """Everything the capping decision reads of this GPU: GPUs with equal keys get one decision. The
        limits as numbers, not the dataclass (hashing one costs more than the rest); kept on the
        observation, which a body that re-reads only what changed hands in again tick after tick."""
        limits = self.constraints
        return (self.job_class, limits.min_w, limits.max_w, limits.default_w, self.max_clock_mhz,
                self.host_share_w, self.cap_not_binding, self.profile)

    @cached_property
    def slot(self) -> tuple[str, int]:
        """(node, GPU index)."""
        return (self.node, self.gpu_index)


def host_share_w(node_type: NodeType) -> float:
    """One GPU's share of its node's idle host power."""
    return node_type.host_idle_w / node_type.gpus


def observe_typed_gpu(node: str, gpu_index: int, node_type: NodeType, job_class: str | None) -> GpuObservation:
    """A GPU as the inventory describes it: limits, clock and host share of its node type."""
    return GpuObservation(node=node, gpu_index=gpu_index, job_class=job_class, constraints=constraints_of(node_type),
                          max_clock_mhz=node_type.gpu_max_clock_mhz or NOMINAL_MAX_CLOCK_MHZ,
                          host_share_w=host_share_w(node_type))


def after_placements(gpus: Sequence[GpuObservation], placed: Sequence[PlaceJob],
                     jobs: dict[str, Job]) -> Sequence[GpuObservation]:
    """`gpus` as the cycle's placements leave them: an idle GPU a job was just placed on carries its class.

    Without this, a body that observes before it places would cap a GPU for the job that is starting on
    it as an idle GPU (its minimum limit) for a whole tick. A GPU already running a job keeps that
    job's class (a shared GPU is set for the job that was there first, as the observers do)."""
    starting: dict[tuple[str, int], Job] = {}
    for action in placed:
        job = jobs.get(action.job_id)
        if job is not None:
            for slot in action.slots:
                starting.setdefault((slot.node, slot.gpu_index), job)
    if not starting:
        return gpus
    return [replace(gpu, job_class=starting[gpu.slot].job_class, job_id=starting[gpu.slot].job_id)
            if gpu.job_class is None and gpu.slot in starting else gpu for gpu in gpus]


def gpu_setting(gpu: GpuObservation, policy: CappingPolicy, waiting: WorkWaiting | bool) -> CapDecision:
    """The limit and clocks `gpu` should run at now; `waiting`: the slack rule's verdict (`WorkWaiting.lifts_cap`:
    the GPU's job is in a waiting job's way, or the cluster has no slack), or a bool for this one GPU."""
    short = waiting.lifts_cap(gpu.job_id) if isinstance(waiting, WorkWaiting) else waiting
    return decide(gpu.job_class, policy, gpu.constraints, gpu.max_clock_mhz, profile=gpu.profile,
                  cap_not_binding=gpu.cap_not_binding, host_share_w=gpu.host_share_w,
                  capacity_short=short)


def setting_actions(gpu: GpuObservation, decision: CapDecision,
                    held: tuple[float, int | None] | None = None) -> tuple[PowerAction, ...]:
    """The actions that put `gpu` at `decision`: its limit (the default when uncapped) and its clocks.

    Given what the GPU `held` (limit W, locked clock MHz), only those that change something."""
    limit_w = decision.limit_w if decision.limit_w is not None else gpu.constraints.default_w
    clock = decision.locked_clock_mhz
    actions: list[PowerAction] = []
    if held is None or abs(held[0] - limit_w) > LIMIT_TOLERANCE_W:
        actions.append(SetPowerLimit(gpu.node, gpu.gpu_index, limit_w, decision.reason))
    if held is None or held[1] != clock:
        actions.append(LockClocks(gpu.node, gpu.gpu_index, clock, clock, decision.reason))
    return tuple(actions)


def plan_power(gpus: Sequence[GpuObservation], policy: CappingPolicy, waiting: WorkWaiting | bool,
               current: GpuSettings | None = None) -> tuple[PowerAction, ...]:
    """Every GPU's limit and clock actions, in the order of `gpus`.

    With `current` (what each GPU holds now), only the actions that change something: a daemon over
    thousands of GPUs otherwise builds and discards two actions per GPU per tick. A GPU missing from
    `current` gets both. GPUs alike in everything the decision reads get one decision: a cluster of
    thousands of GPUs has a handful of (class, model) pairs, and the efficiency pick walks a profile of
    hundreds of limits.
    """
    actions: list[PowerAction] = []
    decided: dict[tuple[object, ...], CapDecision] = {}
    for gpu in gpus:
        short = waiting.lifts_cap(gpu.job_id) if isinstance(waiting, WorkWaiting) else waiting
        key = (gpu.decision_key, short)  # per job: only the jobs in a waiting job's way run uncapped
        decision = decided.get(key)
        if decision is None:
            decision = decided[key] = gpu_setting(gpu, policy, short)
        actions.extend(setting_actions(gpu, decision, current.get(gpu.slot) if current is not None else None))
    return tuple(actions)
