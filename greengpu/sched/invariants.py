"""Invariant checks the simulator and the tests run after every event.

- no GPU over-committed (shares on one GPU add up to at most one GPU);
- no partial gang (a running job holds exactly what it asked for, on distinct whole GPUs);
- no tenant above its nominal quota plus borrowing limit;
- no work on a node that is not awake.
"""

from __future__ import annotations

from greengpu.model import GPU_UNITS, ClusterSnapshot, PowerState
from greengpu.sched.quota import QuotaLedger


def check_invariants(snapshot: ClusterSnapshot) -> list[str]:
    """Every broken invariant in `snapshot`, one message each (empty when all hold)."""
    cluster = snapshot.cluster
    sizes = {n.name: cluster.node_types[n.type_name].gpus for n in cluster.nodes}
    used: dict[tuple[str, int], int] = {}
    problems: list[str] = []
    for running in snapshot.running:
        job = running.job
        held = sum(s.units for s in running.slots)
        if held != job.units:
            problems.append(f"partial gang: {job.job_id} holds {held / GPU_UNITS:g} of {job.gpus:g} GPUs")
        seen: set[tuple[str, int]] = set()
        for slot in running.slots:
            if slot.node not in sizes or not 0 <= slot.gpu_index < sizes[slot.node]:
                problems.append(f"{job.job_id} holds a GPU that does not exist: {slot.node}:{slot.gpu_index}")
                continue
            if slot.units <= 0 or slot.units > GPU_UNITS:
                problems.append(f"{job.job_id} holds an impossible share {slot.units} on {slot.node}")
            key = (slot.node, slot.gpu_index)
            if key in seen:
                problems.append(f"{job.job_id} holds {slot.node}:{slot.gpu_index} twice")
            seen.add(key)
            used[key] = used.get(key, 0) + slot.units
            power = snapshot.node_state(slot.node).power
            if power is not PowerState.AWAKE:
                problems.append(f"{job.job_id} runs on {slot.node}, which is {power.value}")
    for (node, gpu), units in sorted(used.items()):
        if units > GPU_UNITS:
            problems.append(f"over-committed GPU {node}:{gpu}: {units / GPU_UNITS:g} GPUs allocated")
    model_of_node = {n.name: cluster.node_types[n.type_name].gpu_model for n in cluster.nodes}
    ledger = QuotaLedger(cluster, model_of_node, {}, borrow_non_interruptible=True)
    for running in snapshot.running:
        ledger.charge(running)
    problems.extend(ledger.violations())
    return problems
