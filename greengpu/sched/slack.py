"""A lever may spend slack, never queue time: which caps to lift and which nodes to keep awake. Pure.

The energy levers (capping, sleep) save energy by running jobs slower and by powering idle nodes
down. Both are free while the cluster has slack; both cost queue time as soon as a job waits that a
faster job or an extra node would start sooner. From the scheduling core's typed wait results
(greengpu.sched.waits), the running set and the inventory, this module names:

- `QueueGuard.lifts`: whether a running job's completion frees a waiting job's way. Its cap is
  lifted (capping.decide with `capacity_short=True`), everyone else's stay on:
    * a quota wait: the job's own tenant is at its limit, so its tenant's running jobs (on the GPU
      models the job allows) are in its way;
    * a reservation: the jobs on the reserved nodes;
    * a gang that cannot assemble, a job blocked for capacity, a job waiting for a node to wake:
      the jobs on every node it could use (a node of a model it allows, big enough for a piece of it);
    * preempting (its victims stop when their grace ends), no model: nothing running is in its way.
- `keep_awake`: the nodes no idle timeout may put to sleep now: every node a capacity-bound job
  (capacity, gang, reservation, wake) could use. A job waiting for its quota is not helped by an
  extra node, so it keeps none awake.

Inputs are the core's own types and the inventory, so the simulator, the agent and the daemon
apply the same rule to what they observe.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from greengpu.model import Cluster, RunningJob
from greengpu.sched.waits import Wait, WaitReason, distinct_of

if TYPE_CHECKING:
    from greengpu.sched.memory import SchedulerMemory

_SHAPED = (WaitReason.CAPACITY, WaitReason.GANG, WaitReason.WAKE)
"""Waits freed by any node of the right shape (models, GPUs per node)."""
_GUARDS_KEPT = 256


@dataclass(frozen=True)
class QueueGuard:
    """What the levers must leave alone this tick so that no waiting job waits longer for them."""

    blocked_nodes: frozenset[str]
    """Nodes whose running jobs are in a waiting job's way (their caps lift)."""
    blocked_quota: frozenset[tuple[str, str]]
    """(tenant, GPU model) pairs whose running jobs are in a waiting job's way (a quota wait)."""
    keep_awake: frozenset[str]
    """Nodes that must not be put to sleep: a waiting job could use them."""
    every_node: bool = False
    """Every node of the cluster is in some job's way (then every running job runs uncapped)."""

    def lifts(self, tenant: str, nodes: Iterable[str], model_of: Mapping[str, str]) -> bool:
        """Whether a job of `tenant` running on `nodes` runs uncapped: its completion frees a waiting
        job's way. `model_of` maps node names to GPU models (`model_of_nodes`)."""
        if self.every_node:
            return True
        blocked, quota = self.blocked_nodes, self.blocked_quota
        return any(node in blocked or (tenant, model_of.get(node, "")) in quota for node in nodes)

    def uncapped_jobs(self, running: Iterable[RunningJob], cluster: Cluster,
                      memory: SchedulerMemory | None = None) -> frozenset[str]:
        """The ids of the running jobs whose caps lift (`memory`: the body's, which keeps the cluster's shapes)."""
        model_of = _shapes_of(cluster, memory).model_of
        return frozenset(r.job.job_id for r in running if self.lifts(r.job.tenant, r.nodes, model_of))

    @property
    def queue_waits(self) -> bool:
        """Whether any waiting job is held up by something a lever controls."""
        return bool(self.blocked_nodes or self.blocked_quota or self.keep_awake)


NO_WAIT = QueueGuard(frozenset(), frozenset(), frozenset())


class NodeShapes:
    """Nodes of each (models, least GPUs per node) shape, resolved once per cluster."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.model_of: dict[str, str] = {}
        self.size_of: dict[str, int] = {}
        for node in cluster.nodes:
            node_type = cluster.node_types[node.type_name]
            self.model_of[node.name] = node_type.gpu_model
            self.size_of[node.name] = node_type.gpus
        self.memo: dict[tuple[tuple[str, ...], int], frozenset[str]] = {}
        self.guards: dict[frozenset[int], tuple[Collection[Wait], QueueGuard]] = {}
        """Guards found, by the ids of the distinct waits they were found from (kept alive with them, so the
        ids stay theirs): the core shares Wait objects between cycles, and a saturated queue's waits
        are mostly the same from one cycle to the next."""

    def nodes(self, models: tuple[str, ...], node_gpus: int) -> frozenset[str]:
        key = (models, node_gpus)
        found = self.memo.get(key)
        if found is None:
            wanted = set(models)
            found = self.memo[key] = frozenset(
                name for name, model in self.model_of.items()
                if model in wanted and self.size_of[name] >= node_gpus)
        return found


def _shapes_of(cluster: Cluster, memory: SchedulerMemory | None) -> NodeShapes:
    """The cluster's shapes, kept in `memory` for the same Cluster object."""
    if memory is not None and memory.shapes is not None and memory.shapes.cluster is cluster:
        return memory.shapes
    shapes = NodeShapes(cluster)
    if memory is not None:
        memory.shapes = shapes
    return shapes


def model_of_nodes(cluster: Cluster, memory: SchedulerMemory | None = None) -> Mapping[str, str]:
    """Each node's GPU model (for QueueGuard.lifts; read-only)."""
    return _shapes_of(cluster, memory).model_of


def queue_guard(waits: Mapping[str, Wait], cluster: Cluster, memory: SchedulerMemory | None = None) -> QueueGuard:
    """Which running jobs run uncapped (`QueueGuard.lifts`) and which nodes stay awake, so that no
    waiting job waits for a lever. `waits` is a cycle's `CycleResult.waits`; `cluster` the inventory.
    Work is in proportion to the distinct kinds of wait, not to the number of waiting jobs. `memory` (the
    body's, greengpu.sched.memory) keeps the cluster's shapes and the guards found between ticks."""
    if not waits:
        return NO_WAIT
    shapes = _shapes_of(cluster, memory)
    distinct = distinct_of(waits)
    key = frozenset(map(id, distinct))
    known = shapes.guards.get(key)
    if known is not None:
        return known[1]
    guard = _guard_of(distinct, shapes)
    if len(shapes.guards) >= _GUARDS_KEPT:
        shapes.guards.clear()  # a long-lived daemon meets ever new waits: keep the memo small
    shapes.guards[key] = (tuple(distinct), guard)
    return guard


def _guard_of(distinct: Collection[Wait], shapes: NodeShapes) -> QueueGuard:
    blocked_nodes: set[str] = set()
    usable_nodes: set[str] = set()
    quota: set[tuple[str, str]] = set()
    # The core shares one Wait between jobs alike in everything it records: visit each once (a full
    # cycle's waits know theirs; otherwise the dedup runs in C).
    for wait in distinct:
        reason = wait.reason
        if reason is WaitReason.QUOTA:
            quota.update((wait.tenant, model) for model in wait.models)
        elif reason in _SHAPED:
            nodes = shapes.nodes(wait.models, wait.node_gpus)
            blocked_nodes |= nodes
            usable_nodes |= nodes
        elif reason is WaitReason.RESERVATION:
            blocked_nodes |= wait.nodes
            usable_nodes |= shapes.nodes(wait.models, wait.node_gpus)
    every = len(blocked_nodes) == len(shapes.model_of)
    return QueueGuard(frozenset(blocked_nodes), frozenset(quota), frozenset(usable_nodes), every)
