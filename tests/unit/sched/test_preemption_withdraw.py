"""A preemption is withdrawn, not carried out, once the job it was for no longer waits."""

from __future__ import annotations

from schedkit import job, make_cluster, node_type

from greengpu.model import ClusterSnapshot, GpuSlot, KillJob, PendingJob, RunningJob
from greengpu.policy import SchedulerPolicy
from greengpu.sched.core import schedule_cycle

X8 = node_type(8)


def signalled_victim(for_job_id: str, signalled_s: float) -> RunningJob:
    return RunningJob(job=job("victim", gpus=8, tenant="lender", duration_s=36_000),
                      slots=tuple(GpuSlot("n0000", g) for g in range(8)), start_time_s=0.0, expected_end_s=36_000.0,
                      preempt_signalled_s=signalled_s, preempted_for=for_job_id)


def beneficiary_running_elsewhere() -> RunningJob:
    return RunningJob(job=job("needy", gpus=8, tenant="owner", duration_s=3_600),
                      slots=tuple(GpuSlot("n0001", g) for g in range(8)), start_time_s=900.0, expected_end_s=4_500.0)


def test_a_victim_whose_beneficiary_started_elsewhere_is_not_killed() -> None:
    cluster = make_cluster([(2, X8, "r")])
    snapshot = ClusterSnapshot(time_s=1_000.0, cluster=cluster,
                               running=(signalled_victim("needy", 800.0), beneficiary_running_elsewhere()))
    result = schedule_cycle(snapshot, SchedulerPolicy(), incremental=False)  # grace (120 s) is over
    assert not any(isinstance(a, KillJob) for a in result.actions)
    assert result.withdrawn == ("victim",)


def test_a_victim_whose_beneficiary_still_waits_is_killed_when_its_grace_ends() -> None:
    cluster = make_cluster([(2, X8, "r")])
    other = RunningJob(job=job("other", gpus=8, tenant="lender", duration_s=36_000),
                       slots=tuple(GpuSlot("n0001", g) for g in range(8)), start_time_s=0.0, expected_end_s=36_000.0)
    waiting = PendingJob(job("needy", gpus=8, tenant="owner", duration_s=3_600))
    during = ClusterSnapshot(time_s=850.0, cluster=cluster, running=(signalled_victim("needy", 800.0), other),
                             pending=(waiting,))
    early = schedule_cycle(during, SchedulerPolicy(), incremental=False)
    assert early.withdrawn == () and not any(isinstance(a, KillJob) for a in early.actions)
    after = ClusterSnapshot(time_s=1_000.0, cluster=cluster, running=during.running, pending=(waiting,))
    result = schedule_cycle(after, SchedulerPolicy(), incremental=False)
    assert [a.job_id for a in result.actions if isinstance(a, KillJob)] == ["victim"]
    assert result.withdrawn == ()
