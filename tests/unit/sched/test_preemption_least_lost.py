"""With victim_order least-lost-work, the victim set that destroys the least work wins across nodes;
how many jobs it stops only breaks ties (a job that does not checkpoint loses everything it ran)."""

from __future__ import annotations

from schedkit import job, make_cluster, node_type

from greengpu.model import ClusterSnapshot, GpuSlot, KillJob, PendingJob, PreemptJob, RunningJob, Tenant
from greengpu.policy import PreemptionPolicy, SchedulerPolicy
from greengpu.sched.core import schedule

NOW_S = 100_000.0
CLUSTER = make_cluster([(2, node_type(4), "r")], [Tenant("owner", quota_gpus=4), Tenant("borrower")])


def borrowed(job_id: str, node: str, gpus: int, started_s: float, first_gpu: int = 0) -> RunningJob:
    return RunningJob(job(job_id, gpus=gpus, tenant="borrower"),
                      tuple(GpuSlot(node, first_gpu + g) for g in range(gpus)), started_s, NOW_S + 50_000.0)


def victims(order: str) -> list[str]:
    # n0000: one 4-GPU job that has run 10 hours (40 GPU-hours lost if stopped); n0001: two 2-GPU jobs
    # that have run one hour (4 GPU-hours together). The owner reclaims 4 GPUs.
    running = (borrowed("long", "n0000", 4, NOW_S - 36_000.0), borrowed("short-a", "n0001", 2, NOW_S - 3_600.0),
               borrowed("short-b", "n0001", 2, NOW_S - 3_600.0, first_gpu=2))
    snap = ClusterSnapshot(time_s=NOW_S, cluster=CLUSTER, running=running,
                           pending=(PendingJob(job("mine", gpus=4, tenant="owner")),))
    policy = SchedulerPolicy(preemption=PreemptionPolicy(min_runtime_s=0.0, victim_order=order))
    return sorted(a.job_id for a in schedule(snap, policy) if isinstance(a, PreemptJob | KillJob))


def test_the_set_that_loses_least_work_wins_over_the_one_with_fewer_jobs() -> None:
    assert victims("least-lost-work") == ["short-a", "short-b"]


def test_newest_first_still_prefers_fewer_victims_then_the_newest() -> None:
    assert victims("newest-first") == ["long"]
