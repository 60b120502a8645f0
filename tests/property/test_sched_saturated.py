"""A saturated queue decided with shortcuts (jobs alike share what was found for the first of them) gets
exactly the decisions of a cycle that decides every job on its own.

The scheduling cycle skips work on saturated queues: quota verdicts kept per kind of request, the
placement and backfill frontiers, and, once the cluster is full, one question per kind of job
(greengpu.sched.cycle.alike, `wait_alike`). The Driver runs every cycle twice, with remembered books and
shortcuts and with fresh books and none, and asserts the same actions, waits, reservations and
withdrawals. These streams are built to reach the shortcuts: many jobs of few shapes and tenants, few
preemption attempts and reservations per cycle, durations that straddle the reservations' starts.
"""

from __future__ import annotations

import os
from dataclasses import replace

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schedkit import Driver, job, make_cluster, node_type

from greengpu.model import NodeState, PowerState, Tenant
from greengpu.policy import BackfillPolicy, PreemptionPolicy, SchedulerPolicy

EXAMPLES = min(300, int(os.environ.get("GREENGPU_PROPERTY_EXAMPLES", "300")))

BURSTS = st.lists(
    st.one_of(
        # A burst of jobs alike but for their duration (and so whether they could backfill).
        st.tuples(st.just("burst"), st.integers(2, 25), st.sampled_from([0.5, 1, 1, 2, 4, 8, 16]),
                  st.sampled_from("abc"), st.integers(0, 2), st.booleans(), st.sampled_from([1, 5, 60, 240])),
        st.tuples(st.just("finish"), st.integers(0, 1000)),
        st.tuples(st.just("cycle"), st.sampled_from([60.0, 600.0, 3600.0])),
        st.tuples(st.just("cycle"), st.just(60.0)),
        st.tuples(st.just("sleep"), st.integers(0, 1000)),
    ),
    min_size=4, max_size=30,
)


@settings(max_examples=EXAMPLES, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(events=BURSTS, attempts=st.integers(0, 2), reservations=st.integers(0, 2),
       nodes=st.integers(2, 6), quota=st.sampled_from([0, 4, 8]), borrow=st.sampled_from([None, 0, 4]))
def test_shortcuts_decide_as_every_job_on_its_own(events, attempts, reservations, nodes, quota, borrow) -> None:  # noqa: ANN001
    tenants = [Tenant(name, quota_gpus=quota, borrow_limit_gpus=borrow) for name in ("a", "b", "c")]
    cluster = make_cluster([(nodes, node_type(8), "d0"), (2, node_type(4, "H100"), "d1")], tenants)
    policy = SchedulerPolicy(
        preemption=PreemptionPolicy(max_attempts_per_cycle=attempts, grace_s=120.0, min_runtime_s=60),
        backfill=BackfillPolicy(reservations=reservations),
    )
    driver = Driver(cluster, policy)  # cross-checks every cycle against fresh books without shortcuts
    counter = 0
    for event in events:
        if event[0] == "burst":
            _, count, gpus, tenant, priority, interruptible, step_min = event
            for index in range(count):
                counter += 1
                driver.submit(job(f"j{counter}", gpus=gpus, tenant=tenant, priority=priority,
                                  interruptible=interruptible, duration_s=60.0 * step_min * (1 + index % 5)))
        elif event[0] == "finish":
            running = sorted(driver.running())
            if running:
                driver.finish(running[event[1] % len(running)])
        elif event[0] == "sleep":
            busy = {s.node for r in driver.snapshot.running for s in r.slots}
            idle = [n.name for n in cluster.nodes if n.name not in busy]
            if idle:
                states = dict(driver.snapshot.node_states)
                states[idle[event[1] % len(idle)]] = NodeState(PowerState.ASLEEP)
                driver.snapshot = replace(driver.snapshot, node_states=states)
        else:
            driver.advance(event[1])
            driver.cycle()
