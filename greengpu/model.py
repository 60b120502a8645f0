"""Domain types shared by the decision core and every body (simulator, daemon, tests).

Everything here is a frozen dataclass with units in the names. The decision core receives a
`ClusterSnapshot` and returns a tuple of `Action`s; it never mutates these objects.

GPU shares are counted in integer milli-GPUs (`GPU_UNITS` per whole GPU) so that fractional
requests never accumulate floating-point drift in the over-commit invariant.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import MISSING, dataclass, field, fields
from enum import StrEnum
from functools import cached_property

GPU_UNITS = 1000
"""Milli-GPU units in one whole GPU."""

JOB_CLASSES = ("training", "inference", "interactive", "batch")


def gpus_to_units(gpus: float) -> int:
    """Convert a GPU request (whole number or a fraction in (0, 1)) to milli-GPU units."""
    return int(round(gpus * GPU_UNITS))


# --------------------------------------------------------------------------- inventory


@dataclass(frozen=True)
class NodeType:
    """A kind of node: how many GPUs of which model and what it draws."""

    name: str
    gpus: int
    gpu_model: str
    gpu_idle_w: float
    gpu_max_w: float
    gpu_min_limit_w: float
    host_idle_w: float
    host_sleep_w: float
    boot_s: float
    gpu_memory_gb: float = 0.0
    gpu_max_clock_mhz: int = 0
    """The GPUs' maximum SM clock (0: not given; locked clocks are then decided as fractions only)."""

    @property
    def node_idle_w(self) -> float:
        """Power of the whole node awake with every GPU idle."""
        return self.host_idle_w + self.gpus * self.gpu_idle_w

    @property
    def node_peak_w(self) -> float:
        """Power of the whole node with every GPU at full load and default limit."""
        return self.host_idle_w + self.gpus * self.gpu_max_w


@dataclass(frozen=True)
class LimitConstraints:
    """What NVML allows for one GPU, in watts (nvmlDeviceGetPowerManagementLimitConstraints, default limit).

    Vocabulary shared by the capping decision and the NVML backend (neither imports the other)."""

    min_w: float
    max_w: float
    default_w: float

    def clamp(self, limit_w: float) -> float:
        """`limit_w` brought inside [min_w, max_w]."""
        return min(max(limit_w, self.min_w), self.max_w)


@dataclass(frozen=True)
class Node:
    """One machine of the inventory."""

    name: str
    type_name: str
    domain: str = ""
    mac: str | None = None
    pool: str | None = None
    wol_host: str = "255.255.255.255"
    wol_port: int = 9
    ipmi_host: str | None = None
    features: frozenset[str] = frozenset()
    """Node features jobs may ask for (Slurm `Features=`, inventory `features:`)."""
    partitions: frozenset[str] = frozenset()
    """Partitions the node belongs to (Slurm `sinfo`, inventory `partitions:`); empty: not known."""


@dataclass(frozen=True)
class Tenant:
    """A team, account or virtual cluster with a guaranteed quota and a fair-share weight."""

    name: str
    quota_gpus: float = 0.0
    weight: float = 1.0
    borrow_limit_gpus: float | None = None
    """None: may borrow any idle capacity."""
    quota_gpus_by_model: Mapping[str, float] = field(default_factory=dict)
    """When given, the nominal quota per GPU model (replaces quota_gpus for those models)."""
    max_gpu_memory_gb: float | None = None
    """Hard cap on the GPU memory the tenant's running jobs may hold; None: no cap."""


@dataclass(frozen=True)
class Pool:
    """A pool of cloud capacity (spot or on-demand)."""

    name: str
    type_name: str
    spot: bool
    price_per_hour: float
    interruptions_per_hour: float = 0.0
    max_nodes: int = 0


@dataclass(frozen=True)
class TimeSeries:
    """An hourly (or irregular) series: values hold from each time until the next."""

    times_s: tuple[float, ...]
    values: tuple[float, ...]
    source: str = ""

    def value_at(self, time_s: float) -> float:
        """The value in force at `time_s` (the last point at or before it; the first before the start)."""
        import bisect

        index = bisect.bisect_right(self.times_s, time_s) - 1
        return self.values[max(index, 0)]


@dataclass(frozen=True)
class Site:
    """Facility-wide figures: PUE, tariff and grid carbon intensity."""

    pue: float = 1.0
    currency: str = "USD"
    price_per_kwh: float | None = None
    tariff: TimeSeries | None = None
    carbon_g_per_kwh: float | None = None
    carbon: TimeSeries | None = None
    timezone: str = "UTC"
    """The site's IANA time zone (e.g. Europe/Berlin): sleep windows are read on its wall clock, DST included."""


@dataclass(frozen=True)
class Cluster:
    """The validated cluster inventory."""

    site: Site
    node_types: Mapping[str, NodeType]
    nodes: tuple[Node, ...]
    tenants: Mapping[str, Tenant]
    pools: Mapping[str, Pool] = field(default_factory=dict)

    def node_type(self, node: Node) -> NodeType:
        """The type of `node`."""
        return self.node_types[node.type_name]

    @property
    def total_gpus(self) -> int:
        """Installed GPUs, on-premises and pools together."""
        return sum(self.node_types[n.type_name].gpus for n in self.nodes)

    def tenant(self, name: str) -> Tenant:
        """The tenant called `name`; an unknown tenant has no quota and may only borrow."""
        found = self.tenants.get(name)
        return found if found is not None else Tenant(name=name)


# --------------------------------------------------------------------------- jobs


@dataclass(frozen=True)
class Job:
    """A job as submitted: what it asks for and how it may be treated."""

    job_id: str
    tenant: str
    gpus: float
    duration_s: float
    submit_time_s: float = 0.0
    priority: int = 0
    job_class: str = "training"
    interruptible: bool = True
    checkpoint_interval_s: float | None = None
    gpu_types: frozenset[str] | None = None
    """Allowed GPU models; None: any."""
    deadline_s: float | None = None
    gpus_per_node: int | None = None
    """For multi-node jobs: GPUs on each node; None: as few nodes as possible."""
    gpu_memory_gb: float | None = None
    required_nodes: frozenset[str] | None = None
    """Nodes the job was pinned to (Slurm `-w`): it runs on none but these; None: any."""
    excluded_nodes: frozenset[str] | None = None
    """Nodes the job may not use (Slurm `-x`); None: none excluded."""
    features: tuple[frozenset[str], ...] | None = None
    """Node features it needs (Slurm `--constraint`), as alternatives: a node qualifies with every feature of any
    one of them (`a&b|c` -> ({a, b}, {c})); None: any node."""
    partitions: frozenset[str] | None = None
    """Partitions it may run in (a node qualifies in any of them); None: any."""
    exclusive: bool = False
    """Whole nodes only (Slurm `--exclusive`): it shares no node with other work."""

    @classmethod
    def trusted(cls, **values: object) -> Job:
        """Build a Job from values a reader has already validated, about 2x faster than Job(...).

        A frozen dataclass sets every field through object.__setattr__; readers of 100k-row traces
        build jobs in bulk, so they fill the instance dict in one step instead. Equal to Job(**values).
        """
        job = object.__new__(cls)
        state = job.__dict__
        state.update(_JOB_DEFAULTS)
        state.update(values)
        return job

    @cached_property
    def units(self) -> int:
        """The request in milli-GPUs."""
        return gpus_to_units(self.gpus)

    @cached_property
    def is_fractional(self) -> bool:
        """True when the job asks for a share of one GPU."""
        return self.gpus < 1.0

    @cached_property
    def whole_gpus(self) -> int:
        """Whole GPUs requested (1 for a fractional request's one shared GPU)."""
        return max(1, int(math.ceil(self.gpus - 1e-9)))

    @cached_property
    def node_rule(self) -> tuple[object, ...] | None:
        """The job's node constraints as one hashable key, None when it has none (almost every job: the core
        then decides exactly as it does without constraints, at the same cost)."""
        if (self.required_nodes is None and self.excluded_nodes is None and self.features is None
                and self.partitions is None and not self.exclusive):
            return None
        return (self.required_nodes, self.excluded_nodes, self.features, self.partitions, self.exclusive)


_JOB_DEFAULTS = {f.name: f.default for f in fields(Job) if f.default is not MISSING}


@dataclass(frozen=True)
class GpuSlot:
    """A share of one GPU held by a job: `units` milli-GPUs of GPU `gpu_index` on `node`."""

    node: str
    gpu_index: int
    units: int = GPU_UNITS


@dataclass(frozen=True)
class PreemptionRecord:
    """One past preemption of a job: when, and by which job."""

    time_s: float
    by_job_id: str


@dataclass(frozen=True)
class RunningJob:
    """A job that holds GPUs: its allocation and its progress."""

    job: Job
    slots: tuple[GpuSlot, ...]
    start_time_s: float
    expected_end_s: float
    preempt_signalled_s: float | None = None
    """When a checkpoint-then-stop signal was sent; None while it runs undisturbed."""
    preempted_for: str | None = None
    """The pending job this one is making room for."""
    preemptions: tuple[PreemptionRecord, ...] = ()
    last_checkpoint_s: float | None = None
    """A checkpoint the body saw; otherwise one is assumed every checkpoint_interval_s."""

    @cached_property
    def nodes(self) -> tuple[str, ...]:
        """The nodes this job runs on, in slot order, without repeats."""
        return tuple(dict.fromkeys(s.node for s in self.slots))

    @cached_property
    def units_by_node(self) -> dict[str, int]:
        """Milli-GPUs held on each node (computed once: schedulers read it every cycle)."""
        result: dict[str, int] = {}
        for slot in self.slots:
            result[slot.node] = result.get(slot.node, 0) + slot.units
        return result


@dataclass(frozen=True)
class PendingJob:
    """A job waiting to start, with its preemption history (for ping-pong and rate limits)."""

    job: Job
    preemptions: tuple[PreemptionRecord, ...] = ()


class PowerState(StrEnum):
    """Where a node is in its sleep/wake life cycle."""

    AWAKE = "awake"
    SUSPENDING = "suspending"
    ASLEEP = "asleep"
    WAKING = "waking"
    FAILED = "failed"


@dataclass(frozen=True)
class NodeState:
    """The live state of one node as the body observed it."""

    power: PowerState = PowerState.AWAKE
    drained: bool = False
    since_s: float = 0.0
    warning_gpus: frozenset[int] = frozenset()
    """GPU indexes whose health score is at `warning` (greengpu.health): interruptible work only."""
    failing_gpus: frozenset[int] = frozenset()
    """GPU indexes that are `failing`: the node takes no new work and is drained once empty."""

    @property
    def schedulable(self) -> bool:
        """Whether new work may be placed on the node now."""
        return self.power is PowerState.AWAKE and not self.drained and not self.failing_gpus


@dataclass(frozen=True)
class ClusterSnapshot:
    """Everything the decision core may look at: the inventory and its live state at `time_s`."""

    time_s: float
    cluster: Cluster
    running: tuple[RunningJob, ...] = ()
    pending: tuple[PendingJob, ...] = ()
    node_states: Mapping[str, NodeState] = field(default_factory=dict)
    """Nodes not simply awake and schedulable. Treated as immutable: to change a node's state, pass a
    new mapping (the core's remembered books skip re-reading a mapping they have already seen)."""
    tenant_usage_gpu_s: Mapping[str, float] = field(default_factory=dict)
    """Decayed past GPU usage per tenant (fair share with history); empty: none."""

    def node_state(self, name: str) -> NodeState:
        """The state of node `name`, awake when the body reported none."""
        state = self.node_states.get(name)
        return state if state is not None else NodeState()


# --------------------------------------------------------------------------- actions


@dataclass(frozen=True)
class PlaceJob:
    """Start `job_id` on exactly these GPU slots, all at once."""

    job_id: str
    slots: tuple[GpuSlot, ...]
    backfilled: bool = False


@dataclass(frozen=True)
class PreemptJob:
    """Ask `job_id` to checkpoint and stop within `grace_s` to make room for `for_job_id`."""

    job_id: str
    for_job_id: str
    grace_s: float
    reason: str


@dataclass(frozen=True)
class KillJob:
    """Stop `job_id` now (its grace has run out); its GPUs are free afterwards."""

    job_id: str
    reason: str
    for_job_id: str | None = None
    """The pending job this makes room for, when the kill is a preemption."""


@dataclass(frozen=True)
class SetPowerLimit:
    """Set the power limit of one GPU."""

    node: str
    gpu_index: int
    limit_w: float
    reason: str = ""


@dataclass(frozen=True)
class LockClocks:
    """Lock the SM clock of one GPU to a range (None resets to default)."""

    node: str
    gpu_index: int
    min_mhz: int | None
    max_mhz: int | None
    reason: str = ""


@dataclass(frozen=True)
class SleepNode:
    """Drain and suspend a node."""

    node: str
    reason: str = ""


@dataclass(frozen=True)
class WakeNode:
    """Wake a sleeping node (Wake-on-LAN or IPMI)."""

    node: str
    reason: str = ""


Action = PlaceJob | PreemptJob | KillJob | SetPowerLimit | LockClocks | SleepNode | WakeNode
