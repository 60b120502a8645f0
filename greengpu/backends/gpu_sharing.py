"""The GPU sharing a live node really has, as the NVML and Kubernetes readers see it, and where it
disagrees with what the inventory declares.

Two readers fill the same typed reading: `greengpu.backends.nvml_mig` asks the driver, per GPU, for
its MIG mode (current and pending) and its GPU instances; `greengpu.backends.kube_sharing` reads the
labels and resources the NVIDIA GPU Operator publishes on a Kubernetes node. `sharing_disagreements`
compares either with the inventory's declaration, given as plain values so that this module needs no
inventory reader. Everything here is pure: no I/O, no clock.

A value the reader could not learn is None ("unknown"); the comparison says nothing about an unknown
value, and a reading it could not make at all is itself a disagreement (fail safe: nobody trusts a
node's sharing that could not be read).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

PROFILE_PATTERN = re.compile(r"^(?:[1-9][0-9]?c\.)?[1-9][0-9]?g\.[1-9][0-9]{0,3}gb(?:\+[a-z]{1,8}(?:-[a-z]{1,8})?)?$")
"""A MIG profile name as NVML and the device plugin spell it: `1g.5gb`, `1g.10gb+me`, `1c.3g.20gb`."""
TIMESLICE = "timeslice"
"""The `gpu_profile` of a job that runs on a time-sliced GPU."""


def is_mig_profile(name: str) -> bool:
    """Whether `name` is spelt as a MIG profile (whatever GPU has it)."""
    return bool(PROFILE_PATTERN.match(name))


@dataclass(frozen=True)
class MigInstance:
    """One GPU instance: its profile and where it sits on the GPU (NVML's placement, in memory slices)."""

    profile: str
    start: int
    size: int = 1
    instance_id: int | None = None


@dataclass(frozen=True)
class GpuSharing:
    """One GPU's MIG state as NVML reports it."""

    index: int
    mig_capable: bool
    mig_enabled: bool
    pending_mig: bool
    """The MIG mode the GPU takes at its next reset (equal to `mig_enabled` when nothing is pending)."""
    instances: tuple[MigInstance, ...] = ()
    unreadable: str | None = None
    """Why the GPU's MIG state could not be read; then the other fields say nothing."""


@dataclass(frozen=True)
class NodeSharing:
    """A node's GPU sharing, per GPU where NVML read it, as counts where Kubernetes labels told it."""

    node: str
    gpus: tuple[GpuSharing, ...] = ()
    mig_gpus: int | None = None
    """GPUs in MIG mode now; None: unknown."""
    mig_devices: Mapping[str, int] = field(default_factory=dict)
    """MIG devices (GPU instances) per profile."""
    mig_strategy: str | None = None
    """The device plugin's MIG strategy (`none`, `single`, `mixed`); None: not published (NVML)."""
    mig_config: str | None = None
    """The MIG Manager's configuration (`all-1g.5gb`, `all-balanced`, ...); None: not published."""
    mig_pending: bool = False
    """A MIG change waits (a GPU reset, or the MIG Manager's configuration not yet applied)."""
    timeslice_gpus: int | None = None
    """GPUs shared by time-slicing; None: unknown (NVML cannot see time-slicing: it is the device plugin's)."""
    timeslice_replicas: int | None = None
    unknown: tuple[str, ...] = ()
    """Published values that could not be read, one line each (label, value, why)."""


def node_from_gpus(node: str, gpus: Sequence[GpuSharing]) -> NodeSharing:
    """A node's reading from its GPUs' NVML readings; counts unknown when any GPU was unreadable."""
    readable = [g for g in gpus if g.unreadable is None]
    devices: dict[str, int] = {}
    for gpu in readable:
        for instance in gpu.instances:
            devices[instance.profile] = devices.get(instance.profile, 0) + 1
    complete = len(readable) == len(gpus)
    return NodeSharing(node=node, gpus=tuple(gpus),
                       mig_gpus=sum(g.mig_enabled for g in readable) if complete else None,
                       mig_devices=devices,
                       mig_pending=any(g.pending_mig != g.mig_enabled for g in readable))


@dataclass(frozen=True)
class DeclaredSharing:
    """What the inventory declares for a node, as plain values: its first `mig_gpus` GPU indices are
    MIG-enabled with instances of `profiles`, and `timeslice_gpus` GPUs are time-sliced `replicas` ways."""

    mig_gpus: int = 0
    profiles: frozenset[str] = frozenset()
    timeslice_gpus: int = 0
    timeslice_replicas: int = 1


def sharing_disagreements(declared: Mapping[str, DeclaredSharing], observed: Sequence[NodeSharing]) -> list[str]:
    """One line per node where the live reading and the inventory disagree (nodes in agreement say nothing).

    Observed nodes the inventory does not declare are not compared (a Kubernetes cluster lists nodes
    without GPUs too); a declared node with no reading is not either: this compares what was read.
    """
    lines = []
    for reading in sorted(observed, key=lambda n: n.node):
        want = declared.get(reading.node)
        if want is None:
            continue
        problems = _node_problems(want, reading)
        if problems:
            lines.append(f"{reading.node}: " + "; ".join(problems))
    return lines


def _node_problems(want: DeclaredSharing, seen: NodeSharing) -> list[str]:
    problems = list(seen.unknown)
    for gpu in seen.gpus:
        if gpu.unreadable is not None:
            problems.append(f"GPU {gpu.index}: MIG state unreadable ({gpu.unreadable})")
        elif gpu.mig_enabled and gpu.index >= want.mig_gpus:
            problems.append(f"GPU {gpu.index} is in MIG mode, the inventory declares {_first(want.mig_gpus)}")
        elif not gpu.mig_enabled and gpu.index < want.mig_gpus:
            problems.append(f"GPU {gpu.index} is not in MIG mode, the inventory declares {_first(want.mig_gpus)}")
    if not seen.gpus and seen.mig_gpus is not None and seen.mig_gpus != want.mig_gpus:
        problems.append(f"{seen.mig_gpus} GPUs in MIG mode, the inventory declares {want.mig_gpus}")
    if seen.mig_pending:
        problems.append("a MIG change is pending (a GPU reset or the MIG Manager has not applied it yet)")
    if want.mig_gpus == 0 and seen.mig_devices and not seen.gpus:
        problems.append(f"MIG devices {_devices(seen.mig_devices)}, the inventory declares no MIG GPUs")
    elif want.mig_gpus > 0:
        stray = {p: n for p, n in seen.mig_devices.items() if p not in want.profiles}
        if stray:
            allowed = ", ".join(sorted(want.profiles)) or "none"
            problems.append(f"MIG devices {_devices(stray)} not among the inventory's profiles ({allowed})")
    if seen.timeslice_gpus is not None and seen.timeslice_gpus != want.timeslice_gpus:
        problems.append(f"{seen.timeslice_gpus} time-sliced GPUs, the inventory declares {want.timeslice_gpus}")
    if (seen.timeslice_replicas is not None and want.timeslice_gpus > 0 and seen.timeslice_gpus != 0
            and seen.timeslice_replicas != want.timeslice_replicas):
        problems.append(f"time-slicing {seen.timeslice_replicas} replicas per GPU, the inventory declares "
                        f"{want.timeslice_replicas}")
    return problems


def _first(count: int) -> str:
    if count == 0:
        return "no MIG GPUs"
    return "GPU 0 in MIG mode" if count == 1 else f"GPUs 0-{count - 1} in MIG mode"


def _devices(devices: Mapping[str, int]) -> str:
    return ", ".join(f"{n} x {p}" for p, n in sorted(devices.items()))
