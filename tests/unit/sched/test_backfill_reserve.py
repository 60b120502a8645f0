"""Reservations for blocked jobs by hand: the earliest nodes and start from the running jobs' expected ends."""

from __future__ import annotations

from schedkit import job, make_cluster, node_type

from greengpu.model import ClusterSnapshot, GpuSlot, NodeState, RunningJob
from greengpu.sched.backfill import Reservation, ends_by_node, reserve
from greengpu.sched.state import PlacementState

NOW = 1000.0
INTERVAL = 60.0


def holding(job_id: str, node: str, gpus: list[int], end_s: float, units: int = 1000) -> RunningJob:
    return RunningJob(job(job_id, gpus=len(gpus) * units / 1000), tuple(GpuSlot(node, g, units) for g in gpus),
                      0.0, end_s)


def reservation_for(groups: list, running: list[RunningJob], wanted, excluded=(), states=None):  # noqa: ANN001, ANN201
    snapshot = ClusterSnapshot(time_s=NOW, cluster=make_cluster(groups), running=tuple(running),
                               node_states=states or {})
    state = PlacementState(snapshot)
    return reserve(state, wanted, ends_by_node(state, running), set(excluded), NOW, INTERVAL)


def test_the_node_that_frees_enough_gpus_first_is_reserved_from_that_time() -> None:
    running = [holding("a", "n0000", [0, 1, 2, 3], 7200.0), holding("b", "n0001", [0, 1, 2, 3], 3600.0),
               holding("c", "n0001", [4, 5], 9000.0)]
    # 4 GPUs: n0000 has 4 free now.
    assert reservation_for([(2, node_type(8), "r")], running, job("w", gpus=4)) == Reservation("w", frozenset({0}), NOW)
    # 8 GPUs: n0000 is whole at 7200; n0001 only once c ends at 9000.
    assert reservation_for([(2, node_type(8), "r")], running, job("w", gpus=8)) == \
        Reservation("w", frozenset({0}), 7200.0)
    # 6 GPUs: n0001 has 2 free and gets 4 more at 3600.
    assert reservation_for([(2, node_type(8), "r")], running, job("w", gpus=6)) == \
        Reservation("w", frozenset({1}), 3600.0)


def test_an_overdue_job_is_expected_to_end_within_the_next_cycle() -> None:
    running = [holding("late", "n0000", list(range(8)), NOW - 500.0)]
    assert reservation_for([(1, node_type(8), "r")], running, job("w", gpus=8)) == \
        Reservation("w", frozenset({0}), NOW + INTERVAL)


def test_a_gang_reserves_the_earliest_nodes_and_starts_when_the_last_is_free() -> None:
    running = [holding("a", "n0000", list(range(8)), 5000.0), holding("b", "n0001", list(range(8)), 2000.0),
               holding("c", "n0002", list(range(8)), 3000.0)]
    assert reservation_for([(3, node_type(8), "r")], running, job("g", gpus=16)) == \
        Reservation("g", frozenset({1, 2}), 3000.0)
    assert reservation_for([(3, node_type(8), "r")], running, job("g", gpus=32)) is None  # 4 nodes needed


def test_excluded_drained_and_too_small_nodes_are_not_reserved() -> None:
    groups = [(1, node_type(4, name="small"), "r"), (3, node_type(8), "r")]
    running = [holding("a", "n0001", list(range(8)), 2000.0), holding("b", "n0002", list(range(8)), 3000.0),
               holding("c", "n0003", list(range(8)), 4000.0)]
    wanted = job("w", gpus=8)
    assert reservation_for(groups, running, wanted) == Reservation("w", frozenset({1}), 2000.0)  # not the 4-GPU n0000
    assert reservation_for(groups, running, wanted, excluded={1}) == Reservation("w", frozenset({2}), 3000.0)
    drained = {"n0001": NodeState(drained=True), "n0002": NodeState(drained=True)}
    assert reservation_for(groups, running, wanted, states=drained) == Reservation("w", frozenset({3}), 4000.0)


def test_a_shared_gpu_is_whole_only_when_its_last_share_ends() -> None:
    running = [holding("f1", "n0000", [0], 1500.0, units=500), holding("f2", "n0000", [0], 2500.0, units=500),
               holding("x", "n0000", [1], 2000.0)]
    assert reservation_for([(1, node_type(2), "r")], running, job("w", gpus=2)) == \
        Reservation("w", frozenset({0}), 2500.0)


def test_fractions_need_no_reservation_and_impossible_jobs_get_none() -> None:
    assert reservation_for([(1, node_type(8), "r")], [], job("f", gpus=0.5)) is None
    assert reservation_for([(1, node_type(8), "r")], [], job("w", gpus=16, gpus_per_node=16)) is None


def test_the_earliest_model_wins() -> None:
    groups = [(1, node_type(8, "A100"), "r"), (1, node_type(8, "H100"), "r")]
    running = [holding("a", "n0000", list(range(8)), 5000.0), holding("h", "n0001", list(range(8)), 2000.0)]
    assert reservation_for(groups, running, job("w", gpus=8)) == Reservation("w", frozenset({1}), 2000.0)
    only_a100 = job("w", gpus=8, gpu_types=frozenset({"A100"}))
    assert reservation_for(groups, running, only_a100) == Reservation("w", frozenset({0}), 5000.0)


def test_the_ends_follow_jobs_added_and_removed() -> None:
    running = [holding("a", "n0000", list(range(8)), 5000.0)]
    snapshot = ClusterSnapshot(time_s=NOW, cluster=make_cluster([(1, node_type(8), "r")]), running=tuple(running))
    state = PlacementState(snapshot)
    ends = ends_by_node(state, running)
    wanted = job("w", gpus=8)
    assert reserve(state, wanted, ends, set(), NOW, INTERVAL) == Reservation("w", frozenset({0}), 5000.0)
    sooner = holding("a", "n0000", list(range(8)), 3000.0)
    ends.remove(running[0])
    ends.add(sooner)
    assert reserve(state, wanted, ends, set(), NOW, INTERVAL) == Reservation("w", frozenset({0}), 3000.0)
    ends.remove(sooner)
    assert reserve(state, wanted, ends, set(), NOW, INTERVAL) is None  # nothing left to end: the GPUs stay taken


def test_removing_a_job_the_ends_never_had_changes_nothing() -> None:
    snapshot = ClusterSnapshot(time_s=NOW, cluster=make_cluster([(1, node_type(8), "r")]))
    state = PlacementState(snapshot)
    ends = ends_by_node(state, [holding("a", "n0000", [0], 2000.0)])
    ends.remove(holding("never", "n0000", [1], 9000.0))  # sorts after every entry
    ends.remove(holding("elsewhere", "nX", [0], 1.0))
    empty = ends_by_node(state, [])
    empty.remove(holding("none", "n0000", [0], 5.0))  # a node without entries
    assert [e[1] for e in ends.by_node[0]] == ["a"] and empty.by_node.get(0, []) == []


def test_the_next_model_is_tried_when_one_cannot_hold_the_job() -> None:
    groups = [(1, node_type(4, "A100"), "r"), (2, node_type(8, "H100"), "r")]
    running = [holding("h1", "n0001", list(range(8)), 3000.0), holding("h2", "n0002", list(range(8)), 4000.0)]
    # 8 per node: no A100 node holds it; H100 n0001 frees first.
    assert reservation_for(groups, running, job("w", gpus=8, gpus_per_node=8)) == \
        Reservation("w", frozenset({1}), 3000.0)
    # A 2-node gang: one A100 node is not enough, the two H100 nodes are.
    assert reservation_for(groups, running, job("g", gpus=16)) == Reservation("g", frozenset({1, 2}), 4000.0)


def test_a_gang_counts_a_free_node_with_the_others() -> None:
    running = [holding("b", "n0001", list(range(8)), 2000.0)]
    assert reservation_for([(2, node_type(8), "r")], running, job("g", gpus=16)) == \
        Reservation("g", frozenset({0, 1}), 2000.0)


def test_on_equal_start_times_the_first_model_is_kept() -> None:
    groups = [(1, node_type(8, "A100"), "r"), (1, node_type(8, "H100"), "r")]
    assert reservation_for(groups, [], job("w", gpus=8)) == Reservation("w", frozenset({0}), NOW)
