"""The shared GPUs of a cluster: which GPU of which node is a MIG GPU or time-sliced, and what each holds now.

Built from the inventory's `mig` and `time_slicing` blocks (the first `mig.gpus` indexes of a node type are
MIG GPUs, the next `time_slicing.gpus` time-sliced) and from a snapshot's running jobs and MIG partitions.
Whole-GPU and fractional (MPS-style) placement never sees these GPUs (greengpu.sched.state leaves them out).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from greengpu.model import GPU_UNITS, TIMESLICE, Cluster, ClusterSnapshot, Job, MigPartition
from greengpu.sched.mig import MigFamily, family_of

if TYPE_CHECKING:
    from greengpu.sched.memory import SchedulerMemory

_NO_PARTITION = MigPartition()


@dataclass(frozen=True)
class SharedGpu:
    """One MIG or time-sliced GPU of the inventory."""

    node: str
    node_index: int
    gpu_index: int
    model: str
    family: MigFamily | None
    """MIG geometry; None for a time-sliced GPU."""
    profiles: tuple[str, ...] = ()
    reconfigure_s: float = 0.0
    replicas: int = 0
    classes: frozenset[str] = frozenset()

    @property
    def key(self) -> tuple[str, int]:
        return self.node, self.gpu_index

    @property
    def replica_units(self) -> int:
        """A time-slice replica's share of the GPU, in milli-GPUs (rounded down: replicas never add up to more)."""
        return GPU_UNITS // self.replicas


@dataclass
class SharedUse:
    """What the shared GPUs hold at one moment: the instances in use and the replicas taken."""

    instances_used: dict[tuple[str, int], set[str]] = field(default_factory=dict)
    replicas_used: dict[tuple[str, int], int] = field(default_factory=dict)


def shared_gpus(cluster: Cluster, memory: SchedulerMemory | None = None) -> tuple[SharedGpu, ...]:
    """The cluster's MIG and time-sliced GPUs in node order (kept in `memory` for the same Cluster object;
    empty for most)."""
    cached = memory.shared_gpus if memory is not None else None
    if cached is not None and cached[0] is cluster:
        return cached[1]
    found: list[SharedGpu] = []
    for index, node in enumerate(cluster.nodes):
        node_type = cluster.node_types[node.type_name]
        mig, sliced = node_type.mig, node_type.time_slicing
        first = 0
        if mig is not None and mig.gpus:
            family = family_of(node_type.gpu_model)
            for gpu in range(mig.gpus):
                found.append(SharedGpu(node.name, index, gpu, node_type.gpu_model, family, mig.profiles,
                                       mig.reconfigure_s))
            first = mig.gpus
        if sliced is not None:
            for gpu in range(first, first + sliced.gpus):
                found.append(SharedGpu(node.name, index, gpu, node_type.gpu_model, None,
                                       replicas=sliced.replicas, classes=sliced.classes))
    result = tuple(found)
    if memory is not None:
        memory.shared_gpus = (cluster, result)
    return result


def shared_keys(cluster: Cluster) -> frozenset[tuple[str, int]]:
    """(node, GPU index) of every shared GPU."""
    return frozenset(gpu.key for gpu in shared_gpus(cluster))


def shared_use(snapshot: ClusterSnapshot) -> SharedUse:
    """The instances and replicas the running jobs hold."""
    use = SharedUse()
    for running in snapshot.running:
        if not running.job.gpu_profile:
            continue
        for slot in running.slots:
            key = (slot.node, slot.gpu_index)
            if slot.instance == TIMESLICE:
                use.replicas_used[key] = use.replicas_used.get(key, 0) + 1
            elif slot.instance:
                use.instances_used.setdefault(key, set()).add(slot.instance)
    return use


def partition_of(snapshot: ClusterSnapshot, key: tuple[str, int]) -> MigPartition:
    """The MIG partition of a GPU now (none when the snapshot has none for it)."""
    return snapshot.mig_partitions.get(key, _NO_PARTITION)


def shared_never_fits(job: Job, cluster: Cluster) -> str | None:
    """Why a job with a `gpu_profile` can never start on `cluster` (no GPU offers its profile to its class and
    models), or None when one might."""
    for gpu in shared_gpus(cluster):
        if job.gpu_types is not None and gpu.model not in job.gpu_types:
            continue
        if job.gpu_profile == TIMESLICE:
            if gpu.family is None and job.job_class in gpu.classes:
                return None
        elif gpu.family is not None and job.gpu_profile in gpu.profiles and job.gpu_profile in gpu.family.profiles:
            return None
    if job.gpu_profile == TIMESLICE:
        return f"job {job.job_id} asks for a time-slice replica; no time-sliced GPU takes {job.job_class} jobs"
    return f"job {job.job_id} asks for a {job.gpu_profile} MIG instance; no MIG GPU offers that profile"
