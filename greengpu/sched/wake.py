"""Which sleeping nodes to wake so that blocked jobs can start: decided by the core, in the same cycle.

After a cycle has placed what fits on awake nodes, the jobs still blocked for capacity are walked
in queue order and given hypothetical room on nodes that are waking or asleep (all of their GPUs
are free: nothing runs on a node that is not up). Nodes already waking are used first, then the
asleep node that fits most tightly, so the fewest nodes are woken; a gang takes whole free nodes
and the awake free GPUs the cycle could not use, never two half nodes where one would do. Each
claim is remembered for the rest of the walk, so two jobs never count on the same GPUs.

The plan only names nodes; the body (simulator or daemon) applies its wake rate limits and
minimum asleep time, and the jobs are placed by the normal cycle once the nodes are up.
"""

from __future__ import annotations

import bisect
from collections.abc import Collection, Mapping

from greengpu.model import Job, NodeState, PowerState
from greengpu.sched.placement import chunks_for
from greengpu.sched.state import PlacementState

_AWAKE, _WAKING, _ASLEEP = 0, 1, 2
"""Preference among hypothetical hosts: no boot, a boot already under way, a new wake."""


class WakePlan:
    """Hypothetical room on waking and asleep nodes, claimed job by job within one cycle."""

    def __init__(self, state: PlacementState, node_states: Mapping[str, NodeState]) -> None:
        self.state = state
        self.free: dict[int, int] = {}
        """Whole GPUs of each waking or asleep node not yet claimed by this plan."""
        self.rank: dict[int, int] = {}
        self.by_model: dict[str, list[tuple[int, int, int]]] = {}
        """Per GPU model, (free GPUs, rank, node) sorted: a bisect finds the tightest fit."""
        self.awake_claimed: dict[int, int] = {}
        """Whole GPUs of awake nodes claimed by gangs in this plan (the cycle could not use them)."""
        self.to_wake: dict[int, str] = {}
        """Asleep nodes this plan needs, with the first job that needs each."""
        for name, node_state in node_states.items():
            node = state.index.get(name)
            if node is None or node_state.drained:
                continue
            if node_state.power is PowerState.WAKING:
                rank = _WAKING
            elif node_state.power is PowerState.ASLEEP:
                rank = _ASLEEP
            else:
                continue  # suspending nodes can be planned for once they are asleep
            self.free[node] = state.whole_size[node]
            self.rank[node] = rank
            self.by_model.setdefault(state.model[node], []).append((state.whole_size[node], rank, node))
        for entries in self.by_model.values():
            entries.sort()

    def has_room(self) -> bool:
        return any(self.by_model.values())

    def _take(self, node: int, gpus: int, job_id: str) -> None:
        model = self.state.model[node]
        entries = self.by_model[model]
        before = self.free[node]
        del entries[bisect.bisect_left(entries, (before, self.rank[node], node))]
        self.free[node] = before - gpus
        if before - gpus > 0:
            bisect.insort(entries, (before - gpus, self.rank[node], node))
        if self.rank[node] == _ASLEEP and node not in self.to_wake:
            self.to_wake[node] = job_id

    def claim(self, job: Job, models: tuple[str, ...], excluded: Collection[int]) -> bool:
        """Find and hold room for `job` on waking or asleep nodes (plus awake leftovers for a gang). A job with
        node constraints (`Job.node_rule`) comes with the nodes they bar in `excluded`, asleep ones included."""
        gpus = max(1, job.whole_gpus)  # a fractional job holds a whole GPU here: a wake is per node
        sizes = self.state.node_size_by_model
        constrained = job.node_rule is not None
        best: tuple[int, int, int] | None = None
        for model in models:
            if gpus > sizes[model] or job.gpus_per_node not in (None, gpus):
                continue
            entries = self.by_model.get(model, [])
            position = bisect.bisect_left(entries, (gpus, -1, -1))
            if constrained:
                found = self._allowed_entry(entries, position, excluded, job.exclusive)
                if found is not None and (best is None or found < best):
                    best = found
                continue
            # Among nodes with the same free count prefer one already waking (rank sorts before node).
            if position < len(entries) and (best is None or entries[position] < best):
                best = entries[position]
        if best is not None:
            self._take(best[2], self.state.size[best[2]] if job.exclusive else gpus, job.job_id)
            return True
        if job.is_fractional:
            return False
        for model in models:
            chunks = chunks_for(job, sizes[model])
            if chunks is None or (len(chunks) < 2 and job.gpus_per_node is None):
                continue
            if self._claim_gang(job.job_id, chunks, model, excluded, constrained, job.exclusive):
                return True
        return False

    def _allowed_entry(self, entries: list[tuple[int, int, int]], position: int, excluded: Collection[int],
                       whole: bool) -> tuple[int, int, int] | None:
        """The first entry from `position` on a node not in `excluded` (and untouched by this plan if `whole`)."""
        size = self.state.size
        for entry in entries[position:]:
            node = entry[2]
            if node not in excluded and (not whole or entry[0] == size[node]):
                return entry
        return None

    def _claim_gang(self, job_id: str, chunks: list[int], model: str, excluded: Collection[int],
                    constrained: bool = False, whole: bool = False) -> bool:
        """`whole`: each node taken whole and only if untouched (an exclusive job)."""
        state = self.state
        smallest = min(chunks)
        candidates = [(rank, free, node) for free, rank, node in self.by_model.get(model, []) if free >= smallest]
        if constrained:  # the asleep nodes its constraints bar are in `excluded` too
            candidates = [(rank, free, node) for rank, free, node in candidates
                          if node not in excluded and (not whole or free == state.size[node])]
        buckets = state.buckets[model]
        for free in range(smallest, len(buckets)):
            for node in buckets[free]:
                left = free - self.awake_claimed.get(node, 0)
                if left >= smallest and node not in excluded and (not whole or left == state.size[node]):
                    candidates.append((_AWAKE, left, node))
        if len(candidates) < len(chunks):
            return False
        candidates.sort()  # no boot first, then already waking, then asleep; tightest fit within each
        used: set[int] = set()
        assignment: list[tuple[int, int, int]] = []
        for chunk in sorted(chunks, reverse=True):
            for rank, free, node in candidates:
                if free >= chunk and node not in used:
                    used.add(node)
                    assignment.append((rank, node, chunk))
                    break
            else:
                return False
        for rank, node, chunk in assignment:
            if whole:
                chunk = state.size[node]
            if rank == _AWAKE:
                self.awake_claimed[node] = self.awake_claimed.get(node, 0) + chunk
            else:
                self._take(node, chunk, job_id)
        return True
