"""A job that starts gives up the rest of the nodes it held, and jobs decided after it may use them in the same
cycle: what was found of placements while those nodes were held (greengpu.sched.cycle_state, the failure
frontier of request shapes) is forgotten when the holds go."""

from __future__ import annotations

from schedkit import job, make_cluster, node_type, placed

from greengpu.model import ClusterSnapshot, GpuSlot, PendingJob, RunningJob
from greengpu.policy import BackfillPolicy, PreemptionPolicy, SchedulerPolicy
from greengpu.sched.core import schedule_cycle
from greengpu.sched.waits import WaitReason

NOW_S = 10_000.0
POLICY = SchedulerPolicy(preemption=PreemptionPolicy(max_attempts_per_cycle=0, grace_s=600.0),
                         backfill=BackfillPolicy(enabled=False))


def _victim(job_id: str, node: str) -> RunningJob:
    """Two GPUs of a 4-GPU node, asked to stop for "held" a minute ago (its grace is not over)."""
    return RunningJob(job(job_id, gpus=2, priority=0), (GpuSlot(node, 0), GpuSlot(node, 1)), start_time_s=0.0,
                      expected_end_s=99_999.0, preempt_signalled_s=NOW_S - 60.0, preempted_for="held")


def _snapshot() -> ClusterSnapshot:
    """n0 and n3 each have 2 GPUs free and a victim of "held" on the other two: "held" holds both nodes.
    n1 is busy; n2 has one GPU free, which no 2-GPU job can use (so the cluster is not full)."""
    cluster = make_cluster([(4, node_type(4), "d0")])
    running = (_victim("v0", "n0000"), _victim("v3", "n0003"),
               RunningJob(job("busy1", gpus=4), tuple(GpuSlot("n0001", g) for g in range(4)), 0.0, 99_999.0),
               RunningJob(job("busy2", gpus=3), tuple(GpuSlot("n0002", g) for g in range(3)), 0.0, 99_999.0))
    # Queue order: "first" (before "held", while both nodes are held), "held", then "after", alike to "first".
    pending = (PendingJob(job("first", gpus=2, priority=9, submit_time_s=0.0)),
               PendingJob(job("held", gpus=2, priority=5, submit_time_s=0.0)),
               PendingJob(job("after", gpus=2, priority=1, submit_time_s=0.0)))
    return ClusterSnapshot(time_s=NOW_S, cluster=cluster, running=running, pending=pending)


def test_a_job_after_the_held_one_starts_on_the_node_it_gave_up() -> None:
    for incremental in (True, False):
        result = schedule_cycle(_snapshot(), POLICY, incremental=incremental)
        starts = {job_id: {s.node for s in a.slots} for job_id, a in placed(result.actions).items()}
        # "held" takes one of its nodes; "after" the other. "first" came while both were held.
        assert set(starts) == {"held", "after"}, (incremental, result.waits)
        assert starts["held"] | starts["after"] == {"n0000", "n0003"}
        assert result.waits["first"].reason is WaitReason.CAPACITY
