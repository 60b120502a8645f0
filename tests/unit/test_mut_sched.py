"""Scheduler rules at edges the mutation run showed untested: the cycle length decides when an overdue
job's GPUs are expected back (and so what may backfill before a reservation), a gang too wide for the
sleeping nodes claims nothing, a fraction keeps its share when moved off a warning GPU, and the
membership-only union placement uses iterates and counts like a set."""

from __future__ import annotations

from schedkit import job, make_cluster, node_type, placed

from greengpu.model import ClusterSnapshot, GpuSlot, NodeState, PendingJob, PowerState, RunningJob
from greengpu.policy import BackfillPolicy, PreemptionPolicy, SchedulerPolicy
from greengpu.sched.core import schedule, schedule_cycle
from greengpu.sched.placement import _Either, place
from greengpu.sched.state import PlacementState
from greengpu.sched.waits import Wait, WaitReason
from greengpu.sched.wake import WakePlan

NO_PREEMPTION = SchedulerPolicy(preemption=PreemptionPolicy(enabled=False))


def overdue_half_node(small_duration_s: float) -> ClusterSnapshot:
    """One 8-GPU node at t = 600: a job on half of it was expected to end at 300, a whole-node job waits
    (it gets the reservation) and a half-node job of `small_duration_s` could backfill before it."""
    overdue = RunningJob(job("overdue", gpus=4, duration_s=300.0), tuple(GpuSlot("n0000", g) for g in range(4)),
                         0.0, 300.0)
    return ClusterSnapshot(time_s=600.0, cluster=make_cluster([(1, node_type(8), "r")]), running=(overdue,),
                           pending=(PendingJob(job("wide", gpus=8, priority=5)),
                                    PendingJob(job("small", gpus=4, duration_s=small_duration_s))))


def test_an_overdue_job_is_expected_back_one_cycle_later_so_only_jobs_that_short_backfill() -> None:
    # The reservation starts one cycle (interval_s) from now: a 90 s job fits a 120 s cycle, not a 60 s one.
    assert "small" in placed(schedule(overdue_half_node(90.0), NO_PREEMPTION, interval_s=120.0))
    assert "small" not in placed(schedule(overdue_half_node(90.0), NO_PREEMPTION, interval_s=60.0))
    # The default cycle is a minute: a job of exactly 60 s ends as the reservation starts, 60.5 s does not.
    assert "small" in placed(schedule(overdue_half_node(60.0), NO_PREEMPTION))
    assert "small" not in placed(schedule(overdue_half_node(60.5), NO_PREEMPTION))


def test_a_gang_wider_than_the_sleeping_nodes_claims_nothing() -> None:
    states = {"n0000": NodeState(PowerState.ASLEEP), "n0001": NodeState(PowerState.ASLEEP)}
    snapshot = ClusterSnapshot(time_s=0.0, cluster=make_cluster([(2, node_type(8), "r")]), node_states=states)
    plan = WakePlan(PlacementState(snapshot), states)
    assert not plan.claim(job("gang", gpus=24, gpus_per_node=8), ("A100",), set())
    assert plan.to_wake == {} and plan.free == {0: 8, 1: 8}


def test_a_fraction_moved_off_a_warning_gpu_keeps_its_share() -> None:
    # GPUs 0 and 1 of the only node are at warning: inference takes half of GPU 2, the first healthy one.
    snapshot = ClusterSnapshot(time_s=0.0, cluster=make_cluster([(1, node_type(4), "r")]))
    slots = place(PlacementState(snapshot), job("serve", gpus=0.5, job_class="inference"),
                  warning={0: frozenset({0, 1})})
    assert slots == (GpuSlot("n0000", 2, 500),)


def test_the_union_of_excluded_and_warning_nodes_iterates_and_counts_each_node_once() -> None:
    either = _Either({1, 2}, {2: frozenset({0}), 5: frozenset({1})})
    assert sorted(either) == [1, 2, 5] and len(either) == 3
    assert 5 in either and 3 not in either


def test_a_full_cluster_gives_every_job_it_skips_a_capacity_wait_cycle_after_cycle() -> None:
    # One 8-GPU node fully used; nothing to preempt or reserve: after the first blocked job the cycle
    # stops trying, and the jobs it skipped wait for capacity like the first.
    busy = RunningJob(job("busy", gpus=8, tenant="a"), tuple(GpuSlot("n0000", g) for g in range(8)), 0.0, 1e6)
    pending = tuple(PendingJob(job(f"p{i}", gpus=1 + i % 3, tenant="a" if i % 2 else "b")) for i in range(6))
    snapshot = ClusterSnapshot(time_s=100.0, cluster=make_cluster([(1, node_type(8), "r")]), running=(busy,),
                               pending=pending)
    policy = SchedulerPolicy(preemption=PreemptionPolicy(enabled=False), backfill=BackfillPolicy(enabled=False))
    for _ in range(2):
        result = schedule_cycle(snapshot, policy)
        assert result.actions == ()
        assert result.waits == {p.job.job_id: Wait(WaitReason.CAPACITY, p.job.tenant, ("A100",), p.job.whole_gpus)
                                for p in pending}
