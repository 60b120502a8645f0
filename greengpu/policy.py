"""Policy types: what the decision core is allowed and asked to do. Pure data, no I/O.

The YAML keys that fill these are documented in docs/POLICIES.md; loading and validation live in
greengpu.config.policy.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

VICTIM_ORDERS = ("least-lost-work", "newest-first")
CAPPING_MODES = ("efficiency", "clocks", "fixed", "off")
WEEKDAYS = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")


@dataclass(frozen=True)
class FairSharePolicy:
    """Weighted fair share: order tenants by (allocated + usage_weight * decayed usage) / weight."""

    usage_half_life_s: float = 7 * 86_400.0
    usage_weight: float = 0.0
    """How many GPUs one GPU-hour of decayed past usage counts as (0: only current allocation)."""


@dataclass(frozen=True)
class PreemptionPolicy:
    """When and how running jobs give way."""

    enabled: bool = True
    grace_s: float = 120.0
    min_runtime_s: float = 300.0
    max_per_job_per_hour: int = 2
    victim_order: str = "least-lost-work"
    max_attempts_per_cycle: int = 8
    """Pending jobs per cycle for which a victim search is run (bounds the cycle time)."""
    priority_preemption: bool = True
    """Higher priority may preempt lower priority within a tenant or from tenants over quota."""
    reclaim: bool = True
    """A tenant under its nominal quota may preempt borrowed capacity."""


@dataclass(frozen=True)
class BackfillPolicy:
    """Reservations for blocked jobs, and which smaller jobs may start around them."""

    enabled: bool = True
    reservations: int = 4
    """How many blocked jobs (highest first) get a reserved start per cycle."""


@dataclass(frozen=True)
class SchedulerPolicy:
    """Settings of the scheduling core."""

    fair_share: FairSharePolicy = field(default_factory=FairSharePolicy)
    preemption: PreemptionPolicy = field(default_factory=PreemptionPolicy)
    backfill: BackfillPolicy = field(default_factory=BackfillPolicy)
    age_boost_per_hour: float = 1.0
    """Priority points a job gains per hour of waiting, so that no job waits forever."""
    age_boost_max: float = 10.0
    whole_node_reserve: int = 0
    """Whole free nodes per GPU model that only jobs of at least a node's GPUs may take."""
    borrow_non_interruptible: bool = False
    """Whether jobs that cannot be preempted may run on borrowed quota (then reclaim could fail)."""


@dataclass(frozen=True)
class ClassCapping:
    """How one workload class is capped."""

    mode: str = "off"
    max_slowdown: float = 0.05
    clock_fraction: float = 1.0
    limit_w: float | None = None


@dataclass(frozen=True)
class CappingPolicy:
    """Lever 1: GPU power and clock capping per workload class."""

    enabled: bool = False
    classes: Mapping[str, ClassCapping] = field(default_factory=dict)
    idle_to_min_limit: bool = False
    switch_to_clocks_when_not_binding: bool = True
    relax_when_queued: bool = False
    """Run every job uncapped while others wait for capacity (slower jobs would lengthen the queue)."""
    forecast_slack: bool = False
    """Keep a job's cap only while the demand forecast's free capacity over its remaining run covers the
    occupancy the caps add (greengpu.capping.occupancy); with `relax_when_queued`."""

    @property
    def relaxes_when_queued(self) -> bool:
        """Whether a queue lifts caps: capping is on and `relax_when_queued` asks for it."""
        return self.enabled and self.relax_when_queued


@dataclass(frozen=True)
class SleepWindow:
    """Days and hours (local wall clock of the site) in which idle nodes may sleep."""

    days: tuple[str, ...] = WEEKDAYS
    start_minute: int = 0
    end_minute: int = 24 * 60
    """End of the window in minutes after midnight; below start means the window crosses midnight."""


@dataclass(frozen=True)
class SleepPolicy:
    """Lever 2: off-hours sleep of idle nodes."""

    enabled: bool = False
    idle_timeout_s: float = 1800.0
    idle_util_threshold: float = 0.2
    windows: tuple[SleepWindow, ...] = (SleepWindow(),)
    warm_reserve_gpus: int = 0
    warm_reserve_busy_fraction: float = 0.0
    """Keep this share of the GPUs in use free and awake as well (sleep.suspends.warm_reserve_target_gpus)."""
    use_forecast: bool = False
    warm_reserve_from_forecast: bool = False
    """Where the demand forecast knows this hour of day, its calibrated upper rise sizes the reserve in place of
    the share of use (sleep.suspends.warm_reserve_target_gpus); before that, the share of use holds."""
    priority_aware: bool = True
    max_suspends_per_min: int = 10
    max_wakes_per_min: int = 60
    min_asleep_s: float = 600.0
    min_awake_s: float = 1200.0
    wake_timeout_s: float = 600.0
    wake_retries: int = 3
    wake_backoff_s: float = 30.0
    """First delay before a wake-up is sent again; doubles per attempt (sleep.wake_verify)."""

    @property
    def forecasts_demand(self) -> bool:
        """Whether the sleep lever learns the hourly demand forecast (greengpu.forecast.reserve)."""
        return self.use_forecast or self.warm_reserve_from_forecast


ON_DEMAND_VALUE = "on-demand"
"""A value of waiting priced at the on-demand price of the GPU-hours waited: an hour of waiting is worth what
renting that capacity for the hour would cost."""


@dataclass(frozen=True)
class ClassWaiting:
    """How long one class waits for on-premises capacity before it rents, and what its waiting is worth
    (greengpu.spot.wait_or_rent)."""

    tolerance_s: float = 0.0
    """Extra wait beyond a cloud node's start-up the class always accepts."""
    value_per_gpu_hour: float | str | None = None
    """What an hour of one GPU waiting costs the class, in the site currency, or `on-demand`; None: the class
    never waits to save money (it rents once its tolerance is exceeded)."""


def _default_waiting() -> dict[str, ClassWaiting]:
    # Work that can wait is worth the capacity it waits for; inference and interactive are not listed:
    # they rent rather than wait (a latency promise is not for sale).
    return {"training": ClassWaiting(value_per_gpu_hour=ON_DEMAND_VALUE),
            "batch": ClassWaiting(value_per_gpu_hour=ON_DEMAND_VALUE)}


@dataclass(frozen=True)
class SpotPolicy:
    """Lever 3: which jobs may go to spot capacity, and what an interruption costs them (greengpu.spot.decide)."""

    enabled: bool = False
    classes: tuple[str, ...] = ("training", "batch")
    require_checkpointing: bool = True
    notice_s: float = 120.0
    """Warning a spot interruption gives before the node is taken back (AWS and GCP give about 120 s)."""
    checkpoint_cost_s: float = 60.0
    """Time a checkpointing job needs to write one checkpoint (its overhead, and whether a notice is long enough)."""
    restart_s: float = 600.0
    """Time from an interruption until the job runs again elsewhere (requeue, new node's start-up, reload): the
    slack a deadline job must keep to stay on spot."""
    max_expected_lost_fraction: float = 0.1
    """Most of a job's expected spot GPU-hours that may be work redone after interruptions: a job above it is
    not placed on spot, however cheap (without checkpoints a long job redoes most of its run)."""
    waiting: Mapping[str, ClassWaiting] = field(default_factory=_default_waiting)
    """Per class, wait for on-premises capacity or rent (a class not listed never waits beyond a cloud start)."""
    come_back: bool = True
    """A cloud job that checkpoints moves back on-premises at a checkpoint when room is free and it pays."""


@dataclass(frozen=True)
class Policy:
    """A whole policy: the scheduler settings and the four levers."""

    name: str
    description: str = ""
    interval_s: float = 60.0
    scheduler: SchedulerPolicy = field(default_factory=SchedulerPolicy)
    capping: CappingPolicy = field(default_factory=CappingPolicy)
    sleep: SleepPolicy = field(default_factory=SleepPolicy)
    spot: SpotPolicy = field(default_factory=SpotPolicy)
