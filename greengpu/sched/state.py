"""The scheduler's working index of free GPUs, built once per cycle from a snapshot.

Placement must be fast at thousands of nodes, so free capacity is indexed, never rescanned:
`buckets[model][k]` is the set of schedulable nodes of that GPU model with exactly k whole free
GPUs, and `shared[model]` is a sorted list of partly used GPUs by remaining milli-GPUs. A best-fit
lookup for k GPUs is then a walk over at most (GPUs per node) buckets.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable

from greengpu.model import GPU_UNITS, ClusterSnapshot, GpuSlot, RunningJob


class PlacementState:
    """Free GPUs per node and GPU, with bucket indexes for best-fit lookups. Mutable, one per cycle."""

    def __init__(self, snapshot: ClusterSnapshot) -> None:
        cluster = snapshot.cluster
        self.names: list[str] = []
        self.index: dict[str, int] = {}
        self.model: list[str] = []
        self.domain: list[str] = []
        self.size: list[int] = []
        self.memory_gb: list[float] = []
        self.schedulable: list[bool] = []
        self.gpu_free: list[list[int]] = []
        self.free_whole: list[int] = []
        self.node_size_by_model: dict[str, int] = {}
        self.free_units_total = 0
        """Free milli-GPUs on schedulable nodes, kept current by allocate and release."""
        for node in cluster.nodes:
            node_type = cluster.node_types[node.type_name]
            self.index[node.name] = len(self.names)
            self.names.append(node.name)
            self.model.append(node_type.gpu_model)
            self.domain.append(node.domain)
            self.size.append(node_type.gpus)
            self.memory_gb.append(node_type.gpu_memory_gb)
            self.schedulable.append(snapshot.node_state(node.name).schedulable)
            self.gpu_free.append([GPU_UNITS] * node_type.gpus)
            self.free_whole.append(node_type.gpus)
            if self.schedulable[-1]:
                self.free_units_total += node_type.gpus * GPU_UNITS
            known = self.node_size_by_model.get(node_type.gpu_model, 0)
            self.node_size_by_model[node_type.gpu_model] = max(known, node_type.gpus)
        self.models: tuple[str, ...] = tuple(sorted(self.node_size_by_model))
        sizes_seen: dict[str, set[int]] = {}
        for model, size in zip(self.model, self.size, strict=True):
            sizes_seen.setdefault(model, set()).add(size)
        self.uniform_models: frozenset[str] = frozenset(m for m, sizes in sizes_seen.items() if len(sizes) == 1)
        """Models whose nodes all have the same GPU count (whole-node gang placement takes a fast path)."""
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

    def release(self, slots: tuple[GpuSlot, ...]) -> None:
        """Mark `slots` as free again and keep the indexes current."""
        touched = {self.index[s.node] for s in slots if s.node in self.index}
        for node in touched:
            self._unindex_node(node)
        self._give(slots)
        for node in touched:
            self._index_node(node)

    # ------------------------------------------------------------------ queries

    def whole_free_nodes(self, model: str) -> int:
        """How many schedulable nodes of `model` have every GPU free."""
        size = self.node_size_by_model[model]
        return len(self.buckets[model][size])

    def free_gpu_indexes(self, node: int, count: int) -> list[int]:
        """The lowest `count` fully free GPU indexes of `node`."""
        found = [gpu for gpu, free in enumerate(self.gpu_free[node]) if free == GPU_UNITS]
        return found[:count]

    def whole_slots(self, node: int, count: int) -> tuple[GpuSlot, ...]:
        """Slots for `count` whole free GPUs of `node`."""
        name = self.names[node]
        return tuple(GpuSlot(name, gpu, GPU_UNITS) for gpu in self.free_gpu_indexes(node, count))

    def total_free_units(self) -> int:
        """All free milli-GPUs on schedulable nodes."""
        return sum(sum(self.gpu_free[n]) for n in range(len(self.names)) if self.schedulable[n])


def running_by_node(state: PlacementState, running: Iterable[RunningJob]) -> dict[int, list[RunningJob]]:
    """The running jobs on each node index."""
    result: dict[int, list[RunningJob]] = {}
    for job in running:
        for name in job.nodes:
            node = state.index.get(name)
            if node is not None:
                result.setdefault(node, []).append(job)
    return result
