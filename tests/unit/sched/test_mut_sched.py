"""Scheduler rules at edges the mutation run showed untested: the cycle length decides when an overdue
job's GPUs are expected back (and so what may backfill before a reservation), a gang too wide for the
sleeping nodes claims nothing, a fraction keeps its share when moved off a warning GPU, and the
membership-only union placement uses iterates and counts like a set."""

from __future__ import annotations

from schedkit import job, make_cluster, node_type, placed

from greengpu.model import ClusterSnapshot, GpuSlot, NodeState, PendingJob, PowerState, RunningJob
from greengpu.policy import BackfillPolicy, PreemptionPolicy, SchedulerPolicy
from greengpu.sched.books import books_for
from greengpu.sched.core import schedule, schedule_cycle
from greengpu.sched.memory import SchedulerMemory
from greengpu.sched.placement import _Either, place
from greengpu.sched.preemption import VictimFinder
from greengpu.sched.quota import QuotaLedger
from greengpu.sched.slack import model_of_nodes, queue_guard
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


def test_a_gang_whose_largest_piece_fits_no_candidate_claims_nothing() -> None:
    # 12 GPUs on A100 nodes of 8: pieces of 8 and 4. Three candidates hold a piece of 4 (an asleep 4-GPU
    # node, awake nodes with 4 and 5 GPUs free), none a piece of 8.
    cluster = make_cluster([(2, node_type(8), "r"), (1, node_type(4, name="a100x4"), "r")])
    running = (RunningJob(job("x", gpus=4), tuple(GpuSlot("n0000", g) for g in range(4)), 0.0, 1e6),
               RunningJob(job("y", gpus=3), tuple(GpuSlot("n0001", g) for g in range(3)), 0.0, 1e6))
    states = {"n0002": NodeState(PowerState.ASLEEP)}
    snapshot = ClusterSnapshot(time_s=0.0, cluster=cluster, running=running, node_states=states)
    plan = WakePlan(PlacementState(snapshot), states)
    assert not plan.claim(job("gang", gpus=12), ("A100",), set())
    assert plan.to_wake == {} and plan.free == {2: 4} and plan.awake_claimed == {}


def test_books_forgotten_by_one_memory_are_built_afresh_and_only_for_it() -> None:
    first, second = make_cluster([(1, node_type(8), "r")]), make_cluster([(1, node_type(8), "r")])
    one, two = ClusterSnapshot(time_s=0.0, cluster=first), ClusterSnapshot(time_s=0.0, cluster=second)
    memory_one, memory_two = SchedulerMemory(), SchedulerMemory()
    books_one, books_two = books_for(one, False, memory_one), books_for(two, False, memory_two)
    assert books_for(one, False, memory_one) is books_one  # remembered between cycles
    memory_one.forget()
    assert books_for(one, False, memory_one) is not books_one
    assert books_for(two, False, memory_two) is books_two


def test_free_units_follow_a_node_leaving_and_rejoining_the_schedulable_set() -> None:
    busy = RunningJob(job("x", gpus=3), tuple(GpuSlot("n0000", g) for g in range(3)), 0.0, 1e6)
    state = PlacementState(ClusterSnapshot(time_s=0.0, cluster=make_cluster([(2, node_type(8), "r")]),
                                           running=(busy,)))
    assert state.free_units_total == 13 * 1000
    state.set_schedulable(1, False)
    assert state.free_units_total == 5 * 1000
    state.set_schedulable(0, False)
    assert state.free_units_total == 0
    state.set_schedulable(1, True)
    assert state.free_units_total == 8 * 1000


def test_the_queue_guard_gathers_the_nodes_of_every_kind_of_wait() -> None:
    cluster = make_cluster([(2, node_type(8), "r"), (2, node_type(8, model="H100"), "r")])
    a100 = Wait(WaitReason.CAPACITY, "t", ("A100",), 8)
    h100 = Wait(WaitReason.GANG, "t", ("H100",), 8)
    guard = queue_guard({"a": a100, "b": h100}, cluster)
    assert guard.blocked_nodes == guard.keep_awake == {"n0000", "n0001", "n0002", "n0003"}
    assert guard.every_node is True and guard.lifts("u", ["elsewhere"], {})
    reserved = Wait(WaitReason.RESERVATION, "t", ("H100",), 8, nodes=frozenset({"n0003"}))
    guard = queue_guard({"a": a100, "r": reserved}, cluster)
    assert guard.blocked_nodes == {"n0000", "n0001", "n0003"}
    assert guard.keep_awake == {"n0000", "n0001", "n0002", "n0003"}
    assert guard.every_node is False and not guard.lifts("u", ["n0002"], model_of_nodes(cluster))
    guard = queue_guard({"r": reserved, "a": a100}, cluster)
    assert guard.blocked_nodes == {"n0000", "n0001", "n0003"}


def one_node_of_single_gpu_jobs(priority: int, last_priority: int | None = None,
                                ) -> tuple[PlacementState, QuotaLedger, list[RunningJob]]:
    """Eight one-GPU jobs on one node, all started 3000 s before t = 10000: v0 checkpoints every 1000 s
    (nothing to redo), v1 every 700 s (200 s to redo), the rest every 7200 s (all 3000 s to redo)."""
    cluster = make_cluster([(1, node_type(8), "r")])
    intervals = [1000.0, 700.0] + [7200.0] * 6
    priorities = [priority] * 7 + [priority if last_priority is None else last_priority]
    jobs = [RunningJob(job(f"v{g}", gpus=1, priority=priorities[g], checkpoint_interval_s=interval),
                       (GpuSlot("n0000", g),), 7000.0, 1e6) for g, interval in enumerate(intervals)]
    snapshot = ClusterSnapshot(time_s=10_000.0, cluster=cluster, running=tuple(jobs))
    ledger = QuotaLedger(cluster, {"n0000": "A100"}, {}, False)
    for running_job in jobs:
        ledger.charge(running_job)
    return PlacementState(snapshot), ledger, jobs


def test_the_victims_chosen_are_those_with_least_work_to_redo_and_the_choice_says_what_is_lost() -> None:
    state, ledger, jobs = one_node_of_single_gpu_jobs(priority=0)
    finder = VictimFinder(state, ledger, PreemptionPolicy(min_runtime_s=0), 10_000.0, jobs)
    choice = finder.find(PendingJob(job("p", gpus=2, priority=5)), set())
    assert choice is not None
    assert sorted(v.job.job_id for v in choice.victims) == ["v0", "v1"]
    assert choice.nodes == {0} and choice.lost_gpu_s == 200.0
    # A job already asked to stop is not chosen again: the next least costly takes its place.
    finder.stopping.add("v0")
    again = finder.find(PendingJob(job("q", gpus=2, priority=5)), set())
    assert again is not None and "v0" not in {v.job.job_id for v in again.victims}
    assert "v1" in {v.job.job_id for v in again.victims} and again.lost_gpu_s == 3200.0


def test_priority_preempts_only_strictly_lower_priorities() -> None:
    state, ledger, jobs = one_node_of_single_gpu_jobs(priority=5)
    finder = VictimFinder(state, ledger, PreemptionPolicy(min_runtime_s=0), 10_000.0, jobs)
    assert finder.find(PendingJob(job("p", gpus=2, priority=5)), set()) is None
    # One job of priority 0 among them: it alone may yield, and one GPU is not the two asked for.
    state, ledger, jobs = one_node_of_single_gpu_jobs(priority=5, last_priority=0)
    finder = VictimFinder(state, ledger, PreemptionPolicy(min_runtime_s=0), 10_000.0, jobs)
    assert finder.find(PendingJob(job("p", gpus=2, priority=5)), set()) is None
    one = finder.find(PendingJob(job("q", gpus=1, priority=5)), set())
    assert one is not None and [v.job.job_id for v in one.victims] == ["v7"]
