"""Invariant checks the simulator and the tests run after every event: an independent oracle.

- no GPU over-committed (shares on one GPU add up to at most one GPU);
- no partial gang (a running job holds exactly what it asked for, on distinct whole GPUs);
- no tenant above its nominal quota plus borrowing limit;
- no work on a node that is not awake;
- shared GPUs (docs/GPU-SHARING.md): no whole-GPU or fractional work on a MIG or time-sliced GPU, a MIG job on
  one instance of its profile in its GPU's current partition that no other job holds, no more replicas taken
  than the GPU has.

The quota check is recomputed here from the inventory and the running set alone. It deliberately
shares no code with `greengpu.sched.quota.QuotaLedger`, which the scheduler admits jobs with: an
oracle that called the ledger would agree with any bug in it (a doubled borrowing limit passed
unnoticed that way). Keep it that way: nothing from `greengpu.sched` may be imported here.
"""

from __future__ import annotations

from greengpu.model import GPU_UNITS, TIMESLICE, ClusterSnapshot, PowerState

ALL_MODELS = "*"
"""The quota key of a tenant without per-model quotas: usage on every GPU model counts together."""


def check_invariants(snapshot: ClusterSnapshot) -> list[str]:
    """Every broken invariant in `snapshot`, one message each (empty when all hold)."""
    cluster = snapshot.cluster
    sizes = {n.name: cluster.node_types[n.type_name].gpus for n in cluster.nodes}
    used: dict[tuple[str, int], int] = {}
    problems: list[str] = []
    for running in snapshot.running:
        job = running.job
        held = sum(s.units for s in running.slots)
        if held != job.units and not job.gpu_profile:  # a MIG instance or replica holds its share (below)
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
    problems.extend(shared_gpu_violations(snapshot))
    problems.extend(quota_violations(snapshot))
    return problems


def held_units_by_quota_key(snapshot: ClusterSnapshot) -> dict[tuple[str, str], int]:
    """Milli-GPUs each tenant holds, per quota key: the GPU model for a tenant with per-model quotas,
    otherwise `ALL_MODELS`. Counted from the slots the jobs really hold, not from what they asked for."""
    cluster = snapshot.cluster
    model_of_node = {n.name: cluster.node_types[n.type_name].gpu_model for n in cluster.nodes}
    sizes = {n.name: cluster.node_types[n.type_name].gpus for n in cluster.nodes}
    held: dict[tuple[str, str], int] = {}
    for running in snapshot.running:
        name = running.job.tenant
        tenant = cluster.tenants.get(name)
        per_model = tenant is not None and bool(tenant.quota_gpus_by_model)
        for slot in running.slots:
            if slot.node not in sizes or not 0 <= slot.gpu_index < sizes[slot.node]:
                continue  # reported by check_invariants as a GPU that does not exist
            key = (name, model_of_node[slot.node] if per_model else ALL_MODELS)
            held[key] = held.get(key, 0) + slot.units
    return held


def quota_violations(snapshot: ClusterSnapshot) -> list[str]:
    """Tenants holding more than their nominal quota plus borrowing limit, recomputed from the inventory.

    A tenant's nominal quota on a key is `quota_gpus` (all models together), or its entry in
    `quota_gpus_by_model` (0 for a model it has no quota on). It may hold up to that plus
    `borrow_limit_gpus`; without a borrowing limit (and for a tenant the inventory does not list) it
    may borrow any idle capacity, so there is no limit to break.
    """
    tenants = snapshot.cluster.tenants
    found: list[str] = []
    for (name, key), units in sorted(held_units_by_quota_key(snapshot).items()):
        tenant = tenants.get(name)
        if tenant is None or tenant.borrow_limit_gpus is None:
            continue
        nominal_gpus = tenant.quota_gpus if key == ALL_MODELS else tenant.quota_gpus_by_model.get(key, 0.0)
        limit_units = round(nominal_gpus * GPU_UNITS) + round(tenant.borrow_limit_gpus * GPU_UNITS)
        if units > limit_units:
            found.append(f"tenant {name} holds {units / GPU_UNITS:g} GPUs on {key}, "
                         f"above quota plus borrowing {limit_units / GPU_UNITS:g}")
    return found


def shared_gpu_violations(snapshot: ClusterSnapshot) -> list[str]:
    """Every broken shared-GPU invariant in `snapshot`, one message each."""
    cluster = snapshot.cluster
    kinds: dict[tuple[str, int], tuple[str, int]] = {}
    for node in cluster.nodes:
        node_type = cluster.node_types[node.type_name]
        mig_gpus = node_type.mig.gpus if node_type.mig else 0
        for gpu in range(mig_gpus):
            kinds[(node.name, gpu)] = ("mig", 0)
        if node_type.time_slicing:
            for gpu in range(mig_gpus, mig_gpus + node_type.time_slicing.gpus):
                kinds[(node.name, gpu)] = ("timeslice", node_type.time_slicing.replicas)
    if not kinds and not any(r.job.gpu_profile for r in snapshot.running):
        return []
    problems: list[str] = []
    instances: dict[tuple[str, int, str], str] = {}
    replicas: dict[tuple[str, int], int] = {}
    for running in snapshot.running:
        job = running.job
        for slot in running.slots:
            key = (slot.node, slot.gpu_index)
            kind = kinds.get(key)
            where = f"{slot.node}:{slot.gpu_index}"
            if not job.gpu_profile:
                if kind is not None:
                    problems.append(f"{job.job_id} asked for no profile and runs on shared GPU {where}")
                continue
            if len(running.slots) != 1:
                problems.append(f"{job.job_id} holds {len(running.slots)} slots for one {job.gpu_profile}")
            if job.gpu_profile == TIMESLICE:
                if kind is None or kind[0] != "timeslice" or slot.instance != TIMESLICE:
                    problems.append(f"{job.job_id} holds a replica of {where}, which is not time-sliced")
                    continue
                replicas[key] = replicas.get(key, 0) + 1
                if replicas[key] > kind[1]:
                    problems.append(f"time-sliced GPU {where} has {replicas[key]} of {kind[1]} replicas taken")
                continue
            if kind is None or kind[0] != "mig" or slot.instance.partition("@")[0] != job.gpu_profile:
                problems.append(f"{job.job_id} holds {slot.instance or 'a share'} of {where}, not a "
                                f"{job.gpu_profile} instance of a MIG GPU")
                continue
            partition = snapshot.mig_partitions.get(key)
            if partition is None or slot.instance not in partition.instances:
                problems.append(f"{job.job_id} holds {slot.instance} of {where}, not in its partition")
            holder = instances.setdefault((slot.node, slot.gpu_index, slot.instance), job.job_id)
            if holder != job.job_id:
                problems.append(f"MIG instance {slot.instance} of {where} held by {holder} and {job.job_id}")
    return problems
