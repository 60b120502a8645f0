"""Which nodes a constrained job may use: pinned (`required_nodes`), excluded nodes, features, partitions and
whole nodes (`exclusive`), as Slurm's `-w`, `-x`, `--constraint`, `-p` and `--exclusive` ask.

The cycle adds the nodes a job may not use to the nodes it already may not use (held or reserved for others),
so placement, backfill, preemption, reservations and wake plans all honour the constraints through the one
`excluded` set they already take. Jobs without constraints (`Job.node_rule is None`, nearly all) never get
here: their decisions and their cost are those of a core without constraints.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

from greengpu.model import Cluster, Job, Node, NodeState, PowerState
from greengpu.sched.placement import chunks_for
from greengpu.sched.state import PlacementState

WAKEABLE = (PowerState.ASLEEP, PowerState.WAKING, PowerState.SUSPENDING)
"""Power states of nodes that are asleep or on their way (all their GPUs free once up)."""


def node_allows(node: Node, job: Job) -> bool:
    """Whether `job`'s constraints let it run on `node` (`exclusive` aside: that depends on what runs there).

    A node whose partitions the inventory or Slurm did not give is taken to be in every partition."""
    if job.required_nodes is not None and node.name not in job.required_nodes:
        return False
    if job.excluded_nodes is not None and node.name in job.excluded_nodes:
        return False
    if job.features is not None and not any(wanted <= node.features for wanted in job.features):
        return False
    return not (job.partitions is not None and node.partitions and not node.partitions & job.partitions)


class NodeRules:
    """Per cycle: the node indexes each kind of constraint bars (found once per kind, then kept)."""

    def __init__(self, state: PlacementState, cluster: Cluster) -> None:
        self._state = state
        self._nodes = {node.name: node for node in cluster.nodes}
        self._barred: dict[tuple[object, ...], frozenset[int]] = {}

    def barred(self, job: Job) -> frozenset[int]:
        """Node indexes `job` may not use now; empty for a job without constraints."""
        rule = job.node_rule
        if rule is None:
            return frozenset()
        static_rule = rule[:-1]
        found = self._barred.get(static_rule)
        if found is None:
            names, nodes = self._state.names, self._nodes
            found = frozenset(index for index, name in enumerate(names)
                              if name not in nodes or not node_allows(nodes[name], job))
            self._barred[static_rule] = found
        if not job.exclusive:
            return found
        # Whole nodes only: a node with any GPU in use is barred (this changes as the cycle places work).
        state = self._state
        return found | {n for n in range(len(state.names)) if state.free_whole[n] < state.size[n]}

    def barred_asleep(self, job: Job) -> frozenset[int]:
        """Node indexes `job` may not use once woken: its constraints without `exclusive` (a node that is not up
        runs nothing, so all of it is free)."""
        rule = job.node_rule
        if rule is None:
            return frozenset()
        if not job.exclusive:
            return self.barred(job)
        found = self._barred.get(rule[:-1])
        if found is None:
            self.barred(job)
            found = self._barred[rule[:-1]]
        return found


def fits_asleep(state: PlacementState, node_states: Mapping[str, NodeState], barred: Collection[int], job: Job,
                models: tuple[str, ...]) -> bool:
    """Whether sleeping nodes (asleep or on their way, all idle) outside `barred` could hold `job`: the core's
    `fits_after_wake` for a constrained job."""
    return fits_sizes(state, job, models, wakeable_sizes(state, node_states, barred))


def wakeable_sizes(state: PlacementState, node_states: Mapping[str, NodeState],
                   barred: Collection[int] = ()) -> dict[str, list[int]]:
    """Per GPU model, the sizes (GPUs) of the nodes asleep or on their way and not drained, outside `barred`,
    largest first."""
    wakeable: dict[str, list[int]] = {}
    for name, node_state in node_states.items():
        node = state.index.get(name)
        if node is not None and node not in barred and node_state.power in WAKEABLE and not node_state.drained:
            wakeable.setdefault(state.model[node], []).append(state.whole_size[node])
    for sizes in wakeable.values():
        sizes.sort(reverse=True)
    return wakeable


def fits_sizes(state: PlacementState, job: Job, models: tuple[str, ...],
               sizes_by_model: Mapping[str, list[int]]) -> bool:
    """Whether idle nodes of these sizes (per model, largest first: `wakeable_sizes`) could hold `job`."""
    for model in models:
        sizes = sizes_by_model.get(model, [])
        if not sizes:
            continue
        if job.is_fractional:
            return True
        chunks = chunks_for(job, state.node_size_by_model[model])
        if chunks is None:
            continue
        ordered = sorted(chunks, reverse=True)
        if len(ordered) <= len(sizes) and all(size >= chunk for size, chunk in zip(sizes, ordered, strict=False)):
            return True
    return False
