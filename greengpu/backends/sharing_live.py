"""The live MIG partitions the core may place onto, from the sharing reads, and what the inventory declares.

`declared_sharing` turns each node type's `mig` and `time_slicing` blocks into the plain
`DeclaredSharing` that `greengpu.backends.gpu_sharing.sharing_disagreements` compares a reading with.
`live_partitions` turns readings into the snapshot's `mig_partitions`: an NVML reading gives each GPU's
instances and placements (`profile@start`); a Kubernetes reading gives only device counts per profile,
which are laid out on the node's MIG GPUs as NVIDIA's placement rules allow (greengpu.sched.mig).

Fail safe: a node with MIG GPUs whose reading is missing, unknown in part, disagrees with the inventory,
or cannot be laid out, has every MIG GPU unavailable (`UNAVAILABLE`: no instance, never ready, so the
core neither places onto it nor repartitions it), with one line saying why. Pure: no I/O, no clock.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from greengpu.backends.gpu_sharing import DeclaredSharing, NodeSharing, sharing_disagreements
from greengpu.model import Cluster, MigPartition
from greengpu.sched.mig import MigFamily, family_of, instance_name, layout_problem, place_instance

UNAVAILABLE = MigPartition((), math.inf)
"""A MIG GPU whose partition is not known for sure: no instance, never ready (the core leaves it alone)."""


def declared_sharing(cluster: Cluster) -> dict[str, DeclaredSharing]:
    """Every node whose type declares MIG or time-slicing, as the comparison's plain declaration."""
    declared: dict[str, DeclaredSharing] = {}
    for node in cluster.nodes:
        node_type = cluster.node_types[node.type_name]
        mig, sliced = node_type.mig, node_type.time_slicing
        if mig is None and sliced is None:
            continue
        declared[node.name] = DeclaredSharing(
            mig_gpus=mig.gpus if mig is not None else 0,
            profiles=frozenset(mig.profiles) if mig is not None else frozenset(),
            timeslice_gpus=sliced.gpus if sliced is not None else 0,
            timeslice_replicas=sliced.replicas if sliced is not None else 1)
    return declared


def declared_layout(cluster: Cluster) -> list[str]:
    """One line per node type with MIG or time-slicing: what its GPUs are declared to be."""
    lines = []
    for name, node_type in sorted(cluster.node_types.items()):
        mig, sliced = node_type.mig, node_type.time_slicing
        if mig is None and sliced is None:
            continue
        count = sum(1 for n in cluster.nodes if n.type_name == name)
        parts = []
        first = 0
        if mig is not None and mig.gpus:
            parts.append(f"GPU {_span(0, mig.gpus)} MIG ({', '.join(mig.profiles)}; repartition "
                         f"{mig.reconfigure_s:g} s)")
            first = mig.gpus
        if sliced is not None and sliced.gpus:
            parts.append(f"GPU {_span(first, first + sliced.gpus)} time-sliced {sliced.replicas} ways "
                         f"({', '.join(sorted(sliced.classes))})")
            first += sliced.gpus
        if first < node_type.gpus:
            parts.append(f"GPU {_span(first, node_type.gpus)} whole")
        lines.append(f"node type {name} ({count} node{'s' if count != 1 else ''}, {node_type.gpus} x "
                     f"{node_type.gpu_model}): "
                     + "; ".join(parts))
    return lines


def _span(first: int, end: int) -> str:
    return str(first) if end - first == 1 else f"{first}-{end - 1}"


def live_partitions(cluster: Cluster, readings: Sequence[NodeSharing],
                    ready_s: Mapping[tuple[str, int], float] | None = None
                    ) -> tuple[dict[tuple[str, int], MigPartition], list[str]]:
    """The MIG partitions of the cluster's MIG GPUs from `readings`, and one warning per node whose MIG GPUs
    count as unavailable (fail safe). `ready_s`: when a GPU greengpu repartitioned takes work again."""
    ready_s = ready_s or {}
    by_node = {r.node: r for r in readings}
    declared = declared_sharing(cluster)
    partitions: dict[tuple[str, int], MigPartition] = {}
    warnings: list[str] = []
    for node in cluster.nodes:
        node_type = cluster.node_types[node.type_name]
        mig = node_type.mig
        if mig is None or not mig.gpus:
            continue
        reading = by_node.get(node.name)
        problem: str | None
        if reading is None:
            problem = "no MIG reading"
            layout: dict[int, tuple[str, ...]] = {}
        else:
            lines = sharing_disagreements({node.name: _mig_only(declared[node.name])}, [reading])
            problem = lines[0].partition(": ")[2] if lines else None
            layout, unlaid = _layout(family_of(node_type.gpu_model), mig.gpus, reading)
            problem = problem or unlaid
        if problem is not None:
            warnings.append(f"{node.name}: MIG GPUs {_span(0, mig.gpus)} unavailable (fail safe): {problem}")
            for index in range(mig.gpus):
                partitions[(node.name, index)] = UNAVAILABLE
            continue
        for index in range(mig.gpus):
            partitions[(node.name, index)] = MigPartition(layout.get(index, ()),
                                                          ready_s.get((node.name, index), -math.inf))
    return partitions, warnings


def _mig_only(want: DeclaredSharing) -> DeclaredSharing:
    """The declaration as far as MIG goes (time-slicing is the device plugin's, not a partition)."""
    return DeclaredSharing(mig_gpus=want.mig_gpus, profiles=want.profiles)


def _layout(family: MigFamily | None, gpus: int, reading: NodeSharing) -> tuple[dict[int, tuple[str, ...]], str | None]:
    """Each MIG GPU's instances, and why they could not be laid out (None: they could)."""
    if family is None:
        return {}, "the GPU model has no known MIG geometry"
    if reading.gpus:  # NVML: the instances and their placements, as read
        layout = {g.index: tuple(instance_name(i.profile, i.start) for i in g.instances)
                  for g in reading.gpus if g.index < gpus}
        for index, instances in layout.items():
            problem = layout_problem(family, instances)
            if problem is not None:
                return {}, f"GPU {index}: {problem}"
        return layout, None
    # Kubernetes: device counts per profile, laid out the largest first on the lowest GPU that has room.
    wanted = sorted(((p, n) for p, n in reading.mig_devices.items()),
                    key=lambda item: (-family.profiles[item[0]].memory if item[0] in family.profiles else 0, item[0]))
    placed: dict[int, list[str]] = {i: [] for i in range(gpus)}
    for profile, count in wanted:
        if profile not in family.profiles:
            return {}, f"{profile} is not a {family.name} MIG profile"
        for _ in range(count):
            spot = next(((i, s) for i in range(gpus) if (s := place_instance(family, placed[i], profile))), None)
            if spot is None:
                return {}, f"{count} x {profile} do not fit on {gpus} MIG GPUs with the rest"
            placed[spot[0]].append(spot[1])
    return {i: tuple(sorted(v)) for i, v in placed.items()}, None
