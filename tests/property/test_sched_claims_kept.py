"""KeptClaims answers every question as Claims does, after every start and stop of a cycle.

Both are built on the same cycle (its free-GPU index, quota ledger, starts and jobs asked to stop). The cycle then
admits waiting jobs one after another where they fit, and now and then stops a running job; after each step
every node is asked for every tenant (`owed_to_others`), every tenant's owed set is compared for every choice of
models (`owed_nodes`), and whenever `owed_everywhere` says every free node is owed, the reference agrees node by
node. Running jobs start before and after the waiting jobs came (only those after may be taken back), of
tenants below and above their nominal quota, some that cannot be stopped.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schedkit import job, make_cluster, node_type

from greengpu.model import Cluster, ClusterSnapshot, GpuSlot, PendingJob, RunningJob, Tenant
from greengpu.policy import PreemptionPolicy, SchedulerPolicy
from greengpu.sched import core
from greengpu.sched.books import fresh_books
from greengpu.sched.claims import Claims
from greengpu.sched.claims_kept import KeptClaims
from greengpu.sched.pending_index import PendingIndex
from greengpu.sched.placement import place

EXAMPLES = min(150, int(os.environ.get("GREENGPU_PROPERTY_EXAMPLES", "150")))
TENANTS = "abcde"
MODELS = (("A100",), ("H100",), ("A100", "H100"))

RUNNING = st.lists(st.tuples(st.integers(0, 4), st.integers(0, 7), st.integers(1, 4), st.sampled_from(TENANTS),
                             st.sampled_from([-500.0, 50.0]), st.booleans()), max_size=10)
WAITING = st.lists(st.tuples(st.sampled_from([0.25, 0.5, 1, 1, 2, 3, 4, 8]), st.sampled_from([None, 2]),
                             st.sampled_from([None, frozenset({"A100"}), frozenset({"H100"})]),
                             st.sampled_from(TENANTS), st.sampled_from([0.0, 100.0])), min_size=1, max_size=14)
STEPS = st.lists(st.tuples(st.sampled_from(["admit", "admit", "admit", "stop"]), st.integers(0, 100)), max_size=12)


def _side_by_side(cluster: Cluster, held: list[RunningJob],
                  pending: list[PendingJob]) -> tuple[Any, KeptClaims, Callable[[], None]]:
    """A cycle on these jobs, KeptClaims built on it, and a check that it answers as Claims built on it."""
    snapshot = ClusterSnapshot(time_s=200.0, cluster=cluster, running=tuple(held), pending=tuple(pending))
    policy = SchedulerPolicy(preemption=PreemptionPolicy(grace_s=0.0))
    books = fresh_books(snapshot, policy.borrow_non_interruptible)
    cycle = core._Cycle(snapshot, policy, 60.0, books)
    queue = PendingIndex(core.alike_key)
    assert queue.sync(snapshot.pending, cycle._capacity_wait)
    finder = cycle.finder
    reference = Claims(cycle.state, cycle.ledger, cycle._claimants_reader(queue), finder.reclaims_within_nominal,
                       books.on_node, cycle.started, finder.stopping, cycle._claims_token)
    kept = KeptClaims(cycle.state, cycle.ledger, queue, finder.reclaims_within_nominal, books.on_node,
                      cycle.started, finder.stopping, cycle._claims_token, books.running, finder.promised_now)
    tenants = sorted(cluster.tenants)

    def same_answers() -> None:
        state = cycle.state
        for tenant in tenants:
            for node in range(len(cluster.nodes)):
                assert kept.owed_to_others(node, tenant) == reference.owed_to_others(node, tenant), (node, tenant)
            for models in MODELS:
                assert kept.owed_nodes(tenant, models) == reference.owed_nodes(tenant, models), (tenant, models)
                if kept.owed_everywhere(tenant, models):
                    free = {n for m in models if m in state.buckets for n in state.nodes_with_free_gpus(m)}
                    assert all(reference.owed_to_others(n, tenant) for n in free), (tenant, models)

    return cycle, kept, same_answers


def _running(job_id: str, tenant: str, node: str, gpus: range, start_s: float = 50.0, units: int = 1000,
             interruptible: bool = True) -> RunningJob:
    return RunningJob(job(job_id, gpus=len(gpus) * units / 1000, tenant=tenant, interruptible=interruptible),
                      tuple(GpuSlot(node, g, units) for g in gpus), start_time_s=start_s, expected_end_s=9_999.0)


def _admit(cycle: Any, item: PendingJob) -> None:
    slots = place(cycle.state, item.job)
    assert slots is not None
    assert cycle.admit(item, slots, backfilled=False)


def test_a_claimant_larger_than_a_node_is_owed_every_node_all_free() -> None:
    """c's smallest waiting job needs 8 H100 GPUs without a per-node count: a 4-GPU H100 node all free is owed to
    it (min(8, 4) GPUs fit there), one with a GPU in use is not."""
    cluster = make_cluster([(1, node_type(8), "d0"), (2, node_type(4, "H100"), "d1")],
                           [Tenant("b", quota_gpus=0), Tenant("c", quota_gpus=8)])
    held = [_running("r0", "b", "n0002", range(1), start_s=-500.0)]  # there before c's job came: not taken back
    waiting = [PendingJob(job("c8", gpus=8, tenant="c", gpu_types=frozenset({"H100"}), submit_time_s=0.0))]
    _, kept, same_answers = _side_by_side(cluster, held, waiting)
    same_answers()
    assert kept.owed_nodes("b", ("H100",)) == {1}


def test_a_share_claimant_is_owed_a_gpu_partly_free() -> None:
    """c waits for half a GPU: a node whose only free capacity is 0.5 of one GPU is owed to it, one with 0.25 is not
    (b's jobs cannot be stopped: nothing could be taken back)."""
    cluster = make_cluster([(2, node_type(2), "d0")], [Tenant("b", quota_gpus=0), Tenant("c", quota_gpus=1)])
    held = [_running(f"r{i}", "b", node, gpus, units=units, interruptible=False) for i, (node, gpus, units) in
            enumerate([("n0000", range(1), 1000), ("n0000", range(1, 2), 500), ("n0001", range(1), 1000),
                       ("n0001", range(1, 2), 750)])]
    waiting = [PendingJob(job("c-half", gpus=0.5, tenant="c", submit_time_s=0.0))]
    _, kept, same_answers = _side_by_side(cluster, held, waiting)
    same_answers()
    assert kept.owed_nodes("b", ("A100",)) == {0}


def test_a_tenant_crossing_its_quota_makes_its_later_jobs_owed() -> None:
    """b holds exactly its nominal 4 GPUs, two of them on n0000 in a job started after c's job came; d fills the
    rest of n0000. Once b starts another job (on n0001: n0000 has no GPU free) it is above its quota, so c may take
    b's job on n0000 back: n0000 becomes owed to c, though nothing changed on it and b's claimant is the same."""
    cluster = make_cluster([(2, node_type(4), "d0")], [Tenant("b", quota_gpus=4), Tenant("c", quota_gpus=4),
                                                       Tenant("d", quota_gpus=0)])
    held = [_running("r0", "b", "n0000", range(2), start_s=50.0),
            _running("r1", "b", "n0001", range(2), start_s=-500.0),
            _running("r2", "d", "n0000", range(2, 4), start_s=-500.0)]
    waiting = [PendingJob(job("c2", gpus=2, tenant="c", submit_time_s=0.0)),
               PendingJob(job("b1", gpus=1, tenant="b", submit_time_s=100.0)),
               PendingJob(job("b1-later", gpus=1, tenant="b", submit_time_s=150.0, duration_s=7200.0))]
    cycle, kept, same_answers = _side_by_side(cluster, held, waiting)
    same_answers()
    assert not kept.owed_to_others(0, "d")  # c's 2 GPUs: none free on n0000, b's job not yet takeable
    _admit(cycle, waiting[2])
    assert {s.node for s in cycle.started[0].slots} == {"n0001"}
    same_answers()
    assert kept.owed_to_others(0, "d")

@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(running=RUNNING, waiting=WAITING, steps=STEPS, quotas=st.lists(st.sampled_from([0, 1, 2, 4, 8]),
                                                                       min_size=len(TENANTS), max_size=len(TENANTS)))
def test_kept_claims_answer_as_claims(running, waiting, steps, quotas) -> None:  # noqa: ANN001
    cluster = make_cluster([(3, node_type(8), "d0"), (2, node_type(4, "H100"), "d1")],
                           [Tenant(name, quota_gpus=quota) for name, quota in zip(TENANTS, quotas, strict=True)])
    nodes = [n.name for n in cluster.nodes]
    sizes = {n.name: cluster.node_types[n.type_name].gpus for n in cluster.nodes}
    taken: set[tuple[str, int]] = set()
    held: list[RunningJob] = []
    for index, (node_at, first_gpu, count, tenant, start_s, interruptible) in enumerate(running):
        name = nodes[node_at]
        gpus = [g for g in range(first_gpu, first_gpu + count) if g < sizes[name] and (name, g) not in taken]
        if not gpus:
            continue
        taken.update((name, g) for g in gpus)
        held.append(RunningJob(job(f"r{index}", gpus=len(gpus), tenant=tenant, interruptible=interruptible),
                               tuple(GpuSlot(name, g) for g in gpus), start_time_s=start_s,
                               expected_end_s=start_s + 10_000))
    pending = []
    for index, (gpus, per_node, models, tenant, submit_s) in enumerate(waiting):
        per_node = per_node if per_node is not None and gpus >= per_node and gpus % per_node == 0 else None
        pending.append(PendingJob(job(f"w{index}", gpus=gpus, tenant=tenant, gpus_per_node=per_node,
                                      gpu_types=models, submit_time_s=submit_s, duration_s=600.0 + index)))
    cycle, _, same_answers = _side_by_side(cluster, held, pending)
    finder = cycle.finder
    same_answers()
    waiting_left = list(pending)
    for action, pick in steps:
        if action == "admit" and waiting_left:
            item = waiting_left.pop(pick % len(waiting_left))
            slots = place(cycle.state, item.job)
            if slots is not None:
                cycle.admit(item, slots, backfilled=False)
        elif action == "stop":
            victims = [r for r in held if r.job.job_id not in finder.stopping]
            if victims:
                cycle._stop(victims[pick % len(victims)], "", "stopped by the test")
        same_answers()
