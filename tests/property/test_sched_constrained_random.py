"""Random queues with pinned, excluded and exclusive jobs on a cluster with sleeping nodes: a constrained job is
placed only on nodes it allows (an exclusive one only on a node with nothing running), every wake is of a node
the job that needs it allows, and the remembered books decide as a fresh cycle does."""

from __future__ import annotations

import os

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schedkit import job, make_cluster, node_type
from transitions import apply_scheduler_actions

from greengpu.model import ClusterSnapshot, GpuSlot, NodeState, PendingJob, PlaceJob, PowerState, RunningJob, WakeNode
from greengpu.policy import SchedulerPolicy
from greengpu.sched.core import schedule_cycle
from greengpu.sched.invariants import check_invariants
from greengpu.sched.node_rules import node_allows

EXAMPLES = int(os.environ.get("GREENGPU_PROPERTY_EXAMPLES", "300"))
NAMES = [f"n{i:04d}" for i in range(6)]
SUBSETS = st.sets(st.sampled_from(NAMES), min_size=1, max_size=3).map(frozenset)


@st.composite
def pending_jobs(draw: st.DrawFn, index: int) -> PendingJob:
    kind = draw(st.sampled_from(["free", "pinned", "excluded", "exclusive"]))
    constraints: dict[str, object] = {}
    if kind == "pinned":
        constraints["required_nodes"] = draw(SUBSETS)
    elif kind == "excluded":
        constraints["excluded_nodes"] = draw(SUBSETS)
    elif kind == "exclusive":
        constraints["exclusive"] = True
    gpus = draw(st.sampled_from([0.5, 1, 2, 4, 8]))
    return PendingJob(job(f"j{index}", gpus=gpus, tenant=draw(st.sampled_from("ab")),
                          priority=draw(st.integers(0, 2)), **constraints))


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), asleep=st.sets(st.sampled_from(NAMES), max_size=5),
       busy=st.dictionaries(st.sampled_from(NAMES), st.integers(1, 4), max_size=3), count=st.integers(1, 8))
def test_constrained_jobs_stay_on_their_nodes(data: st.DataObject, asleep: set[str], busy: dict[str, int],
                                              count: int) -> None:
    cluster = make_cluster([(6, node_type(4), "r")])
    busy = {node: gpus for node, gpus in busy.items() if node not in asleep}
    running = tuple(RunningJob(job=job(f"r{node}", gpus=gpus, duration_s=36_000),
                               slots=tuple(GpuSlot(node, g) for g in range(gpus)), start_time_s=0.0,
                               expected_end_s=36_000.0) for node, gpus in sorted(busy.items()))
    pending = tuple(data.draw(pending_jobs(i)) for i in range(count))
    snapshot = ClusterSnapshot(time_s=100.0, cluster=cluster, running=running, pending=pending,
                               node_states={n: NodeState(power=PowerState.ASLEEP) for n in asleep})
    fresh = schedule_cycle(snapshot, SchedulerPolicy(), incremental=False)
    kept = schedule_cycle(snapshot, SchedulerPolicy(), incremental=True)
    assert kept.actions == fresh.actions and kept.waiting == fresh.waiting
    nodes = {n.name: n for n in cluster.nodes}
    jobs = {p.job.job_id: p.job for p in pending}
    for action in fresh.actions:
        if isinstance(action, PlaceJob):
            placed = jobs[action.job_id]
            for slot in action.slots:
                assert node_allows(nodes[slot.node], placed), (action, placed)
                assert not (placed.exclusive and slot.node in busy), (action, placed)
        elif isinstance(action, WakeNode):
            needed_by = jobs[action.reason.removeprefix("needed by ")]
            assert node_allows(nodes[action.node], needed_by), (action, needed_by)
    assert check_invariants(apply_scheduler_actions(snapshot, fresh.actions)) == []
