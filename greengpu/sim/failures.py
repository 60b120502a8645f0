"""An optional GPU failure model for replays: each GPU's health score rises when it starts to degrade,
its hazard of failing rises with the score, and failures kill the jobs on the GPU (docs/HEALTH.md).

The timeline is drawn once per GPU from a seeded stream that depends only on the seed, the node and the
GPU index, never on what the scheduler does: the same trace, model and seed put the same failures at the
same times whatever the placement, so a replay with health-aware placement and one without differ only
in which jobs sit on the GPUs that fail.

Per GPU: sudden failures at a base rate (`base_failures_per_gpu_year`); degradations start at their own
rate, then the score climbs linearly from 0 to 1 over `ramp_days` and stays there; the hazard is
`base * hazard_ratio ** score` (a proportional-hazards model with the score as covariate). The scheduler
sees the score through the health policy's thresholds (warning, failing), as it would see the agent's
score. A failed GPU is dead until repaired `repair_hours` later (a new GPU: score 0, new draws).

With health-aware placement the scheduler also acts on the prediction: a node whose GPU is `failing`
takes no new work, and once it is empty it is drained and the GPU replaced (`repair_hours`), before it
fails (checked every `check_interval_s`, as an agent's tick would). A replaced GPU starts its next life
from its own stream; each life `k` of a GPU draws from the stream (seed, node, GPU, k), so the lives
a replay does not change stay the same in both runs.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import NamedTuple

from greengpu.health.cluster import node_states_with_health
from greengpu.health.score import HealthPolicy, HealthState
from greengpu.json_types import JsonObject
from greengpu.model import Cluster, NodeState, RunningJob

YEAR_S = 365.0 * 86400.0


class GpuEventKind(StrEnum):
    WARNING = "warning"
    """The score crossed the warning threshold."""
    FAILING = "failing"
    """The score crossed the failing threshold (predicted; the GPU still works)."""
    FAILED = "failed"
    """The GPU failed: the jobs on it are lost back to their last checkpoint."""
    REPAIRED = "repaired"
    CHECK = "check"
    """Look for nodes to drain (health-aware replays: a failing GPU's node once it is empty)."""


@dataclass(frozen=True)
class FailureModel:
    """The failure model's rates (defaults: docs/HEALTH.md gives their sources)."""

    seed: int = 0
    base_failures_per_gpu_year: float = 0.09
    """Failures of a GPU that shows no warning sign (Llama 3's 16k-GPU run: about one a GPU per 11 years)."""
    degradations_per_gpu_year: float = 0.09
    """How often a GPU starts to degrade (as often as sudden failures: about half the failures warn first)."""
    ramp_days: float = 7.0
    """Days from the start of a degradation to a score of 1."""
    hazard_ratio: float = 100.0
    """Hazard at score 1 over the base hazard (a correctable error raises the odds of an uncorrectable
    one in the same month 9-400 fold in Google's DRAM study)."""
    repair_hours: float = 72.0
    check_interval_s: float = 600.0
    """How often drained nodes are looked for (health-aware replays only)."""
    policy: HealthPolicy = field(default_factory=HealthPolicy)

    def __post_init__(self) -> None:
        for name in ("base_failures_per_gpu_year", "degradations_per_gpu_year", "ramp_days", "repair_hours"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 0):
                raise ValueError(f"{name} must be finite and >= 0, got {value!r}")
        if not (self.ramp_days > 0 and self.base_failures_per_gpu_year > 0):
            raise ValueError("ramp_days and base_failures_per_gpu_year must be positive")
        if not (math.isfinite(self.hazard_ratio) and self.hazard_ratio > 1):
            raise ValueError(f"hazard_ratio must be above 1, got {self.hazard_ratio!r}")

    def scaled(self, factor: float) -> FailureModel:
        """An accelerated scenario: `factor` times as many sudden failures and degradations, while a degrading
        GPU's course stays what it was (its hazard at score 1, `base * hazard_ratio`, is unchanged; so are
        the ramp and the repair). More events in a short trace, each as the default model has it."""
        if not 1 <= factor < self.hazard_ratio:
            raise ValueError(f"an acceleration factor must be in [1, hazard_ratio), got {factor!r}")
        return replace(self, base_failures_per_gpu_year=self.base_failures_per_gpu_year * factor,
                       degradations_per_gpu_year=self.degradations_per_gpu_year * factor,
                       hazard_ratio=self.hazard_ratio / factor)


@dataclass(frozen=True, order=True)
class GpuEvent:
    time_s: float
    node: str
    gpu_index: int
    kind: GpuEventKind
    life: int = 0
    """Which GPU in that slot (0: the one installed at the start; each repair or replacement adds one)."""


def failure_time_s(start_s: float, onset_s: float, ramp_s: float, base_per_s: float, ratio: float,
                   exposure: float) -> float:
    """When the cumulative hazard from `start_s` reaches `exposure` (a unit exponential draw): the inverse of
    base before `onset_s`, base * ratio ** ((t - onset) / ramp) during the ramp, base * ratio after it."""
    before = base_per_s * max(0.0, onset_s - start_s)
    if exposure <= before:
        return start_s + exposure / base_per_s
    exposure -= before
    log_ratio = math.log(ratio)
    during = base_per_s * ramp_s * (ratio - 1.0) / log_ratio
    if exposure <= during:
        return onset_s + ramp_s * math.log1p(exposure * log_ratio / (base_per_s * ramp_s)) / log_ratio
    return onset_s + ramp_s + (exposure - during) / (base_per_s * ratio)


def gpu_timeline(model: FailureModel, node: str, gpu_index: int, start_s: float, end_s: float,
                 life: int = 0) -> list[GpuEvent]:
    """The events in [start_s, end_s) of the GPU in one slot, from life `life` on (each life its own stream)."""
    base_per_s = model.base_failures_per_gpu_year / YEAR_S
    degrade_per_s = model.degradations_per_gpu_year / YEAR_S
    ramp_s = model.ramp_days * 86400.0
    events: list[GpuEvent] = []
    life_s = start_s
    while life_s < end_s:
        rng = random.Random(f"{model.seed}/{node}/{gpu_index}/{life}")
        onset_s = life_s + rng.expovariate(degrade_per_s) if degrade_per_s > 0 else math.inf
        failed_s = failure_time_s(life_s, onset_s, ramp_s, base_per_s, model.hazard_ratio, rng.expovariate(1.0))
        for score, kind in ((model.policy.warning_score, GpuEventKind.WARNING),
                            (model.policy.failing_score, GpuEventKind.FAILING)):
            # The score is linear in time on the ramp: it passes a threshold `score` of the way up.
            crossed_s = onset_s + score * ramp_s
            if crossed_s < min(failed_s, end_s):
                events.append(GpuEvent(crossed_s, node, gpu_index, kind, life))
        if failed_s >= end_s:
            break
        events.append(GpuEvent(failed_s, node, gpu_index, GpuEventKind.FAILED, life))
        life_s = failed_s + model.repair_hours * 3600.0
        life += 1
        if life_s < end_s:
            events.append(GpuEvent(life_s, node, gpu_index, GpuEventKind.REPAIRED, life))
    return events


def failure_timeline(cluster: Cluster, model: FailureModel, start_s: float, end_s: float) -> tuple[GpuEvent, ...]:
    """Every GPU's events in [start_s, end_s), in time order."""
    events: list[GpuEvent] = []
    for node in cluster.nodes:
        for gpu in range(cluster.node_type(node).gpus):
            events.extend(gpu_timeline(model, node.name, gpu, start_s, end_s))
    return tuple(sorted(events))


class Applied(NamedTuple):
    """What one event did."""

    changed: bool
    """What the scheduler sees changed."""
    failed: bool
    """The GPU failed now: the jobs on it are lost back to their last checkpoint."""
    later: list[GpuEvent]
    """New events to schedule (the next life of a GPU replaced now)."""


@dataclass
class FailureStats:
    failures: int = 0
    replaced_before_failing: int = 0
    jobs_hit: int = 0
    jobs_hit_by_class: dict[str, int] = field(default_factory=dict)
    lost_gpu_s: float = 0.0
    lost_gpu_s_by_class: dict[str, float] = field(default_factory=dict)

    def as_dict(self) -> JsonObject:
        return {
            "gpu_failures": self.failures,
            "gpus_replaced_before_failing": self.replaced_before_failing,
            "jobs_hit_by_failures": self.jobs_hit,
            "jobs_hit_by_failures_by_class": dict(sorted(self.jobs_hit_by_class.items())),
            "failure_lost_gpu_hours": self.lost_gpu_s / 3600.0,
            "failure_lost_gpu_hours_by_class": {c: s / 3600.0 for c, s in sorted(self.lost_gpu_s_by_class.items())},
        }


class FailureReplay:
    """The failure model during one replay: what the scheduler sees of GPU health, and what failures cost.

    `health_aware`: the scheduler sees warning and failing scores, and failing GPUs are replaced once their
    node is empty; otherwise it sees only dead GPUs (a failed GPU is gone for everyone: its node takes no
    new work until the repair).
    """

    def __init__(self, model: FailureModel, timeline: tuple[GpuEvent, ...], end_s: float, health_aware: bool) -> None:
        self.model = model
        self.timeline = timeline
        self.end_s = end_s
        self.health_aware = health_aware
        self.states: dict[str, dict[int, HealthState]] = {}
        self.life: dict[tuple[str, int], int] = {}
        self.dead: set[tuple[str, int]] = set()
        """GPUs out of service: failed, or being replaced."""
        self.awaiting_repair: set[tuple[str, int]] = set()
        """Out-of-service GPUs that come back before the end (a replay that waits for them has not stalled)."""
        self.stats = FailureStats()
        self._version = 0
        self._memo: tuple[object, int, Mapping[str, NodeState]] | None = None

    def apply(self, event: GpuEvent, is_busy: Callable[[str], bool] = lambda node: True) -> Applied:
        """Record `event`. `is_busy(node)`: whether jobs run on the node (for CHECK events)."""
        if event.kind is GpuEventKind.CHECK:
            return self._replace_drained(event.time_s, is_busy)
        key = (event.node, event.gpu_index)
        if event.life != self.life.get(key, 0):
            return Applied(False, False, [])  # an event of a GPU that was replaced before it came
        seen = self.states.setdefault(event.node, {})
        before = seen.get(event.gpu_index, HealthState.HEALTHY)
        if event.kind is GpuEventKind.FAILED:
            self.dead.add(key)
            self._await_repair(key, event.time_s)
            self.stats.failures += 1
            after = HealthState.FAILING
            self.life[key] = event.life + 1  # the repair brings the next GPU
        elif event.kind is GpuEventKind.REPAIRED:
            self.dead.discard(key)
            self.awaiting_repair.discard(key)
            after = HealthState.HEALTHY
        elif self.health_aware and key not in self.dead:
            after = HealthState(event.kind.value)
        else:
            after = before
        return Applied(self._set(event.node, event.gpu_index, before, after), event.kind is GpuEventKind.FAILED, [])

    def _await_repair(self, key: tuple[str, int], since_s: float) -> None:
        if since_s + self.model.repair_hours * 3600.0 < self.end_s:
            self.awaiting_repair.add(key)

    def _set(self, node: str, gpu: int, before: HealthState, after: HealthState) -> bool:
        seen = self.states.setdefault(node, {})
        if after is HealthState.HEALTHY:
            seen.pop(gpu, None)
        else:
            seen[gpu] = after
        if after is not before:
            self._version += 1
            return True
        return False

    def _replace_drained(self, now_s: float, is_busy: Callable[[str], bool]) -> Applied:
        """Empty nodes with a GPU predicted to fail: the GPU is replaced (out of service for the repair)."""
        new: list[GpuEvent] = []
        for node, seen in self.states.items():
            due = [g for g, state in seen.items() if state is HealthState.FAILING and (node, g) not in self.dead]
            if not due or is_busy(node):
                continue
            for gpu in due:
                key = (node, gpu)
                self.dead.add(key)
                self._await_repair(key, now_s)
                self.stats.replaced_before_failing += 1
                life = self.life.get(key, 0) + 1
                self.life[key] = life
                back_s = now_s + self.model.repair_hours * 3600.0
                if back_s < self.end_s:
                    new.append(GpuEvent(back_s, node, gpu, GpuEventKind.REPAIRED, life))
                    new.extend(gpu_timeline(self.model, node, gpu, back_s, self.end_s, life))
        return Applied(False, False, new)

    def jobs_on(self, running: Mapping[str, RunningJob], event: GpuEvent) -> list[str]:
        """The running jobs that hold a share of the event's GPU."""
        return [job_id for job_id, r in running.items()
                if any(s.node == event.node and s.gpu_index == event.gpu_index for s in r.slots)]

    def charge(self, running: RunningJob, lost_gpu_s: float) -> None:
        """Count a job a failure hit and the GPU-seconds of work it lost."""
        job_class = running.job.job_class
        self.stats.jobs_hit += 1
        self.stats.jobs_hit_by_class[job_class] = self.stats.jobs_hit_by_class.get(job_class, 0) + 1
        self.stats.lost_gpu_s += lost_gpu_s
        self.stats.lost_gpu_s_by_class[job_class] = self.stats.lost_gpu_s_by_class.get(job_class, 0.0) + lost_gpu_s

    def node_states(self, base: Mapping[str, NodeState]) -> Mapping[str, NodeState]:
        """`base` (power states) with the GPU health the scheduler sees; the same object while neither changes,
        so the core's books skip the walk."""
        if self._memo is not None and self._memo[0] is base and self._memo[1] == self._version:
            return self._memo[2]
        merged = node_states_with_health(base, self.states) if any(self.states.values()) else base
        self._memo = (base, self._version, merged)
        return merged


def failure_replay(cluster: Cluster, model: FailureModel, start_s: float, end_s: float,
                   health_aware: bool) -> FailureReplay:
    """The failure model for a replay from `start_s` to `end_s` (past the last arrival: jobs run on): every
    GPU's timeline, and for a health-aware replay the periodic checks for drained nodes."""
    events = list(failure_timeline(cluster, model, start_s, end_s))
    if health_aware:
        checks = int((end_s - start_s) // model.check_interval_s)
        events.extend(GpuEvent(start_s + (i + 1) * model.check_interval_s, "", -1, GpuEventKind.CHECK)
                      for i in range(checks))
    return FailureReplay(model, tuple(sorted(events)), end_s, health_aware)
