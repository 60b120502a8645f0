"""The scheduler's working index of free GPUs, built once per cycle from a snapshot.

Placement must be fast at thousands of nodes, so free capacity is indexed, never rescanned:
`buckets[model][k]` is the set of schedulable nodes of that GPU model with exactly k whole free
GPUs, and `shared[model]` is a sorted list of partly used GPUs by remaining milli-GPUs. A best-fit
lookup for k GPUs is then a walk over at most (GPUs per node) buckets.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from greengpu.model import GPU_UNITS, Cluster, ClusterSnapshot, GpuSlot, NodeType

if TYPE_CHECKING:
    from greengpu.sched.memory import SchedulerMemory


@dataclass(frozen=True)
class ClusterLayout:
    """The fixed shape of a cluster, computed once per Cluster and shared by every cycle's state."""

    names: list[str]
    index: dict[str, int]
    model: list[str]
    domain: list[str]
    size: list[int]
    memory_gb: list[float]
    node_size_by_model: dict[str, int]
    models: tuple[str, ...]
    uniform_models: frozenset[str]
    """Models whose nodes all have the same GPU count (whole-node gang placement takes a fast path)."""
    model_of_node: dict[str, str]
    memory_of_node: dict[str, float]
    whole_size: list[int]
    """GPUs per node that whole-GPU and fractional work may use: `size` less its MIG and time-sliced GPUs (the
    same list as `size` for a cluster without them)."""
    shared: frozenset[tuple[int, int]] = frozenset()
    """(node index, GPU) of MIG and time-sliced GPUs: never free to whole-GPU or fractional work (their own
    pass places jobs there: greengpu.sched.shared_cycle); empty for most clusters."""


class ChangeLog:
    """The nodes changed, in order: caches kept between cycles read it from where they left off. Cleared when
    long, with `epoch` bumped so that they start over."""

    LIMIT = 4096
    """Entries held before it starts over (a few cycles' changes)."""

    def __init__(self) -> None:
        self.nodes: list[int] = []
        self.epoch = 0

    def add(self, nodes: Iterable[int]) -> None:
        if len(self.nodes) > self.LIMIT:
            self.nodes.clear()
            self.epoch += 1
        self.nodes.extend(nodes)


def shared_gpu_count(node_type: NodeType) -> int:
    """The node type's MIG and time-sliced GPUs (its first indexes)."""
    return (node_type.mig.gpus if node_type.mig else 0) + (node_type.time_slicing.gpus if node_type.time_slicing
                                                           else 0)


def cluster_layout(cluster: Cluster, memory: SchedulerMemory | None = None) -> ClusterLayout:
    """The layout of `cluster` (kept in `memory` for the same Cluster object: it is immutable)."""
    if memory is not None and memory.layout is not None and memory.layout[0] is cluster:
        return memory.layout[1]
    names = [n.name for n in cluster.nodes]
    types = [cluster.node_types[n.type_name] for n in cluster.nodes]
    node_size_by_model: dict[str, int] = {}
    sizes_seen: dict[str, set[int]] = {}
    for t in types:
        node_size_by_model[t.gpu_model] = max(node_size_by_model.get(t.gpu_model, 0), t.gpus)
        sizes_seen.setdefault(t.gpu_model, set()).add(t.gpus)
    sizes = [t.gpus for t in types]
    whole_sizes = [t.gpus - shared_gpu_count(t) for t in types]
    layout = ClusterLayout(
        names=names, index={name: i for i, name in enumerate(names)}, model=[t.gpu_model for t in types],
        domain=[n.domain for n in cluster.nodes], size=sizes,
        whole_size=sizes if whole_sizes == sizes else whole_sizes,
        memory_gb=[t.gpu_memory_gb for t in types], node_size_by_model=node_size_by_model,
        models=tuple(sorted(node_size_by_model)),
        uniform_models=frozenset(m for m, sizes in sizes_seen.items() if len(sizes) == 1),
        model_of_node={n.name: t.gpu_model for n, t in zip(cluster.nodes, types, strict=True)},
        memory_of_node={n.name: t.gpu_memory_gb for n, t in zip(cluster.nodes, types, strict=True)},
        shared=frozenset((node_index, gpu) for node_index, t in enumerate(types)
                         for gpu in range(shared_gpu_count(t))),
    )
    if memory is not None:
        memory.layout = (cluster, layout)
    return layout


class PlacementState:
    """Free GPUs per node and GPU, with bucket indexes for best-fit lookups. Mutable, one per cycle."""

    def __init__(self, snapshot: ClusterSnapshot, memory: SchedulerMemory | None = None) -> None:
        layout = cluster_layout(snapshot.cluster, memory)
        # The layout is shared and read-only; only the free-capacity lists below are per cycle.
        self.names = layout.names
        self.index = layout.index
        self.warning_memo: tuple[object, dict[int, frozenset[int]]] | None = None
        """The last node-state mapping's warning GPUs by node index (greengpu.sched.placement)."""
        self.model = layout.model
        self.domain = layout.domain
        self.size = layout.size
        self.whole_size = layout.whole_size
        self.node_size_by_model = layout.node_size_by_model
        self.models = layout.models
        self.uniform_models = layout.uniform_models
        states = snapshot.node_states
        if states:
            self.schedulable = [states[name].schedulable if name in states else True for name in self.names]
        else:
            self.schedulable = [True] * len(self.names)
        self.gpu_free: list[list[int]] = [[GPU_UNITS] * size for size in self.size]
        self.free_whole: list[int] = list(self.size)
        schedulable_gpus = sum(size for size, ok in zip(self.size, self.schedulable, strict=True) if ok)
        self.free_units_total = schedulable_gpus * GPU_UNITS
        """Free milli-GPUs on schedulable nodes, kept current by allocate and release."""
        self.sharing = layout.shared
        for node, gpu in self.sharing:  # shared GPUs count as taken: whole and fractional jobs never land there
            self.gpu_free[node][gpu] = 0
            self.free_whole[node] -= 1
            if self.schedulable[node]:
                self.free_units_total -= GPU_UNITS
        for running in snapshot.running:
            self._take(running.slots)
        self.buckets: dict[str, list[set[int]]] = {
            m: [set() for _ in range(size + 1)] for m, size in self.node_size_by_model.items()
        }
        self.shared: dict[str, list[tuple[int, int, int]]] = {m: [] for m in self.models}
        self.whole_by_domain: dict[str, dict[str, set[int]]] = {m: {} for m in self.models}
        """Schedulable nodes with every GPU free, per model and topology domain (for gang placement)."""
        for node_index in range(len(self.names)):
            self._index_node(node_index)
        self.changes = ChangeLog()
        """The nodes whose free GPUs or schedulability changed (read by greengpu.sched.backfill's scans)."""

    # ------------------------------------------------------------------ indexes

    def _index_node(self, node: int) -> None:
        if not self.schedulable[node]:
            return
        model = self.model[node]
        whole = self.free_whole[node]
        if whole:
            self.buckets[model][whole].add(node)
            if whole == self.size[node]:
                self.whole_by_domain[model].setdefault(self.domain[node], set()).add(node)
        shared = self.shared[model]
        for gpu, free in enumerate(self.gpu_free[node]):
            if 0 < free < GPU_UNITS:
                bisect.insort(shared, (free, node, gpu))

    def _unindex_node(self, node: int) -> None:
        if not self.schedulable[node]:
            return
        model = self.model[node]
        whole = self.free_whole[node]
        if whole:
            self.buckets[model][whole].discard(node)
            if whole == self.size[node]:
                self.whole_by_domain[model][self.domain[node]].discard(node)
        shared = self.shared[model]
        for gpu, free in enumerate(self.gpu_free[node]):
            if 0 < free < GPU_UNITS:
                position = bisect.bisect_left(shared, (free, node, gpu))
                if position < len(shared) and shared[position] == (free, node, gpu):
                    del shared[position]

    def _take(self, slots: Iterable[GpuSlot]) -> None:
        for slot in slots:
            node = self.index.get(slot.node)
            if node is None or slot.gpu_index >= self.size[node]:
                continue  # the invariant checker reports slots on unknown nodes or GPUs
            if self.sharing and (node, slot.gpu_index) in self.sharing:
                continue  # a MIG instance or a replica: the shared GPU is never free here anyway
            free = self.gpu_free[node]
            if free[slot.gpu_index] == GPU_UNITS:
                self.free_whole[node] -= 1
            free[slot.gpu_index] -= slot.units
            if self.schedulable[node]:
                self.free_units_total -= slot.units

    def _give(self, slots: Iterable[GpuSlot]) -> None:
        for slot in slots:
            node = self.index.get(slot.node)
            if node is None or slot.gpu_index >= self.size[node]:
                continue
            if self.sharing and (node, slot.gpu_index) in self.sharing:
                continue
            free = self.gpu_free[node]
            free[slot.gpu_index] += slot.units
            if free[slot.gpu_index] == GPU_UNITS:
                self.free_whole[node] += 1
            if self.schedulable[node]:
                self.free_units_total += slot.units

    # ------------------------------------------------------------------ updates

    def allocate(self, slots: tuple[GpuSlot, ...]) -> None:
        """Mark `slots` as used and keep the indexes current."""
        touched = {self.index[s.node] for s in slots if s.node in self.index}
        for node in touched:
            self._unindex_node(node)
        self._take(slots)
        for node in touched:
            self._index_node(node)
        self.changes.add(touched)

    def release(self, slots: tuple[GpuSlot, ...]) -> None:
        """Mark `slots` as free again and keep the indexes current."""
        touched = {self.index[s.node] for s in slots if s.node in self.index}
        for node in touched:
            self._unindex_node(node)
        self._give(slots)
        for node in touched:
            self._index_node(node)
        self.changes.add(touched)

    def set_schedulable(self, node: int, schedulable: bool) -> None:
        """Mark a node as usable (awake, not drained) or not, keeping indexes and totals current."""
        if self.schedulable[node] == schedulable:
            return
        self._unindex_node(node)
        free = sum(self.gpu_free[node])
        self.free_units_total += free if schedulable else -free
        self.schedulable[node] = schedulable
        self._index_node(node)
        self.changes.add((node,))

    # ------------------------------------------------------------------ queries

    def free_gpu_indexes(self, node: int, count: int) -> list[int]:
        """The lowest `count` fully free GPU indexes of `node`."""
        found = [gpu for gpu, free in enumerate(self.gpu_free[node]) if free == GPU_UNITS]
        return found[:count]

    def whole_slots(self, node: int, count: int) -> tuple[GpuSlot, ...]:
        """Slots for `count` whole free GPUs of `node`."""
        name = self.names[node]
        return tuple(GpuSlot(name, gpu, GPU_UNITS) for gpu in self.free_gpu_indexes(node, count))

    def nodes_with_free_gpus(self, model: str) -> set[int]:
        """The schedulable nodes of `model` with any free capacity (a whole GPU or part of one), from the
        indexes: a saturated cluster has few, and they are found without walking every node."""
        found: set[int] = set()
        for bucket in self.buckets[model][1:]:
            found |= bucket
        found.update(node for _, node, _ in self.shared[model])
        return found

    def total_free_units(self) -> int:
        """All free milli-GPUs on schedulable nodes."""
        return sum(sum(self.gpu_free[n]) for n in range(len(self.names)) if self.schedulable[n])
