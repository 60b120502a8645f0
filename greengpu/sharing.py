"""GPU sharing vocabulary: MIG and time-slicing on a node type, a MIG GPU's partition, the repartition action
(re-exported by greengpu.model; the geometry is in greengpu.sched.mig, docs/GPU-SHARING.md)."""

from __future__ import annotations

import math
from dataclasses import dataclass

TIMESLICE = "timeslice"
"""The `gpu_profile` of a job that takes one replica of a time-sliced GPU."""


@dataclass(frozen=True)
class MigConfig:
    """The first `gpus` GPUs of a node type run in MIG mode."""

    gpus: int
    profiles: tuple[str, ...]
    """The MIG profiles jobs may ask for on them (e.g. 1g.5gb)."""
    reconfigure_s: float = 60.0
    """Repartitioning a GPU: it is drained, then takes no work this long."""


@dataclass(frozen=True)
class TimeSlicing:
    """The GPUs after the MIG ones, shared by time-slicing: `replicas` jobs of the allowed classes each."""

    gpus: int
    replicas: int
    classes: frozenset[str]


@dataclass(frozen=True)
class MigPartition:
    """The MIG instances one GPU is partitioned into (`profile@start` each), usable from `ready_s` on."""

    instances: tuple[str, ...] = ()
    ready_s: float = -math.inf


@dataclass(frozen=True)
class PartitionGpu:
    """Repartition a MIG GPU with no instance in use into `instances` (`profile@start` each): it takes no work
    for its node type's `mig.reconfigure_s`."""

    node: str
    gpu_index: int
    instances: tuple[str, ...]
    reason: str = ""
