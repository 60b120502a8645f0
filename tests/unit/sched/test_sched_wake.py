"""The core's wake plan: which sleeping nodes a cycle wakes for jobs blocked on capacity."""

from __future__ import annotations

from schedkit import job, make_cluster, node_type

from greengpu.model import ClusterSnapshot, GpuSlot, NodeState, PendingJob, PlaceJob, PowerState, RunningJob, WakeNode
from greengpu.policy import SchedulerPolicy
from greengpu.sched.core import WAIT_CAPACITY, WAIT_WAKE, schedule_cycle

X8 = node_type(8)
X4 = node_type(4, name="a100x4")


def busy(job_id: str, node: str, gpus: int) -> RunningJob:
    return RunningJob(job=job(job_id, gpus=gpus, duration_s=36_000), slots=tuple(GpuSlot(node, g) for g in range(gpus)),
                      start_time_s=0.0, expected_end_s=36_000.0)


def cycle(cluster_groups: list[tuple[int, object, str]], running: list[RunningJob], pending: list[object],
          power: dict[str, PowerState]) -> tuple[list[str], dict[str, str], list[str]]:
    cluster = make_cluster(cluster_groups)  # type: ignore[arg-type]
    snapshot = ClusterSnapshot(
        time_s=100.0, cluster=cluster, running=tuple(running),
        pending=tuple(PendingJob(j) for j in pending),  # type: ignore[arg-type]
        node_states={name: NodeState(power=state, since_s=0.0) for name, state in power.items()})
    result = schedule_cycle(snapshot, SchedulerPolicy(), incremental=False)
    wakes = [a.node for a in result.actions if isinstance(a, WakeNode)]
    placed = [a.job_id for a in result.actions if isinstance(a, PlaceJob)]
    return wakes, dict(result.waiting), placed


def test_a_blocked_job_wakes_exactly_one_asleep_node_and_waits_for_it() -> None:
    wakes, waiting, placed = cycle([(3, X8, "r")], [busy("full", "n0000", 8)], [job("j", gpus=8)],
                                   {"n0001": PowerState.ASLEEP, "n0002": PowerState.ASLEEP})
    assert wakes == ["n0001"]
    assert waiting == {"j": WAIT_WAKE}
    assert placed == []


def test_a_node_already_waking_is_used_before_a_new_wake() -> None:
    wakes, waiting, _ = cycle([(3, X8, "r")], [busy("full", "n0000", 8)], [job("j", gpus=8)],
                              {"n0001": PowerState.ASLEEP, "n0002": PowerState.WAKING})
    assert wakes == []
    assert waiting == {"j": WAIT_WAKE}


def test_two_small_jobs_share_one_woken_node() -> None:
    wakes, waiting, _ = cycle([(3, X8, "r")], [busy("full", "n0000", 8)], [job("a", gpus=4), job("b", gpus=4)],
                              {"n0001": PowerState.ASLEEP, "n0002": PowerState.ASLEEP})
    assert wakes == ["n0001"]
    assert waiting == {"a": WAIT_WAKE, "b": WAIT_WAKE}


def test_claims_do_not_double_count_a_waking_node() -> None:
    # One waking node can hold one of the two 8-GPU jobs; the other needs a new wake.
    wakes, waiting, _ = cycle([(3, X8, "r")], [busy("full", "n0000", 8)], [job("a", gpus=8), job("b", gpus=8)],
                              {"n0001": PowerState.WAKING, "n0002": PowerState.ASLEEP})
    assert wakes == ["n0002"]
    assert waiting == {"a": WAIT_WAKE, "b": WAIT_WAKE}


def test_the_tightest_asleep_node_is_woken_and_an_eight_gpu_job_takes_one_whole_node() -> None:
    groups = [(1, X8, "r"), (2, X4, "r"), (1, X8, "r")]
    asleep = {"n0001": PowerState.ASLEEP, "n0002": PowerState.ASLEEP, "n0003": PowerState.ASLEEP}
    wakes, _, _ = cycle(groups, [busy("full", "n0000", 8)], [job("small", gpus=3)], asleep)
    assert wakes == ["n0001"]  # a 4-GPU node, not the 8-GPU one
    wakes, _, _ = cycle(groups, [busy("full", "n0000", 8)], [job("big", gpus=8)], asleep)
    assert wakes == ["n0003"]  # one whole 8-GPU node, never two 4-GPU halves


def test_a_gang_uses_the_awake_free_node_and_wakes_only_the_missing_one() -> None:
    wakes, waiting, placed = cycle([(4, X8, "r")], [busy("part", "n0000", 4)], [job("gang", gpus=16)],
                                   {"n0002": PowerState.ASLEEP, "n0003": PowerState.ASLEEP})
    assert placed == []
    assert wakes == ["n0002"]
    assert waiting == {"gang": WAIT_WAKE}


def test_no_wake_when_nothing_asleep_could_hold_the_job_or_nothing_is_blocked() -> None:
    wakes, waiting, _ = cycle([(2, X4, "r")], [busy("full", "n0000", 4)], [job("huge", gpus=8, gpus_per_node=8)],
                              {"n0001": PowerState.ASLEEP})
    assert wakes == [] and waiting == {"huge": WAIT_CAPACITY}
    wakes, waiting, placed = cycle([(2, X8, "r")], [], [job("fits", gpus=2)], {"n0001": PowerState.ASLEEP})
    assert wakes == [] and placed == ["fits"] and waiting == {}


def test_a_drained_or_suspending_node_is_never_woken() -> None:
    cluster = make_cluster([(3, X8, "r")])
    snapshot = ClusterSnapshot(
        time_s=100.0, cluster=cluster, running=(busy("full", "n0000", 8),), pending=(PendingJob(job("j", gpus=8)),),
        node_states={"n0001": NodeState(power=PowerState.ASLEEP, since_s=0.0, drained=True),
                     "n0002": NodeState(power=PowerState.SUSPENDING, since_s=90.0)})
    result = schedule_cycle(snapshot, SchedulerPolicy(), incremental=False)
    assert not [a for a in result.actions if isinstance(a, WakeNode)]
