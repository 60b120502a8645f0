"""Random event streams of submits and finishes: the scheduler's invariants hold at every step.

Each example builds a random cluster (8- and 4-GPU nodes in a few domains, some asleep), random
tenants (quotas, borrowing limits, weights) and a stream of events: submissions of jobs from a
share of one GPU up to 64-GPU gangs, finishes of running jobs, and scheduling cycles. After every
cycle: no GPU over-committed, no partial gang, no tenant above quota plus borrowing, no work on a
sleeping node, and every job either holds all it asked for or nothing.
"""

from __future__ import annotations

import os
from dataclasses import replace

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schedkit import Driver, job, make_cluster, node_type

from greengpu.model import GPU_UNITS, NodeState, PlaceJob, PowerState, Tenant
from greengpu.policy import BackfillPolicy, PreemptionPolicy, SchedulerPolicy
from greengpu.sched.invariants import check_invariants

EXAMPLES = int(os.environ.get("GREENGPU_PROPERTY_EXAMPLES", "1000"))
"""1000 random event streams in the normal suite; the mutation job (docs/TESTING.md) runs fewer per mutant."""

GPU_SIZES = st.sampled_from([0.25, 0.5, 1, 1, 2, 3, 4, 8, 8, 12, 16, 24, 32, 64])


@st.composite
def clusters(draw: st.DrawFn):  # noqa: ANN201
    groups = []
    for index in range(draw(st.integers(1, 3))):
        size = draw(st.sampled_from([4, 8]))
        model = draw(st.sampled_from(["A100", "H100"]))
        groups.append((draw(st.integers(1, 6)), node_type(size, model, name=f"t{index}"), f"d{index % 2}"))
    tenants = [
        Tenant(name, quota_gpus=draw(st.sampled_from([0, 4, 8, 16])), weight=draw(st.sampled_from([1, 2, 3])),
               borrow_limit_gpus=draw(st.sampled_from([None, 0, 4, 16])))
        for name in ("a", "b", "c")
    ]
    return make_cluster(groups, tenants)


EVENTS = st.lists(
    st.one_of(
        st.tuples(st.just("submit"), GPU_SIZES, st.sampled_from("abcd"), st.integers(0, 3), st.booleans(),
                  st.sampled_from([None, 300.0, 900.0]), st.sampled_from([None, 1, 4])),
        st.tuples(st.just("finish"), st.integers(0, 1000)),
        st.tuples(st.just("cycle")),
        st.tuples(st.just("sleep"), st.integers(0, 1000)),
    ),
    min_size=5, max_size=40,
)


@settings(max_examples=EXAMPLES, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(cluster=clusters(), events=EVENTS, grace_s=st.sampled_from([0.0, 60.0, 120.0]),
       victim_order=st.sampled_from(["least-lost-work", "newest-first"]), reserve=st.integers(0, 1))
def test_invariants_hold_on_random_event_streams(cluster, events, grace_s, victim_order, reserve) -> None:  # noqa: ANN001
    policy = SchedulerPolicy(
        preemption=PreemptionPolicy(grace_s=grace_s, min_runtime_s=60, victim_order=victim_order),
        backfill=BackfillPolicy(reservations=2), whole_node_reserve=reserve,
    )
    driver = Driver(cluster, policy)
    counter = 0
    for event in events:
        kind = event[0]
        if kind == "submit":
            _, gpus, tenant, priority, interruptible, checkpoint_s, per_node = event
            counter += 1
            if per_node is not None and (gpus < 1 or gpus % per_node):
                per_node = None
            driver.submit(job(f"j{counter}", gpus=gpus, tenant=tenant, priority=priority,
                              duration_s=60.0 * (1 + counter % 7), interruptible=interruptible,
                              checkpoint_interval_s=checkpoint_s, gpus_per_node=per_node))
        elif kind == "finish":
            running = sorted(driver.running())
            if running:
                driver.finish(running[event[1] % len(running)])
        elif kind == "sleep":
            # Put an idle node to sleep (the body only suspends nodes with no work on them).
            busy = {s.node for r in driver.snapshot.running for s in r.slots}
            idle = [n.name for n in cluster.nodes if n.name not in busy]
            if idle:
                name = idle[event[1] % len(idle)]
                states = dict(driver.snapshot.node_states)
                states[name] = NodeState(PowerState.ASLEEP)
                driver.snapshot = replace(driver.snapshot, node_states=states)
        else:
            result = driver.tick()  # Driver.cycle asserts check_invariants() == []
            asleep = {n for n, s in driver.snapshot.node_states.items() if s.power is PowerState.ASLEEP}
            for action in result.actions:
                if isinstance(action, PlaceJob):
                    assert not {s.node for s in action.slots} & asleep
        for running_job in driver.snapshot.running:
            assert sum(s.units for s in running_job.slots) == running_job.job.units
        assert check_invariants(driver.snapshot) == []
    pending_ids = driver.pending_ids()
    assert not pending_ids & set(driver.running())  # a waiting job holds nothing
    total_units = sum(s.units for r in driver.snapshot.running for s in r.slots)
    assert total_units <= cluster.total_gpus * GPU_UNITS
