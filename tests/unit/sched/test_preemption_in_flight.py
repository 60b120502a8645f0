"""Reclaim counts the preemptions already under way: no lender below its quota, no claimant above it.

A victim keeps running (and its tenant keeps its GPUs on the books) for its checkpoint grace, and a
claimant's job holds no GPUs until its victims are gone. Each victim search must see both, or every
search during a grace takes the same surplus again: that was the preemption churn under overload.
"""

from __future__ import annotations

from dataclasses import replace

from schedkit import job, make_cluster, node_type

from greengpu.model import ClusterSnapshot, GpuSlot, KillJob, PendingJob, PreemptJob, RunningJob, Tenant
from greengpu.policy import PreemptionPolicy, SchedulerPolicy
from greengpu.sched.core import schedule

NOW_S = 10_000.0
POLICY = SchedulerPolicy(preemption=PreemptionPolicy(min_runtime_s=0.0, grace_s=120.0))


def one_gpu(job_id: str, tenant: str, gpu: int, node: str = "n0000", **kwargs: object) -> RunningJob:
    return RunningJob(job(job_id, tenant=tenant), (GpuSlot(node, gpu),), 0.0, 100_000.0,
                      **kwargs)  # type: ignore[arg-type]


def waiting(*job_ids: str, tenant: str = "a") -> tuple[PendingJob, ...]:
    return tuple(PendingJob(job(j, tenant=tenant, submit_time_s=float(n))) for n, j in enumerate(job_ids))


def stopped(snap: ClusterSnapshot) -> list[tuple[str, str]]:
    """(victim, beneficiary) of every preemption or kill the cycle decides."""
    actions = schedule(snap, POLICY)
    return sorted((a.job_id, a.for_job_id or "") for a in actions if isinstance(a, PreemptJob | KillJob))


# Two full 4-GPU nodes (a preemption holds its node for its beneficiary, so a second claimant looks at
# the other one). a (quota 4) holds nothing and waits; b (quota 4) holds 5 one-GPU jobs, borrowing one;
# c (quota 3) holds 3, within its quota, so only b can lend.
TENANTS = [Tenant("a", quota_gpus=4), Tenant("b", quota_gpus=4), Tenant("c", quota_gpus=3)]
CLUSTER = make_cluster([(2, node_type(4), "r")], TENANTS)
SPREAD = [("n0000", 0), ("n0000", 1), ("n0000", 2), ("n0001", 0), ("n0001", 1), ("n0000", 3), ("n0001", 2),
          ("n0001", 3)]
B_JOBS = tuple(one_gpu(f"b{g}", "b", SPREAD[g][1], SPREAD[g][0]) for g in range(5))
C_JOBS = tuple(one_gpu(f"c{g}", "c", SPREAD[5 + g][1], SPREAD[5 + g][0]) for g in range(3))


def test_a_lender_gives_back_only_what_it_borrows_in_one_cycle() -> None:
    snap = ClusterSnapshot(time_s=NOW_S, cluster=CLUSTER, running=B_JOBS + C_JOBS, pending=waiting("a1", "a2"))
    victims = stopped(snap)
    assert len(victims) == 1 and victims[0][0].startswith("b") and victims[0][1] == "a1"


def test_a_victim_still_in_its_grace_counts_as_already_given_back() -> None:
    # b0 was asked to stop for a1 a minute ago and still runs: b borrows nothing more. a2 waits.
    leaving = RunningJob(B_JOBS[0].job, B_JOBS[0].slots, 0.0, 100_000.0,
                         preempt_signalled_s=NOW_S - 60.0, preempted_for="a1")
    snap = ClusterSnapshot(time_s=NOW_S, cluster=CLUSTER, running=(leaving,) + B_JOBS[1:] + C_JOBS,
                           pending=waiting("a1", "a2"))
    assert stopped(snap) == []
    # Once its grace is over it is killed for a1 (and uncharged): still nobody for a2.
    late = ClusterSnapshot(time_s=NOW_S + 61.0, cluster=CLUSTER, running=snap.running, pending=snap.pending)
    assert stopped(late) == [("b0", "a1")]
    # Without the preemption under way b still borrows one GPU, and lends it to the first job in line.
    fresh = ClusterSnapshot(time_s=NOW_S, cluster=CLUSTER, running=B_JOBS + C_JOBS, pending=waiting("a2"))
    assert [v for v, _ in stopped(fresh)] == ["b0"]


# Two full 4-GPU nodes held by b (no quota: all borrowed, 7 GPUs) and a (quota 2, one GPU): a has one GPU
# of its quota left, however many one-GPU jobs it queues.
CLAIM = make_cluster([(2, node_type(4), "r")], [Tenant("a", quota_gpus=2), Tenant("b")])
A_RUNS = one_gpu("a0", "a", 0)
B_BORROWS = tuple(one_gpu(f"b{g}", "b", g % 4, f"n000{g // 4}") for g in range(1, 8))


def test_a_claimant_reclaims_only_up_to_its_quota_in_one_cycle() -> None:
    snap = ClusterSnapshot(time_s=NOW_S, cluster=CLAIM, running=(A_RUNS,) + B_BORROWS,
                           pending=waiting("a1", "a2", "a3"))
    victims = stopped(snap)
    assert len(victims) == 1 and victims[0][1] == "a1"


def test_a_claimant_counts_the_victims_already_stopping_for_its_jobs() -> None:
    leaving = RunningJob(B_BORROWS[0].job, B_BORROWS[0].slots, 0.0, 100_000.0,
                         preempt_signalled_s=NOW_S - 60.0, preempted_for="a1")
    snap = ClusterSnapshot(time_s=NOW_S, cluster=CLAIM, running=(A_RUNS, leaving) + B_BORROWS[1:],
                           pending=waiting("a1", "a2", "a3"))
    assert stopped(snap) == []
    # The job it stopped for has left the queue (the preemption is withdrawn): a may reclaim again.
    gone = ClusterSnapshot(time_s=NOW_S, cluster=CLAIM, running=snap.running, pending=waiting("a2", "a3"))
    assert [b for _, b in stopped(gone)] == ["a2"]


# One 4-GPU node: lab (quota 2, may not borrow for jobs that cannot be preempted) runs two one-GPU
# training jobs of priority 0; other (no quota) runs two more. An interactive notebook of lab, priority
# 1 and not interruptible, would take lab past its quota: its own group's training is in its way.
QUOTA = make_cluster([(1, node_type(4), "r")], [Tenant("lab", quota_gpus=2), Tenant("other")])
TRAINING = (one_gpu("t-old", "lab", 0), RunningJob(job("t-new", tenant="lab"), (GpuSlot("n0000", 1),), 5_000.0,
                                                   100_000.0))
OTHERS = (one_gpu("o0", "other", 2), one_gpu("o1", "other", 3))
NOTEBOOK = PendingJob(job("notebook", tenant="lab", priority=1, interruptible=False, job_class="interactive"))


def test_a_job_its_tenants_quota_blocks_preempts_its_tenants_lower_priority_work() -> None:
    snap = ClusterSnapshot(time_s=NOW_S, cluster=QUOTA, running=TRAINING + OTHERS, pending=(NOTEBOOK,))
    # One victim is enough (the least work lost: the newer job); other's jobs do not count against lab's quota.
    assert stopped(snap) == [("t-new", "notebook")]
    # While that victim checkpoints, the notebook waits for it and stops nobody else.
    leaving = RunningJob(TRAINING[1].job, TRAINING[1].slots, 5_000.0, 100_000.0,
                         preempt_signalled_s=NOW_S, preempted_for="notebook")
    during = ClusterSnapshot(time_s=NOW_S + 60.0, cluster=QUOTA, running=(TRAINING[0], leaving) + OTHERS,
                             pending=(NOTEBOOK,))
    assert stopped(during) == []
    # Equal priority: nobody yields, the job waits for its quota as before.
    peer = replace(NOTEBOOK, job=replace(NOTEBOOK.job, priority=0))
    assert stopped(replace(snap, pending=(peer,))) == []
    # Without priority preemption in the policy, nobody yields either.
    no_priority = SchedulerPolicy(preemption=PreemptionPolicy(min_runtime_s=0.0, grace_s=120.0,
                                                              priority_preemption=False))
    assert not [a for a in schedule(snap, no_priority) if isinstance(a, PreemptJob | KillJob)]
