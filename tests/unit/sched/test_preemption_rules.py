"""Preemption's building blocks by hand: checkpoints, lost work, victim ranking, who may yield."""

from __future__ import annotations

from dataclasses import replace

import pytest
from schedkit import job, make_cluster, node_type

from greengpu.model import (
    ClusterSnapshot,
    GpuSlot,
    KillJob,
    NodeState,
    PendingJob,
    PreemptionRecord,
    PreemptJob,
    RunningJob,
    Tenant,
)
from greengpu.policy import PreemptionPolicy, SchedulerPolicy
from greengpu.sched.core import schedule
from greengpu.sched.preemption import last_checkpoint_s, lost_gpu_s, running_by_tenant, victim_rank


def victim(job_id: str = "v", start_s: float = 1000.0, gpus: int = 2, interval_s: float | None = None,
           last_s: float | None = None, priority: int = 0, node: str = "n0000", first_gpu: int = 0,
           tenant: str = "t", **kwargs: object) -> RunningJob:
    return RunningJob(job(job_id, gpus=gpus, priority=priority, tenant=tenant, checkpoint_interval_s=interval_s),
                      tuple(GpuSlot(node, first_gpu + g) for g in range(gpus)), start_s, start_s + 100_000,
                      last_checkpoint_s=last_s, **kwargs)  # type: ignore[arg-type]


def test_the_last_checkpoint() -> None:
    assert last_checkpoint_s(victim(), 5000.0) == 1000.0  # never checkpoints: all since the start is lost
    assert last_checkpoint_s(victim(interval_s=900.0), 5000.0) == 1000.0 + 4 * 900.0  # 4 whole intervals
    assert last_checkpoint_s(victim(interval_s=900.0), 1899.0) == 1000.0
    assert last_checkpoint_s(victim(interval_s=900.0), 1900.0) == 1900.0
    assert last_checkpoint_s(victim(interval_s=900.0), 500.0) == 1000.0  # a clock behind the start
    # A checkpoint the body saw wins over the interval, but never before the start or after now.
    assert last_checkpoint_s(victim(interval_s=900.0, last_s=4200.0), 5000.0) == 4200.0
    assert last_checkpoint_s(victim(last_s=200.0), 5000.0) == 1000.0
    assert last_checkpoint_s(victim(last_s=9000.0), 5000.0) == 5000.0


def test_lost_work_is_gpu_seconds_since_the_last_checkpoint() -> None:
    assert lost_gpu_s(victim(gpus=2), 5000.0) == 8000.0
    assert lost_gpu_s(victim(gpus=2, interval_s=900.0), 5000.0) == 2 * 400.0
    assert lost_gpu_s(victim(gpus=2), 900.0) == 0.0


def test_victims_rank_by_priority_then_lost_work_or_age() -> None:
    cheap = victim("cheap", start_s=4000.0)  # 1000 s x 2 GPUs lost at t=5000
    dear = victim("dear", start_s=1000.0)
    important = victim("important", start_s=4900.0, priority=3)
    now = 5000.0
    assert sorted([dear, important, cheap], key=lambda v: victim_rank(v, now, "least-lost-work")) == \
        [cheap, dear, important]
    assert victim_rank(cheap, now, "least-lost-work") == (0, 2000.0, "cheap")
    assert victim_rank(cheap, now, "newest-first") == (0, -4000.0, "cheap")
    older = victim("older", start_s=3000.0, interval_s=100.0)  # little lost, but older
    assert sorted([older, cheap], key=lambda v: victim_rank(v, now, "newest-first")) == [cheap, older]
    assert sorted([older, cheap], key=lambda v: victim_rank(v, now, "least-lost-work")) == [older, cheap]


def test_running_jobs_grouped_by_tenant_in_order() -> None:
    a1, b1, a2 = victim("a1", tenant="a"), victim("b1", tenant="b"), victim("a2", tenant="a")
    memo: list[object] = []
    running = (a1, b1, a2)
    grouped = running_by_tenant(running, memo)
    assert grouped == {"a": [a1, a2], "b": [b1]} and memo[0] is running
    assert running_by_tenant(running, memo) is grouped  # the same tuple again: kept
    assert running_by_tenant((a1, b1, a2), memo) is not grouped  # another tuple: grouped again
    assert running_by_tenant([a2], memo) == {"a": [a2]} and memo[0] == (a1, b1, a2)  # a list is never kept
    assert running_by_tenant((a2,)) == {"a": [a2]} and memo[0] == (a1, b1, a2)  # no memo: nothing kept


CLUSTER = make_cluster([(1, node_type(4), "r")])


def snapshot(*running: RunningJob, now_s: float = 10_000.0) -> ClusterSnapshot:
    return ClusterSnapshot(time_s=now_s, cluster=CLUSTER, running=running,
                           pending=(PendingJob(job("hi", gpus=2, priority=5)),))


def preempted(snap: ClusterSnapshot, policy: PreemptionPolicy) -> list[str]:
    actions = schedule(snap, SchedulerPolicy(preemption=policy))
    return sorted(a.job_id for a in actions if isinstance(a, PreemptJob | KillJob))


def test_who_may_yield() -> None:
    base = PreemptionPolicy(min_runtime_s=600.0, grace_s=60.0, max_per_job_per_hour=1)
    low = victim("low", start_s=0.0, first_gpu=0)
    other = victim("other", start_s=0.0, first_gpu=2)
    assert preempted(snapshot(low, other), base) == ["low"]  # lower id of two equal victims
    # Too young (ran 599 s of the 600 required): not a victim; the other one is.
    assert preempted(snapshot(replace(low, start_time_s=9401.0), other), base) == ["other"]
    assert preempted(snapshot(replace(low, start_time_s=9400.0), other), base) == ["low"]
    # Already asked to stop: not asked again, and the job does not count as a second victim.
    assert preempted(snapshot(replace(low, preempt_signalled_s=9990.0), other), base) == ["other"]
    # Cannot be interrupted.
    firm = RunningJob(replace(low.job, interruptible=False), low.slots, 0.0, 100_000.0)
    assert preempted(snapshot(firm, other), base) == ["other"]
    # Preempted once in the last hour (the cap is 1): spared; an older preemption does not count.
    recent = replace(low, preemptions=(PreemptionRecord(9000.0, "x"),))
    old = replace(low, preemptions=(PreemptionRecord(6400.0, "x"),))
    assert preempted(snapshot(recent, other), base) == ["other"]
    assert preempted(snapshot(old, other), base) == ["low"]
    # A cap of 0 preemptions per hour: nothing ever yields.
    assert preempted(snapshot(low, other), replace(base, max_per_job_per_hour=0)) == []


def test_a_tenants_jobs_of_equal_priority_never_preempt_each_other() -> None:
    base = PreemptionPolicy(min_runtime_s=0.0)
    same = victim("same", start_s=0.0, priority=5, gpus=4)
    snap = replace(snapshot(same), pending=(PendingJob(job("hi", gpus=2, priority=5)),))
    assert preempted(snap, base) == []
    lower = replace(snap, running=(victim("lower", start_s=0.0, priority=4, gpus=4),))
    assert preempted(lower, base) == ["lower"]
    assert preempted(lower, replace(base, priority_preemption=False)) == []


def test_a_borrower_yields_to_higher_priority_or_to_a_tenant_reclaiming_its_quota() -> None:
    cluster = make_cluster([(1, node_type(8), "r")], [Tenant("owner", quota_gpus=4), Tenant("borrower")])
    borrowed = victim("borrowed", start_s=0.0, gpus=8, tenant="borrower", priority=9)
    pending = PendingJob(job("mine", gpus=2, tenant="owner", priority=0))
    snap = ClusterSnapshot(time_s=10_000.0, cluster=cluster, running=(borrowed,), pending=(pending,))
    base = PreemptionPolicy(min_runtime_s=0.0)
    assert preempted(snap, base) == ["borrowed"]  # reclaim: priority does not matter
    assert preempted(snap, replace(base, reclaim=False)) == []  # nor priority: 0 < 9
    # 6 GPUs would fit once the borrower leaves, but go beyond owner's quota of 4: not a reclaim.
    over_quota = replace(snap, pending=(PendingJob(job("more", gpus=6, tenant="owner", priority=0)),))
    assert preempted(over_quota, base) == []
    urgent = replace(snap, pending=(PendingJob(job("more", gpus=6, tenant="owner", priority=10)),))
    assert preempted(urgent, base) == ["borrowed"]  # higher priority than a borrower's job: it yields


def test_a_per_model_lender_yields_only_what_it_borrows_on_that_model() -> None:
    # b's quota is 4 A100s and it holds 8 one-GPU jobs on the A100 node: it borrows 4 there. a (quota 4,
    # holding nothing) reclaims 4: b gives back exactly its 4 borrowed GPUs.
    tenants = [Tenant("a", quota_gpus=4), Tenant("b", quota_gpus_by_model={"A100": 4})]
    cluster = make_cluster([(1, node_type(8, "A100"), "r")], tenants)
    running = tuple(victim(f"b{g}", start_s=float(g), gpus=1, first_gpu=g, tenant="b") for g in range(8))
    snap = ClusterSnapshot(time_s=10_000.0, cluster=cluster, running=running,
                           pending=(PendingJob(job("mine", gpus=4, tenant="a")),))
    victims = preempted(snap, PreemptionPolicy(min_runtime_s=0.0))
    assert len(victims) == 4 and all(v.startswith("b") for v in victims)
    # The same with 5: b would drop below its A100 quota: nobody yields.
    five = replace(snap, pending=(PendingJob(job("mine", gpus=5, tenant="a")),))
    assert preempted(five, PreemptionPolicy(min_runtime_s=0.0)) == []


def test_a_lender_over_its_quota_by_one_milli_gpu_still_lends_it() -> None:
    tenants = [Tenant("a", quota_gpus=1), Tenant("b", quota_gpus=0.999), Tenant("c", quota_gpus=1)]
    cluster = make_cluster([(1, node_type(2), "r")], tenants)
    running = (victim("b1", start_s=0.0, gpus=1, first_gpu=0, tenant="b"),
               victim("c1", start_s=0.0, gpus=1, first_gpu=1, tenant="c"))
    snap = ClusterSnapshot(time_s=10_000.0, cluster=cluster, running=running,
                           pending=(PendingJob(job("mine", gpus=1, tenant="a")),))
    assert preempted(snap, PreemptionPolicy(min_runtime_s=0.0)) == ["b1"]


def test_a_shared_gpu_freed_by_a_victim_counts_with_what_was_already_free() -> None:
    # GPU 0 holds the victim's half and another job's quarter: a 0.75 request fits exactly once the
    # victim leaves (0.25 free + 0.5 freed). The other GPUs are full.
    cluster = make_cluster([(1, node_type(2), "r")])
    half = RunningJob(job("half", gpus=0.5, priority=0), (GpuSlot("n0000", 0, 500),), 0.0, 100_000.0)
    quarter = RunningJob(job("quarter", gpus=0.25, priority=9), (GpuSlot("n0000", 0, 250),), 0.0, 100_000.0)
    full = RunningJob(job("full", gpus=1, priority=9), (GpuSlot("n0000", 1),), 0.0, 100_000.0)
    snap = ClusterSnapshot(time_s=10_000.0, cluster=cluster, running=(half, quarter, full),
                           pending=(PendingJob(job("hi", gpus=0.75, priority=5)),))
    assert preempted(snap, PreemptionPolicy(min_runtime_s=0.0)) == ["half"]


def test_victims_the_job_turns_out_not_to_need_are_dropped() -> None:
    # One 5-GPU node, full: v1 (1 GPU, least work lost), v2 and v3 (2 GPUs each). A 4-GPU job: taken in
    # rank order v1, v2, v3 fit it, and then v1 is not needed: v2 and v3 alone free 4.
    cluster = make_cluster([(1, node_type(5), "r")])
    running = (victim("v1", start_s=9000.0, gpus=1, first_gpu=0), victim("v2", start_s=8000.0, gpus=2, first_gpu=1),
               victim("v3", start_s=7000.0, gpus=2, first_gpu=3))
    snap = ClusterSnapshot(time_s=10_000.0, cluster=cluster, running=running,
                           pending=(PendingJob(job("hi", gpus=4, priority=5)),))
    assert preempted(snap, PreemptionPolicy(min_runtime_s=0.0)) == ["v2", "v3"]


def test_a_gang_preempts_on_as_few_nodes_as_it_needs_and_counts_free_nodes() -> None:
    # Three 8-GPU nodes: n0000 free, n0001 full of low-priority jobs, n0002 drained with low-priority
    # jobs (no new work goes there, so evicting them would not help). A 16-GPU gang of higher priority
    # needs two whole nodes: the free one and n0001's.
    cluster = make_cluster([(3, node_type(8), "r")])
    low = tuple(victim(f"n1-{g}", start_s=0.0, gpus=1, first_gpu=g, node="n0001") for g in range(8))
    drained = tuple(victim(f"n2-{g}", start_s=0.0, gpus=1, first_gpu=g, node="n0002") for g in range(8))
    snap = ClusterSnapshot(time_s=10_000.0, cluster=cluster, running=low + drained,
                           pending=(PendingJob(job("gang", gpus=16, priority=5)),),
                           node_states={"n0002": NodeState(drained=True)})
    assert preempted(snap, PreemptionPolicy(min_runtime_s=0.0)) == sorted(f"n1-{g}" for g in range(8))
    # Without the free node the gang needs two nodes of victims, and only one is usable: nobody is evicted.
    busy_free = replace(snap, running=snap.running + tuple(
        victim(f"n0-{g}", start_s=0.0, gpus=1, first_gpu=g, node="n0000", priority=9) for g in range(8)))
    assert preempted(busy_free, PreemptionPolicy(min_runtime_s=0.0)) == []


def test_a_tenant_within_its_quota_preempts_its_own_lower_priority_jobs() -> None:
    cluster = make_cluster([(1, node_type(4), "r")], [Tenant("t", quota_gpus=8)])
    mine = victim("mine-low", start_s=0.0, gpus=4, priority=1)
    snap = ClusterSnapshot(time_s=10_000.0, cluster=cluster, running=(mine,),
                           pending=(PendingJob(job("mine-high", gpus=2, priority=4)),))
    assert preempted(snap, PreemptionPolicy(min_runtime_s=0.0)) == ["mine-low"]


def test_a_per_model_tenant_reclaims_its_model_quota() -> None:
    tenants = [Tenant("a", quota_gpus_by_model={"A100": 4}), Tenant("b")]
    cluster = make_cluster([(1, node_type(4, "A100"), "r")], tenants)
    snap = ClusterSnapshot(time_s=10_000.0, cluster=cluster,
                           running=(victim("b1", start_s=0.0, gpus=4, tenant="b", priority=9),),
                           pending=(PendingJob(job("mine", gpus=2, tenant="a", priority=0)),))
    assert preempted(snap, PreemptionPolicy(min_runtime_s=0.0)) == ["b1"]  # a reclaims: priority aside


def test_the_hourly_cap_counts_each_recent_preemption_once() -> None:
    cap_two = PreemptionPolicy(min_runtime_s=0.0, max_per_job_per_hour=2)
    once = replace(victim("low", start_s=0.0, first_gpu=0, gpus=4), preemptions=(PreemptionRecord(9000.0, "x"),))
    assert preempted(snapshot(once), cap_two) == ["low"]
    twice = replace(once, preemptions=(PreemptionRecord(9000.0, "x"), PreemptionRecord(9500.0, "y")))
    assert preempted(snapshot(twice), cap_two) == []


def test_the_first_checkpoint_is_not_before_one_interval() -> None:
    assert last_checkpoint_s(victim(start_s=1000.0, interval_s=1.0), 1000.5) == 1000.0


def full_node(node: str, prefix: str, start_s: float = 0.0, priority: int = 0, tenant: str = "t",
              interval_s: float | None = None) -> tuple[RunningJob, ...]:
    return tuple(victim(f"{prefix}{g}", start_s=start_s, gpus=1, first_gpu=g, node=node, priority=priority,
                        tenant=tenant, interval_s=interval_s) for g in range(8))


def test_a_gang_takes_free_nodes_first_then_the_cheapest_victims_by_node_order_on_ties() -> None:
    # 4 nodes: n0000 free; n0001 priority-3 victims; n0002 and n0003 priority-0 victims, identical.
    # A 2-node gang of priority 5: the free node and n0002 (cheapest, lower index than its twin).
    cluster = make_cluster([(4, node_type(8), "r")])
    running = full_node("n0001", "dear", priority=3) + full_node("n0002", "x") + full_node("n0003", "y")
    snap = ClusterSnapshot(time_s=10_000.0, cluster=cluster, running=running,
                           pending=(PendingJob(job("gang", gpus=16, priority=5)),))
    assert preempted(snap, PreemptionPolicy(min_runtime_s=0.0)) == sorted(f"x{g}" for g in range(8))
    # A 3-node gang: both free-or-cheap nodes and then n0003, never the dearer n0001.
    three = replace(snap, pending=(PendingJob(job("gang", gpus=24, priority=5)),))
    assert preempted(three, PreemptionPolicy(min_runtime_s=0.0)) == \
        sorted([f"x{g}" for g in range(8)] + [f"y{g}" for g in range(8)])


@pytest.mark.parametrize(("order", "expected_prefix"), [("least-lost-work", "old"), ("newest-first", "new")])
def test_the_node_whose_victims_cost_least_is_chosen_by_the_policys_order(order: str, expected_prefix: str) -> None:
    # n0000: started at 9000, never checkpoints (1000 s x 8 GPUs lost); n0001: started at 1000, checkpoints
    # every 100 s (little lost). Least lost work: n0001's; newest first: n0000's.
    cluster = make_cluster([(2, node_type(8), "r")])
    running = full_node("n0000", "new", start_s=9000.0) + full_node("n0001", "old", start_s=1000.0, interval_s=100.0)
    snap = ClusterSnapshot(time_s=10_000.0, cluster=cluster, running=running,
                           pending=(PendingJob(job("hi", gpus=8, priority=5)),))
    victims = preempted(snap, PreemptionPolicy(min_runtime_s=0.0, victim_order=order))
    assert victims == sorted(f"{expected_prefix}{g}" for g in range(8))


def test_only_strictly_lower_priority_jobs_of_the_same_tenant_yield() -> None:
    cluster = make_cluster([(1, node_type(2), "r")], [Tenant("t", quota_gpus=2)])
    running = (victim("p1", start_s=0.0, gpus=1, first_gpu=0, priority=1),
               victim("p5", start_s=0.0, gpus=1, first_gpu=1, priority=5))
    snap = ClusterSnapshot(time_s=10_000.0, cluster=cluster, running=running,
                           pending=(PendingJob(job("hi", gpus=2, priority=5)),))
    assert preempted(snap, PreemptionPolicy(min_runtime_s=0.0)) == []  # p5 is an equal: p1 alone is not enough


def test_a_reclaiming_tenants_own_jobs_listed_first_do_not_stop_the_search_among_borrowers() -> None:
    tenants = [Tenant("owner", quota_gpus=4), Tenant("borrower")]
    cluster = make_cluster([(1, node_type(4), "r")], tenants)
    running = (victim("own", start_s=0.0, gpus=1, first_gpu=0, tenant="owner", priority=1),
               victim("b1", start_s=0.0, gpus=3, first_gpu=1, tenant="borrower"))
    snap = ClusterSnapshot(time_s=10_000.0, cluster=cluster, running=running,
                           pending=(PendingJob(job("mine", gpus=3, tenant="owner", priority=1)),))
    assert preempted(snap, PreemptionPolicy(min_runtime_s=0.0)) == ["b1"]
    higher = replace(snap, pending=(PendingJob(job("mine", gpus=4, tenant="owner", priority=3)),))
    assert preempted(higher, PreemptionPolicy(min_runtime_s=0.0)) == ["b1", "own"]


def test_two_reclaims_in_one_cycle_take_different_victims() -> None:
    cluster = make_cluster([(2, node_type(8), "r")], [Tenant("owner", quota_gpus=8), Tenant("borrower")])
    running = full_node("n0000", "b", tenant="borrower") + full_node("n0001", "c", tenant="borrower")
    snap = ClusterSnapshot(time_s=10_000.0, cluster=cluster, running=running,
                           pending=(PendingJob(job("m1", gpus=1, tenant="owner")),
                                    PendingJob(job("m2", gpus=1, tenant="owner"))))
    actions = schedule(snap, SchedulerPolicy(preemption=PreemptionPolicy(min_runtime_s=0.0, grace_s=60.0)))
    signals = [a for a in actions if isinstance(a, PreemptJob)]
    assert len(signals) == 2 and len({a.job_id for a in signals}) == 2
    assert {a.for_job_id for a in signals} == {"m1", "m2"}


def test_a_per_model_lender_yields_on_the_model_it_borrows_even_after_one_it_does_not() -> None:
    # b: quota 1 A100 and 1 V100. It holds 1 A100 (at quota) and 2 V100 (1 borrowed). a reclaims a V100.
    tenants = [Tenant("a", quota_gpus=1), Tenant("b", quota_gpus_by_model={"A100": 1, "V100": 1})]
    cluster = make_cluster([(1, node_type(2, "A100"), "r"), (1, node_type(2, "V100"), "r")], tenants)
    running = (victim("bA", start_s=0.0, gpus=1, first_gpu=0, node="n0000", tenant="b"),
               victim("bV1", start_s=0.0, gpus=1, first_gpu=0, node="n0001", tenant="b"),
               victim("bV2", start_s=100.0, gpus=1, first_gpu=1, node="n0001", tenant="b"))
    snap = ClusterSnapshot(time_s=10_000.0, cluster=cluster, running=running,
                           pending=(PendingJob(job("mine", gpus=1, tenant="a", gpu_types=frozenset({"V100"}))),))
    victims = preempted(snap, PreemptionPolicy(min_runtime_s=0.0))
    assert len(victims) == 1 and victims[0] in {"bV1", "bV2"}


def test_a_node_where_victims_cannot_make_room_does_not_end_the_search() -> None:
    # n0000: one low-priority 1-GPU job among priority-9 jobs (evicting it frees 1 GPU, not 4);
    # n0001: eight low-priority 1-GPU jobs. A 4-GPU job of priority 5 takes four of n0001's.
    cluster = make_cluster([(2, node_type(8), "r")])
    running = (victim("lone", start_s=0.0, gpus=1, first_gpu=0, node="n0000"),
               victim("keep", start_s=0.0, gpus=7, first_gpu=1, node="n0000", priority=9))
    running += full_node("n0001", "v")
    snap = ClusterSnapshot(time_s=10_000.0, cluster=cluster, running=running,
                           pending=(PendingJob(job("hi", gpus=4, priority=5)),))
    victims = preempted(snap, PreemptionPolicy(min_runtime_s=0.0))
    assert len(victims) == 4 and all(v.startswith("v") for v in victims)
