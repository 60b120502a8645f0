"""Carrying out actions on a snapshot: what placement, preemption and kills change, and what is refused."""

from __future__ import annotations

import pytest
from schedkit import job, make_cluster, node_type
from transitions import InvalidAction, apply_scheduler_actions, remaining_work

from greengpu.model import (
    ClusterSnapshot,
    GpuSlot,
    KillJob,
    PendingJob,
    PlaceJob,
    PreemptionRecord,
    PreemptJob,
    RunningJob,
)

CLUSTER = make_cluster([(1, node_type(2), "r")])


def running(job_id: str, gpu: int, units: int = 1000, start_s: float = 0.0, **kwargs: object) -> RunningJob:
    return RunningJob(job(job_id, gpus=units / 1000, duration_s=5000.0, **kwargs), (GpuSlot("n0000", gpu, units),),
                      start_s, start_s + 5000.0)


def test_a_placement_starts_the_job_now_for_its_duration() -> None:
    waiting = PendingJob(job("p", gpus=1, duration_s=700.0), preemptions=(PreemptionRecord(5.0, "x"),))
    snap = ClusterSnapshot(time_s=100.0, cluster=CLUSTER, pending=(waiting,))
    after = apply_scheduler_actions(snap, [PlaceJob("p", (GpuSlot("n0000", 1),))])
    assert after.pending == ()
    assert after.running == (RunningJob(waiting.job, (GpuSlot("n0000", 1),), 100.0, 800.0,
                                        preemptions=waiting.preemptions),)


def test_shares_of_one_gpu_may_add_up_to_one_gpu_and_no_more() -> None:
    snap = ClusterSnapshot(time_s=0.0, cluster=CLUSTER, running=(running("a", 0, 600),),
                           pending=(PendingJob(job("b", gpus=0.4)), PendingJob(job("c", gpus=0.001))))
    after = apply_scheduler_actions(snap, [PlaceJob("b", (GpuSlot("n0000", 0, 400),))])
    assert {r.job.job_id for r in after.running} == {"a", "b"}
    with pytest.raises(InvalidAction, match="^placement of c on taken GPU n0000:0$"):
        apply_scheduler_actions(after, [PlaceJob("c", (GpuSlot("n0000", 0, 1),))])
    with pytest.raises(InvalidAction, match="^placement of c on taken GPU n0000:0$"):  # in one batch too
        apply_scheduler_actions(snap, [PlaceJob("b", (GpuSlot("n0000", 0, 400),)),
                                       PlaceJob("c", (GpuSlot("n0000", 0, 1),))])


def test_impossible_actions_are_refused_by_name() -> None:
    snap = ClusterSnapshot(time_s=0.0, cluster=CLUSTER, running=(running("r", 0),), pending=(PendingJob(job("p")),))
    with pytest.raises(InvalidAction, match="^placement of r, which is not pending$"):
        apply_scheduler_actions(snap, [PlaceJob("r", (GpuSlot("n0000", 1),))])
    with pytest.raises(InvalidAction, match="^kill of p, which is not running$"):
        apply_scheduler_actions(snap, [KillJob("p", "test")])
    with pytest.raises(InvalidAction, match="^preemption of p, which is not running$"):
        apply_scheduler_actions(snap, [PreemptJob("p", "r", 60.0, "test")])
    # Two jobs on one whole GPU in one batch of actions.
    with pytest.raises(InvalidAction, match="^placement of p on taken GPU n0000:0$"):
        apply_scheduler_actions(snap, [PlaceJob("p", (GpuSlot("n0000", 0),))])


def test_a_preemption_signal_marks_the_victim_and_keeps_it_running() -> None:
    snap = ClusterSnapshot(time_s=50.0, cluster=CLUSTER, running=(running("v", 0),),
                           pending=(PendingJob(job("hi")),))
    after = apply_scheduler_actions(snap, [PreemptJob("v", "hi", 60.0, "test")])
    (victim,) = after.running
    assert (victim.preempt_signalled_s, victim.preempted_for) == (50.0, "hi")
    assert [p.job.job_id for p in after.pending] == ["hi"]


def test_a_kill_requeues_the_victim_with_its_saved_work_and_a_record_of_who_took_its_gpus() -> None:
    victim = running("v", 0, start_s=0.0, checkpoint_interval_s=1000.0)
    snap = ClusterSnapshot(time_s=2500.0, cluster=CLUSTER, running=(victim,),
                           pending=(PendingJob(job("hi", gpus=1)),))
    after = apply_scheduler_actions(snap, [KillJob("v", "grace over", for_job_id="hi"),
                                           PlaceJob("hi", (GpuSlot("n0000", 0),))])
    requeued = {p.job.job_id: p for p in after.pending}["v"]
    assert requeued.job.duration_s == 3000.0  # 2 checkpoints of 1000 s kept out of 5000 s
    assert requeued.preemptions == (PreemptionRecord(2500.0, "hi"),)
    assert [r.job.job_id for r in after.running] == ["hi"]  # its GPU was free for hi in the same batch
    assert {p.job.job_id for p in after.pending} == {"v"}


def test_a_kill_after_a_signal_credits_the_job_it_was_signalled_for() -> None:
    victim = RunningJob(job("v", gpus=1, duration_s=5000.0), (GpuSlot("n0000", 0),), 0.0, 5000.0,
                        preempt_signalled_s=100.0, preempted_for="hi",
                        preemptions=(PreemptionRecord(10.0, "old"),))
    snap = ClusterSnapshot(time_s=200.0, cluster=CLUSTER, running=(victim,), pending=(PendingJob(job("hi")),))
    after = apply_scheduler_actions(snap, [KillJob("v", "grace over")])
    pending = {p.job.job_id: p for p in after.pending}
    assert pending["v"].preemptions == (PreemptionRecord(10.0, "old"), PreemptionRecord(200.0, "hi"))
    plain = apply_scheduler_actions(
        ClusterSnapshot(time_s=200.0, cluster=CLUSTER, running=(running("w", 1),)), [KillJob("w", "deadline")])
    assert plain.pending[0].preemptions == ()  # a kill that preempts for nobody records nothing


def test_remaining_work_takes_off_what_the_last_checkpoint_saved_at_the_speed_it_ran() -> None:
    victim = running("v", 0, start_s=0.0, checkpoint_interval_s=1000.0)
    assert remaining_work(victim, 2500.0).duration_s == 3000.0
    assert remaining_work(victim, 2500.0, speed=0.5).duration_s == 4000.0  # 2000 s at half speed saved 1000
    assert remaining_work(victim, 999.0).duration_s == 5000.0
    assert remaining_work(victim, 10_000.0).duration_s == 1.0  # never less than a second
