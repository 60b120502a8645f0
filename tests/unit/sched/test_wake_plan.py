"""The wake plan's claims by hand: which waking or asleep node holds each blocked job, and what is left."""

from __future__ import annotations

from schedkit import job, make_cluster, node_type

from greengpu.model import ClusterSnapshot, GpuSlot, NodeState, PowerState, RunningJob
from greengpu.sched.state import PlacementState
from greengpu.sched.wake import WakePlan

ASLEEP, WAKING = NodeState(PowerState.ASLEEP), NodeState(PowerState.WAKING)


def plan(groups: list, states: dict[str, NodeState], running: tuple[RunningJob, ...] = ()) -> WakePlan:
    snapshot = ClusterSnapshot(time_s=0.0, cluster=make_cluster(groups), running=running, node_states=states)
    return WakePlan(PlacementState(snapshot), states)


def test_claims_take_the_tightest_node_and_remember_what_is_left() -> None:
    wake = plan([(1, node_type(8), "r"), (1, node_type(4, name="x4"), "r")], {"n0000": ASLEEP, "n0001": ASLEEP})
    assert wake.has_room()
    models = ("A100",)
    assert wake.claim(job("a", gpus=3), models, set())  # fits the 4-GPU node tightest
    assert wake.to_wake == {1: "a"} and wake.free == {0: 8, 1: 1}
    assert wake.claim(job("b", gpus=0.5), models, set())  # a fraction holds a whole GPU: the last one of n0001
    assert wake.free == {0: 8, 1: 0} and wake.to_wake == {1: "a"}
    assert wake.claim(job("c", gpus=2), models, set())
    assert wake.to_wake == {1: "a", 0: "c"} and wake.free[0] == 6
    assert not wake.claim(job("d", gpus=7), models, set())
    assert not wake.claim(job("e", gpus=0.5, gpu_types=frozenset({"H100"})), (), set())


def test_a_waking_node_is_preferred_over_an_asleep_one_of_the_same_room_and_is_not_woken_again() -> None:
    wake = plan([(2, node_type(8), "r")], {"n0000": ASLEEP, "n0001": WAKING})
    assert wake.claim(job("a", gpus=8), ("A100",), set())
    assert wake.to_wake == {} and wake.free == {0: 8, 1: 0}
    assert wake.claim(job("b", gpus=8), ("A100",), set())
    assert wake.to_wake == {0: "b"}
    assert not wake.has_room()


def test_drained_awake_and_suspending_nodes_give_no_room() -> None:
    states = {"n0000": NodeState(PowerState.ASLEEP, drained=True), "n0001": NodeState(PowerState.SUSPENDING),
              "n0002": NodeState(PowerState.AWAKE), "ghost": ASLEEP}
    wake = plan([(3, node_type(8), "r")], states)
    assert not wake.has_room() and wake.free == {}


def test_a_gang_combines_awake_leftovers_with_asleep_nodes_and_never_double_counts_them() -> None:
    # n0000 awake and free (the cycle could not use it alone), n0001 and n0002 asleep.
    wake = plan([(3, node_type(8), "r")], {"n0001": ASLEEP, "n0002": ASLEEP})
    assert wake.claim(job("g", gpus=16), ("A100",), set())
    assert wake.awake_claimed == {0: 8} and wake.to_wake == {1: "g"}  # the awake node first, one wake
    assert wake.claim(job("h", gpus=8, gpus_per_node=8), ("A100",), set())
    assert wake.to_wake == {1: "g", 2: "h"}
    assert not wake.claim(job("i", gpus=16), ("A100",), set())  # the awake node is already claimed


def test_a_gang_skips_excluded_awake_nodes_and_needs_enough_nodes() -> None:
    wake = plan([(3, node_type(8), "r")], {"n0001": ASLEEP, "n0002": ASLEEP})
    assert wake.claim(job("g", gpus=16), ("A100",), {0})
    assert wake.awake_claimed == {} and wake.to_wake == {1: "g", 2: "g"}
    half = plan([(2, node_type(8), "r")], {"n0001": ASLEEP},
                running=(RunningJob(job("x", gpus=4), tuple(GpuSlot("n0000", g) for g in range(4)), 0.0, 1.0),))
    # 12 GPUs as 8 + 4: the asleep node takes the 8, the awake node's 4 free GPUs the 4.
    assert half.claim(job("g", gpus=12), ("A100",), set())
    assert half.awake_claimed == {0: 4} and half.to_wake == {1: "g"}
    assert not plan([(2, node_type(8), "r")], {"n0001": ASLEEP}).claim(job("g", gpus=24), ("A100",), set())


def test_nodes_without_room_do_not_hide_the_asleep_ones_after_them() -> None:
    drained_first = plan([(2, node_type(8), "r")], {"n0000": NodeState(PowerState.ASLEEP, drained=True),
                                                     "n0001": ASLEEP})
    assert drained_first.free == {1: 8}
    awake_first = plan([(2, node_type(8), "r")], {"n0000": NodeState(PowerState.AWAKE), "n0001": ASLEEP})
    assert awake_first.free == {1: 8}


def test_a_job_split_per_node_wakes_as_many_nodes() -> None:
    wake = plan([(2, node_type(8), "r")], {"n0000": ASLEEP, "n0001": ASLEEP})
    assert wake.claim(job("p", gpus=4, gpus_per_node=2), ("A100",), set())
    assert wake.to_wake == {0: "p", 1: "p"}


def test_the_model_that_holds_the_job_on_one_node_is_found_after_one_that_cannot() -> None:
    groups = [(2, node_type(4, "A100"), "r"), (1, node_type(8, "H100"), "r")]
    wake = plan(groups, {"n0000": ASLEEP, "n0001": ASLEEP, "n0002": ASLEEP})
    assert wake.claim(job("j", gpus=8), ("A100", "H100"), set())
    assert wake.to_wake == {2: "j"}  # one H100 node, not two A100 nodes
    only_h100 = plan(groups, {"n0002": ASLEEP})
    assert only_h100.claim(job("j", gpus=2), ("A100", "H100"), set()) and only_h100.to_wake == {2: "j"}


def test_a_gang_is_tried_on_the_next_model_when_one_cannot_split_it() -> None:
    groups = [(2, node_type(4, "A100"), "r"), (2, node_type(8, "H100"), "r")]
    wake = plan(groups, {"n0002": ASLEEP, "n0003": ASLEEP})
    assert wake.claim(job("g", gpus=12, gpus_per_node=6), ("A100", "H100"), set())  # 6 per node: H100 only
    assert wake.to_wake == {2: "g", 3: "g"}
    awake_a100 = plan(groups, {"n0002": ASLEEP})
    assert awake_a100.claim(job("g", gpus=8), ("A100",), set())  # two free awake A100 nodes, none asleep
    assert awake_a100.awake_claimed == {0: 4, 1: 4} and awake_a100.to_wake == {}


def test_a_single_node_job_never_claims_awake_leftovers() -> None:
    running = (RunningJob(job("x", gpus=4), tuple(GpuSlot("n0000", g) for g in range(4)), 0.0, 1.0),)
    wake = plan([(1, node_type(8), "r")], {}, running=running)
    assert not wake.claim(job("j", gpus=4), ("A100",), set())
    assert wake.awake_claimed == {}


def test_awake_claims_add_up_and_are_not_claimed_twice() -> None:
    wake = plan([(4, node_type(8), "r")], {"n0001": ASLEEP, "n0002": ASLEEP, "n0003": ASLEEP})
    assert wake.claim(job("a", gpus=8, gpus_per_node=4), ("A100",), set())
    assert wake.claim(job("b", gpus=8, gpus_per_node=4), ("A100",), set())
    assert wake.awake_claimed == {0: 8}  # 4 + 4 of the awake node
    assert wake.claim(job("c", gpus=16), ("A100",), set())
    assert wake.awake_claimed == {0: 8}  # nothing left there: c wakes two nodes
    # a woke n0001 (4 of its 8), b took the other 4 there, c needs two whole nodes: n0002 and n0003.
    assert wake.to_wake == {1: "a", 2: "c", 3: "c"}


def test_the_biggest_chunk_is_placed_first_and_a_gang_that_does_not_fit_claims_nothing() -> None:
    groups = [(1, node_type(8), "r"), (1, node_type(4, name="x4"), "r")]
    # 12 GPUs as 8 + 4: the awake 8-GPU node takes the 8, the asleep 4-GPU node the 4.
    wake = plan(groups, {"n0001": ASLEEP})
    assert wake.claim(job("g", gpus=12), ("A100",), set())
    assert wake.awake_claimed == {0: 8} and wake.to_wake == {1: "g"}
    running = (RunningJob(job("x", gpus=4), tuple(GpuSlot("n0000", g) for g in range(4)), 0.0, 1.0),)
    short = plan([(2, node_type(8), "r")], {"n0001": ASLEEP}, running=running)
    assert not short.claim(job("g", gpus=16), ("A100",), set())  # two candidates, but 4 + 8 free < 8 + 8
    assert short.awake_claimed == {} and short.to_wake == {}
