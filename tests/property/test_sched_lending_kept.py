"""The lending rule's answers kept between starts (greengpu.sched.claims_kept) decide as answers found anew.

A cycle with shortcuts keeps which nodes are owed to claimants from one start to the next and finds whole sets
from the free-GPU buckets; a cycle without them (`incremental=False`) asks greengpu.sched.claims.Claims, which
judges every node against every claimant after each start, stop or promise. The Driver runs every cycle both
ways and asserts the same actions, waits, reservations and withdrawals. These streams are built to move what
the kept answers depend on: many tenants with small quotas, so claimants change and tenants cross their nominal
quota within a cycle; whole, fractional and per-node requests; two GPU models and jobs pinned to one; jobs that
cannot be stopped; preemptions with and without a grace.
"""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schedkit import Driver, job, make_cluster, node_type

from greengpu.model import Tenant
from greengpu.policy import BackfillPolicy, PreemptionPolicy, SchedulerPolicy
from greengpu.sched import core

EXAMPLES = min(200, int(os.environ.get("GREENGPU_PROPERTY_EXAMPLES", "200")))
TENANTS = "abcdefgh"

REQUESTS = st.tuples(
    st.sampled_from([0.25, 0.5, 1, 1, 1, 2, 2, 3, 4, 8, 16]),  # GPUs
    st.sampled_from([None, None, 2, 4]),  # GPUs per node
    st.sampled_from([None, None, frozenset({"A100"}), frozenset({"H100"})]),  # allowed models
)

EVENTS = st.lists(
    st.one_of(
        st.tuples(st.just("submit"), st.integers(1, 12), REQUESTS, st.sampled_from(TENANTS), st.integers(0, 2),
                  st.sampled_from([True, True, False]), st.sampled_from([1, 10, 60, 600])),
        st.tuples(st.just("finish"), st.integers(0, 1000)),
        st.tuples(st.just("cycle"), st.sampled_from([60.0, 600.0, 3600.0])),
    ),
    min_size=4, max_size=24,
)


@settings(max_examples=EXAMPLES, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(events=EVENTS, quotas=st.lists(st.sampled_from([0, 2, 4, 8, 16]), min_size=2, max_size=len(TENANTS)),
       attempts=st.integers(0, 3), grace_s=st.sampled_from([0.0, 120.0]), reservations=st.integers(0, 2),
       everywhere=st.booleans())
def test_kept_lending_answers_decide_as_answers_found_anew(events, quotas, attempts, grace_s, reservations,  # noqa: ANN001
                                                          everywhere) -> None:  # noqa: ANN001
    """`everywhere` False: borrowers are always placed first and then checked node by node (owed_to_others,
    owed_nodes), as they are when some free node is not owed to a claimant."""
    with pytest.MonkeyPatch.context() as patch:
        if not everywhere:
            patch.setattr(core._Cycle, "_lending_refuses", lambda self, job, models: False)
        _replay(events, quotas, attempts, grace_s, reservations)


def _replay(events, quotas, attempts, grace_s, reservations) -> None:  # noqa: ANN001
    tenants = len(quotas)
    cluster = make_cluster([(3, node_type(8), "d0"), (2, node_type(4, "H100"), "d1")],
                           [Tenant(name, quota_gpus=quota) for name, quota in zip(TENANTS, quotas, strict=False)])
    policy = SchedulerPolicy(
        preemption=PreemptionPolicy(max_attempts_per_cycle=attempts, grace_s=grace_s, min_runtime_s=60),
        backfill=BackfillPolicy(reservations=reservations),
    )
    driver = Driver(cluster, policy)  # cross-checks every cycle against fresh books without shortcuts
    counter = 0
    for event in events:
        if event[0] == "submit":
            _, count, (gpus, per_node, models, ), tenant, priority, interruptible, step_min = event
            if tenant not in TENANTS[:tenants]:
                tenant = TENANTS[0]
            if per_node is not None and (gpus < per_node or gpus % per_node):
                per_node = None
            for index in range(count):
                counter += 1
                driver.submit(job(f"j{counter}", gpus=gpus, tenant=tenant, priority=priority,
                                  interruptible=interruptible, gpus_per_node=per_node, gpu_types=models,
                                  duration_s=60.0 * step_min * (1 + index % 4)))
        elif event[0] == "finish":
            running = sorted(driver.running())
            if running:
                driver.finish(running[event[1] % len(running)])
        else:
            driver.advance(event[1])
            driver.cycle()
