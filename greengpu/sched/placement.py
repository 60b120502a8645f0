"""Best-fit placement with topology: a concrete assignment of GPU slots, all or nothing.

Rules, in order:
- a job that fits on one node goes on one node (never split unless it asks for `gpus_per_node`);
- best fit: the node with the fewest free GPUs that still fit, so large free blocks and whole free
  nodes (the ones node sleep can power down) are kept;
- a fractional request goes on the already-shared GPU with the least room that fits, and only
  then opens a fresh GPU;
- a multi-node gang goes into one topology `domain` when one can hold it (the tightest such
  domain), otherwise across as few domains as possible;
- GPU model constraints (`gpu_types`) are honoured; a gang never mixes GPU models;
- GPU health (`warning` GPUs per node, from `NodeState.warning_gpus`): a job that is not interruptible
  training or batch first tries nodes without warning GPUs and uses them only when healthy capacity
  cannot hold it; on a node with warning GPUs it takes the healthy ones first, interruptible work the
  warning ones first (so healthy GPUs stay free for inference). Failing GPUs never get here: their
  node is not schedulable.
"""

from __future__ import annotations

import bisect
import heapq
from collections.abc import Collection, Iterator, Mapping

from greengpu.model import GPU_UNITS, GpuSlot, Job, NodeState
from greengpu.sched.state import PlacementState

Slots = tuple[GpuSlot, ...]
_NO_NODES: frozenset[int] = frozenset()


def allowed_models(state: PlacementState, job: Job) -> tuple[str, ...]:
    """GPU models present in the cluster that the job accepts."""
    if job.gpu_types is None:
        return state.models
    return tuple(m for m in state.models if m in job.gpu_types)


def chunks_for(job: Job, node_gpus: int) -> list[int] | None:
    """GPUs per node for `job` on nodes of `node_gpus` GPUs; None when it cannot fit such nodes."""
    gpus = job.whole_gpus
    if job.gpus_per_node is not None:
        per = job.gpus_per_node
        if per > node_gpus or per < 1:
            return None
        return [per] * (gpus // per) + ([gpus % per] if gpus % per else [])
    if gpus <= node_gpus:
        return [gpus]
    return [node_gpus] * (gpus // node_gpus) + ([gpus % node_gpus] if gpus % node_gpus else [])


def _usable(node: int, excluded: Collection[int], only: Collection[int] | None) -> bool:
    return node not in excluded and (only is None or node in only)


def _best_single_node(
    state: PlacementState, models: tuple[str, ...], count: int, excluded: Collection[int],
    only: Collection[int] | None, whole_node_reserve: int,
) -> int | None:
    """The schedulable node with the fewest whole free GPUs >= count (bucket walk)."""
    if only is not None:
        best: tuple[int, int] | None = None
        for node in only:
            if node in excluded or not state.schedulable[node] or state.model[node] not in models:
                continue
            free = state.free_whole[node]
            if free >= count and (best is None or (free, node) < best):
                best = (free, node)
        return None if best is None else best[1]
    top = max(state.node_size_by_model[m] for m in models)
    for free in range(count, top + 1):
        for model in models:
            buckets = state.buckets[model]
            if free >= len(buckets) or not buckets[free]:
                continue
            bucket = buckets[free]
            if whole_node_reserve and free == len(buckets) - 1 and count < free and len(bucket) <= whole_node_reserve:
                continue  # the last whole nodes are kept for jobs of a node or more
            # The lowest node index, not set iteration order: decisions must not depend on the
            # history of the index (fresh and difference-updated books decide identically).
            best_node = min(bucket)
            if best_node not in excluded:
                return best_node
            usable = [node for node in bucket if node not in excluded]
            if usable:
                return min(usable)
    return None


def _place_fraction(
    state: PlacementState, job: Job, models: tuple[str, ...], excluded: Collection[int],
    only: Collection[int] | None, whole_node_reserve: int,
) -> Slots | None:
    units = job.units
    best: tuple[int, int, int] | None = None
    for model in models:
        shared = state.shared[model]
        for entry in shared[bisect.bisect_left(shared, (units, -1, -1)) :]:
            if _usable(entry[1], excluded, only):
                if best is None or entry < best:
                    best = entry
                break
    if best is not None:
        return (GpuSlot(state.names[best[1]], best[2], units),)
    node = _best_single_node(state, models, 1, excluded, only, whole_node_reserve)
    if node is None:
        return None
    gpu = state.free_gpu_indexes(node, 1)[0]
    return (GpuSlot(state.names[node], gpu, units),)


def _assign_chunks(chunks: list[int], candidates: list[tuple[int, int]]) -> list[tuple[int, int]] | None:
    """Give each chunk (largest first) the first unused candidate (free, node) with room; candidates ordered."""
    used: set[int] = set()
    assignment: list[tuple[int, int]] = []
    for chunk in sorted(chunks, reverse=True):
        for free, node in candidates:
            if free >= chunk and node not in used:
                used.add(node)
                assignment.append((node, chunk))
                break
        else:
            return None
    return assignment


def _place_whole_nodes(state: PlacementState, count: int, model: str,
                       excluded: Collection[int]) -> list[int] | None:
    """`count` whole free nodes: inside the tightest domain that has enough, else the roomiest domains first."""
    domains = state.whole_by_domain[model]
    if sum(len(members) for members in domains.values()) < count:
        return None

    def usable(members: set[int], limit: int) -> list[int]:
        # Lowest indexes first, so the choice does not depend on set iteration order.
        return heapq.nsmallest(limit, (node for node in members if node not in excluded))

    for _, domain in sorted((len(m), d) for d, m in domains.items() if len(m) >= count):
        found = usable(domains[domain], count)
        if len(found) == count:
            return found
    chosen: list[int] = []
    for _, domain in sorted((-len(m), d) for d, m in domains.items()):
        chosen.extend(usable(domains[domain], count - len(chosen)))
        if len(chosen) == count:
            return chosen
    return None


def _place_gang(
    state: PlacementState, chunks: list[int], model: str, excluded: Collection[int], only: Collection[int] | None,
) -> list[tuple[int, int]] | None:
    size = state.node_size_by_model[model]
    if only is None and model in state.uniform_models and all(chunk == size for chunk in chunks):
        nodes = _place_whole_nodes(state, len(chunks), model, excluded)
        return None if nodes is None else [(node, size) for node in nodes]
    smallest = min(chunks)
    buckets = state.buckets[model]
    # Fail fast on counts before building any candidate list: this is the common case when full.
    if only is None:
        available = sum(len(buckets[free]) for free in range(smallest, len(buckets)))
        if available < len(chunks):
            return None
        pool = [node for free in range(smallest, len(buckets)) for node in buckets[free]]
    else:
        pool = [n for n in only if state.schedulable[n] and state.model[n] == model]
    candidates = [(state.free_whole[n], n) for n in pool if n not in excluded and state.free_whole[n] >= smallest]
    if len(candidates) < len(chunks):
        return None
    by_domain: dict[str, list[tuple[int, int]]] = {}
    for free, node in candidates:
        by_domain.setdefault(state.domain[node], []).append((free, node))
    need = sum(chunks)
    # One domain if any can hold the gang: the tightest such domain (best fit at domain level).
    fitting = sorted(
        (sum(f for f, _ in members), domain) for domain, members in by_domain.items()
        if len(members) >= len(chunks) and sum(f for f, _ in members) >= need
    )
    for _, domain in fitting:
        assignment = _assign_chunks(chunks, sorted(by_domain[domain]))
        if assignment is not None:
            return assignment
    # Across domains: the roomiest domains first, best fit inside each, so the gang spans few domains.
    ranked = sorted(by_domain, key=lambda d: (-sum(f for f, _ in by_domain[d]), d))
    ordered = [entry for domain in ranked for entry in sorted(by_domain[domain])]
    return _assign_chunks(chunks, ordered)


def place(
    state: PlacementState,
    job: Job,
    excluded: Collection[int] = _NO_NODES,
    only: Collection[int] | None = None,
    whole_node_reserve: int = 0,
    warning: Mapping[int, frozenset[int]] | None = None,
) -> Slots | None:
    """Concrete GPU slots for the whole of `job`, or None. Does not change `state`.

    `warning`: node index -> indexes of its GPUs at health `warning` (see `warning_gpus_by_node`).
    """
    if not warning:
        return _place(state, job, excluded, only, whole_node_reserve)
    healthy_first = needs_healthy_gpus(job)
    slots = None
    if healthy_first:
        slots = _place(state, job, _Either(excluded, warning), only, whole_node_reserve)
    if slots is None:
        slots = _place(state, job, excluded, only, whole_node_reserve)
    return None if slots is None else _prefer_gpus(state, slots, warning, healthy_first)


# --------------------------------------------------------------------------- GPU health


def needs_healthy_gpus(job: Job) -> bool:
    """Whether `job` keeps off warning GPUs while healthy ones fit it: all but interruptible training and batch,
    which lose at most the work since their last checkpoint when a GPU fails."""
    return not (job.interruptible and job.job_class in ("training", "batch"))


def warning_gpus_by_node(state: PlacementState, node_states: Mapping[str, NodeState]) -> dict[int, frozenset[int]]:
    """Node index -> its warning GPUs, from the snapshot's node states (remembered by `state`, which the books
    keep between cycles, for the same mapping)."""
    memo = state.warning_memo
    if memo is not None and memo[0] is node_states:
        return memo[1]
    index = state.index
    found = {index[name]: s.warning_gpus for name, s in node_states.items() if s.warning_gpus and name in index}
    state.warning_memo = (node_states, found)
    return found


class _Either(Collection[int]):
    """Nodes in `first` or in `second` (membership only: no set is built per placement)."""

    def __init__(self, first: Collection[int], second: Collection[int]) -> None:
        self.first, self.second = first, second

    def __contains__(self, node: object) -> bool:
        return node in self.first or node in self.second

    def __iter__(self) -> Iterator[int]:
        return iter(set(self.first) | set(self.second))

    def __len__(self) -> int:
        return len(set(self.first) | set(self.second))


def _prefer_gpus(state: PlacementState, slots: Slots, warning: Mapping[int, frozenset[int]],
                 healthy_first: bool) -> Slots:
    """The same nodes and shares, with each node's fresh GPUs re-picked: healthy ones first for jobs that need
    them, warning ones first for the rest. GPUs already shared (chosen by best fit) stay as they are."""
    by_node: dict[str, list[GpuSlot]] = {}
    for slot in slots:
        by_node.setdefault(slot.node, []).append(slot)
    result: list[GpuSlot] = []
    for name, node_slots in by_node.items():
        node = state.index[name]
        bad = warning.get(node)
        free_units = state.gpu_free[node]
        fresh = [s for s in node_slots if free_units[s.gpu_index] == GPU_UNITS]
        if not bad or not fresh:
            result.extend(node_slots)
            continue
        result.extend(s for s in node_slots if free_units[s.gpu_index] != GPU_UNITS)
        free = sorted((g for g, units in enumerate(free_units) if units == GPU_UNITS),
                      key=lambda g: ((g in bad) == healthy_first, g))
        result.extend(GpuSlot(name, gpu, s.units) for gpu, s in zip(free, fresh, strict=False))
    return tuple(result)


def _place(
    state: PlacementState, job: Job, excluded: Collection[int], only: Collection[int] | None,
    whole_node_reserve: int,
) -> Slots | None:
    models = allowed_models(state, job)
    if not models or job.gpu_profile:  # MIG and time-slice jobs: only greengpu.sched.shared_cycle places them
        return None
    if job.is_fractional:
        return _place_fraction(state, job, models, excluded, only, whole_node_reserve)
    gpus = job.whole_gpus
    single = [m for m in models if gpus <= state.node_size_by_model[m] and job.gpus_per_node in (None, gpus)]
    if single:
        reserve = 0 if gpus >= max(state.node_size_by_model[m] for m in single) else whole_node_reserve
        node = _best_single_node(state, tuple(single), gpus, excluded, only, reserve)
        if node is not None:
            return state.whole_slots(node, gpus)
        if job.gpus_per_node is None:
            return None
    for model in models:
        chunks = chunks_for(job, state.node_size_by_model[model])
        if chunks is None or len(chunks) < 2:
            continue
        assignment = _place_gang(state, chunks, model, excluded, only)
        if assignment is not None:
            slots: list[GpuSlot] = []
            for node, count in assignment:
                slots.extend(state.whole_slots(node, count))
            return tuple(slots)
    return None


