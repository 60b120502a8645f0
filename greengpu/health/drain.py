"""Drain nodes with a failing GPU: the decision (pure), for every body that has health reports.

A node with a failing GPU takes no new work already (`NodeState.schedulable`). Its interruptible training
and batch jobs are asked to checkpoint and stop (`plan_checkpoints`: the preemption path without a
beneficiary, so the core stops each after its grace and it is requeued, to resume elsewhere from the
checkpoint rather than lose its work when the GPU fails); the others (inference, interactive,
non-interruptible) are allowed to finish. Once nothing runs there it is drained (Slurm `state=drain`,
Kubernetes cordon, the fake cluster a drained state) so nothing lands on it until someone repairs it.
The alert for a failing node names each job still on it, its tenant and its last checkpoint, so whoever
is on call knows what a failure would cost.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from greengpu.health.cluster import drains_due
from greengpu.health.stalled import checkpoint_text
from greengpu.model import ClusterSnapshot


@dataclass(frozen=True)
class DrainNode:
    """Drain `node` (no new work until an administrator returns it)."""

    node: str
    reason: str


def plan_drains(snapshot: ClusterSnapshot) -> tuple[DrainNode, ...]:
    """The nodes to drain now: awake, a failing GPU, not drained yet, and nothing left running there."""
    return tuple(DrainNode(name, "greengpu: failing GPU " + ",".join(
        str(g) for g in sorted(snapshot.node_states[name].failing_gpus))) for name in drains_due(snapshot))


CHECKPOINTED_CLASSES = frozenset({"training", "batch"})


def plan_checkpoints(snapshot: ClusterSnapshot) -> tuple[str, ...]:
    """Running interruptible training and batch jobs on a node with a failing GPU, not asked to stop yet, in
    job id order: ask each to checkpoint and stop."""
    failing = {name for name, state in snapshot.node_states.items() if state.failing_gpus and not state.drained}
    if not failing:
        return ()
    return tuple(sorted(
        r.job.job_id for r in snapshot.running
        if r.preempt_signalled_s is None and r.job.interruptible and r.job.job_class in CHECKPOINTED_CLASSES
        and any(node in failing for node in r.nodes)))


def failing_node_lines(snapshot: ClusterSnapshot, checkpoints: Mapping[str, float]) -> dict[str, str]:
    """Per node with a failing GPU and not drained: one alert line naming each job still there, its tenant
    and its last checkpoint (from `checkpoints`, else the job's own record; "none seen since start")."""
    lines: dict[str, str] = {}
    for name, state in sorted(snapshot.node_states.items()):
        if not state.failing_gpus or state.drained:
            continue
        jobs = []
        for running in sorted(snapshot.running, key=lambda r: r.job.job_id):
            if name in running.nodes:
                seen = checkpoints.get(running.job.job_id, running.last_checkpoint_s)
                jobs.append(f"job {running.job.job_id} (tenant {running.job.tenant}, "
                            f"{checkpoint_text(seen, snapshot.time_s)})")
        gpus = ",".join(str(g) for g in sorted(state.failing_gpus))
        lines[name] = (f"{name}: GPU {gpus} failing; no new work, drained once empty; "
                       + ("jobs still there: " + "; ".join(jobs) if jobs else "no job left"))
    return lines
