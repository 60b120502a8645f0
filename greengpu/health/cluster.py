"""From per-GPU health states to what the scheduling core sees, and which nodes to drain.

The core reads health through `NodeState.warning_gpus` and `NodeState.failing_gpus`: a node with a
failing GPU is not schedulable (no new work on any of its GPUs: repairing one GPU, a reset or a
reboot, needs the node's other work gone too), and inference keeps off warning GPUs while healthy
capacity fits it (greengpu.sched.placement). The body drains a node once its failing GPU has no
work left (`drains_due`); the core wakes sleeping capacity for whatever then waits, as it does for
any job blocked for capacity.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from greengpu.health.score import HealthState
from greengpu.model import ClusterSnapshot, NodeState, PowerState


def node_states_with_health(node_states: Mapping[str, NodeState],
                            gpu_states: Mapping[str, Mapping[int, HealthState]]) -> dict[str, NodeState]:
    """`node_states` with each node's warning and failing GPUs set from `gpu_states` (node -> GPU -> state).

    A node whose GPUs are all healthy and that is otherwise plain awake is left out, as the snapshot
    expects. Returns a new mapping (the core's books notice a new mapping, not a changed one).
    """
    result: dict[str, NodeState] = {}
    for name in node_states.keys() | gpu_states.keys():
        states = gpu_states.get(name, {})
        warning = frozenset(g for g, s in states.items() if s is HealthState.WARNING)
        failing = frozenset(g for g, s in states.items() if s is HealthState.FAILING)
        base = node_states.get(name, NodeState())
        updated = base if (base.warning_gpus, base.failing_gpus) == (warning, failing) else replace(
            base, warning_gpus=warning, failing_gpus=failing)
        if updated != NodeState():
            result[name] = updated
    return result


def drains_due(snapshot: ClusterSnapshot) -> tuple[str, ...]:
    """Awake nodes with a failing GPU, not drained yet, with no job left on them: drain these now."""
    busy = {node for running in snapshot.running for node in running.nodes}
    return tuple(sorted(
        name for name, state in snapshot.node_states.items()
        if state.failing_gpus and not state.drained and state.power is PowerState.AWAKE and name not in busy
    ))
