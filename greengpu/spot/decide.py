"""Which capacity a job may use: on-premises, spot or on-demand cloud (pure; docs/SPOT.md).

The rules, in order:

1. On-premises nodes first when they are free: they are paid for. A job that would have to wait for a
   sleeping node waits for it unless the boot costs more than running in the cloud (`prefer_waking`).
2. Inference, interactive and non-interruptible jobs go to on-demand capacity only: an interruption
   would break a latency promise or a job that cannot restart.
3. An interruptible job goes to spot when its expected cost there beats on-demand: the spot price times
   its expected run time, which includes the work redone after each expected interruption (everything
   since its last checkpoint, or since its start when it never checkpoints) and its checkpoint overhead;
   and only while the work it is expected to redo stays within `max_expected_lost_fraction` of that run
   time (lost work is a cost the price alone hides: GPU-hours burnt and a later finish).
4. A job with a deadline follows Uniform Progress (Wu et al., "Can't Be Late", NSDI'24): it stays on spot
   only while its progress is at or ahead of the uniform rate to its deadline and it has the slack to
   survive one more interruption; otherwise it goes to on-demand, so that it finishes on time. The rule
   is asked when the job is placed, again at each requeue, and (`leaves_spot`) at each checkpoint a
   deadline job writes while it runs on spot: there it can move at no loss, before an interruption.

Units: seconds for times, the site currency per GPU-hour for prices, interruptions per hour for rates.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from greengpu.policy import SpotPolicy

CapacityKind = Literal["on-premises", "spot", "on-demand"]

ON_DEMAND_ONLY_CLASSES = frozenset({"inference", "interactive"})
"""Classes an interruption would hurt beyond the work lost: they never go to spot, whatever the policy lists."""

_MAX_EXPONENT = 700.0
"""Above this, exp() overflows a float: the expected run time is then infinite (the job would never finish)."""


@dataclass(frozen=True)
class PoolPrice:
    """What one kind of cloud capacity costs a job: its price per GPU-hour, how often it is interrupted
    (0 for on-demand) and how much warning an interruption gives."""

    price_per_gpu_hour: float
    interruptions_per_hour: float = 0.0
    notice_s: float = 120.0


@dataclass(frozen=True)
class SpotJobFacts:
    """What the decision needs to know of one job, now."""

    job_class: str
    interruptible: bool
    checkpoint_interval_s: float | None
    """None: the job never checkpoints (an interruption loses everything since its start)."""
    checkpoint_cost_s: float
    remaining_s: float
    """Work still to do, in seconds at full speed."""
    deadline_remaining_s: float | None
    """Seconds from now to the job's deadline (None: no deadline)."""
    gpus: float
    work_s: float | None = None
    """The job's whole work (None: unknown; Uniform Progress then takes the job to be on pace, as at submit)."""
    deadline_s: float | None = None
    """Submit to deadline (None: unknown; see `work_s`)."""


def may_use_spot(facts: SpotJobFacts, policy: SpotPolicy) -> bool:
    """Rule 2 and the policy's own limits: whether spot capacity may take this job at all."""
    if not policy.enabled or not facts.interruptible or facts.job_class in ON_DEMAND_ONLY_CLASSES:
        return False
    if facts.job_class not in policy.classes:
        return False
    return not (policy.require_checkpointing and not facts.checkpoint_interval_s)


def saves_on_notice(facts: SpotJobFacts, spot: PoolPrice) -> bool:
    """Whether the job writes a checkpoint within an interruption's notice (then it loses no work)."""
    return bool(facts.checkpoint_interval_s) and facts.checkpoint_cost_s <= spot.notice_s


def checkpoint_overhead_s(facts: SpotJobFacts) -> float:
    """Seconds spent writing periodic checkpoints over the remaining work."""
    if not facts.checkpoint_interval_s:
        return 0.0
    return facts.remaining_s / facts.checkpoint_interval_s * facts.checkpoint_cost_s


def expected_spot_run_s(facts: SpotJobFacts, spot: PoolPrice) -> float:
    """Expected seconds on spot to finish the remaining work, interruptions (a Poisson process) included.

    A job that checkpoints within the notice redoes nothing: each interruption costs one checkpoint. Otherwise
    the work runs in segments between checkpoints (the whole remainder when it never checkpoints); an
    interruption restarts the segment, so a segment of `c` seconds takes (e^(rate c) - 1) / rate on average.
    """
    remaining_s = max(0.0, facts.remaining_s)
    overhead_s = checkpoint_overhead_s(facts)
    rate_per_s = spot.interruptions_per_hour / 3600.0
    if rate_per_s <= 0.0 or remaining_s == 0.0:
        return remaining_s + overhead_s
    if saves_on_notice(facts, spot):
        run_s = remaining_s + overhead_s
        return run_s + rate_per_s * run_s * facts.checkpoint_cost_s
    interval = facts.checkpoint_interval_s
    segment_s = min(interval, remaining_s) if interval else remaining_s
    exponent = rate_per_s * segment_s
    if exponent > _MAX_EXPONENT:
        return math.inf
    return remaining_s / segment_s * math.expm1(exponent) / rate_per_s + overhead_s


def worst_interruption_loss_s(facts: SpotJobFacts, spot: PoolPrice) -> float:
    """The most work one interruption can cost the job from now."""
    if saves_on_notice(facts, spot):
        return facts.checkpoint_cost_s
    if facts.checkpoint_interval_s:
        return min(facts.checkpoint_interval_s, facts.remaining_s)
    return facts.remaining_s


def expected_lost_fraction(facts: SpotJobFacts, spot: PoolPrice) -> float:
    """The share of the job's expected spot run time that is work redone after interruptions (0 to 1)."""
    run_s = expected_spot_run_s(facts, spot)
    if not math.isfinite(run_s):
        return 1.0
    if run_s <= 0.0:
        return 0.0
    return max(0.0, 1.0 - (max(0.0, facts.remaining_s) + checkpoint_overhead_s(facts)) / run_s)


def spot_cost(facts: SpotJobFacts, spot: PoolPrice) -> float:
    """Expected cost of finishing the job on spot."""
    return spot.price_per_gpu_hour * facts.gpus * expected_spot_run_s(facts, spot) / 3600.0


def on_demand_cost(facts: SpotJobFacts, on_demand: PoolPrice) -> float:
    """Cost of finishing the job on on-demand capacity (never interrupted)."""
    return on_demand.price_per_gpu_hour * facts.gpus * max(0.0, facts.remaining_s) / 3600.0


def ahead_of_uniform_progress(facts: SpotJobFacts) -> bool:
    """Uniform Progress: at time t of a deadline D a job of work W should have done W t / D. Equivalently the
    rate it still needs (remaining / time left) is at most W / D. Without W and D it is taken to be on pace."""
    left_s = facts.deadline_remaining_s
    if left_s is None:
        return True
    if left_s <= 0.0:
        return False
    if facts.work_s is None or facts.deadline_s is None or facts.deadline_s <= 0.0:
        return True
    return facts.remaining_s / left_s <= facts.work_s / facts.deadline_s + 1e-12


def deadline_allows_spot(facts: SpotJobFacts, spot: PoolPrice, policy: SpotPolicy) -> bool:
    """Rule 4: ahead of Uniform Progress, and still on time after one more interruption and a restart."""
    if facts.deadline_remaining_s is None:
        return True
    if not ahead_of_uniform_progress(facts):
        return False
    slack_s = facts.deadline_remaining_s - facts.remaining_s - checkpoint_overhead_s(facts)
    return slack_s >= worst_interruption_loss_s(facts, spot) + policy.restart_s


def leaves_spot(facts: SpotJobFacts, spot: PoolPrice, policy: SpotPolicy) -> bool:
    """The proactive move: a deadline job running on spot has just written a checkpoint (`facts` as of now,
    `remaining_s` the work after it); it moves to on-demand when rule 4 would no longer place it on spot,
    rather than wait for an interruption that would cost it the slack it no longer has."""
    return facts.deadline_remaining_s is not None and not deadline_allows_spot(facts, spot, policy)


def cloud_capacity_for(facts: SpotJobFacts, spot: PoolPrice | None, on_demand: PoolPrice | None,
                       policy: SpotPolicy) -> CapacityKind | None:
    """The cloud capacity a job waiting for on-premises capacity should take (rules 2-4); None: no cloud pool
    may take it (there is none of the kinds it may use)."""
    spot_ok = (spot is not None and may_use_spot(facts, policy) and deadline_allows_spot(facts, spot, policy)
               and expected_lost_fraction(facts, spot) <= policy.max_expected_lost_fraction)
    if spot is not None and spot_ok:
        expected = spot_cost(facts, spot)
        if on_demand is None:
            return "spot" if math.isfinite(expected) else None
        if expected < on_demand_cost(facts, on_demand):
            return "spot"
    return "on-demand" if on_demand is not None else None


def prefer_waking(boot_cost: float, cloud_cost: float) -> bool:
    """Rule 1 for asleep nodes: wait for an on-premises node to boot unless its boot costs more than the cloud."""
    return boot_cost <= cloud_cost


def capacity_for(facts: SpotJobFacts, *, on_premises_free: bool, spot: PoolPrice | None,
                 on_demand: PoolPrice | None, policy: SpotPolicy) -> CapacityKind | None:
    """The whole rule: on-premises when it has room now, else the cloud capacity of `cloud_capacity_for`."""
    if on_premises_free:
        return "on-premises"
    return cloud_capacity_for(facts, spot, on_demand, policy)
