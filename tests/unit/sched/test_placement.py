"""Placement rules by hand: chunks, best fit per node and per domain, shared GPUs, excluded and only-nodes.

Each case builds a small cluster whose answer follows from the rules in `greengpu.sched.placement`'s
docstring alone, then asks `place` directly (no scheduling cycle in between).
"""

from __future__ import annotations

from schedkit import job, make_cluster, node_type

from greengpu.model import ClusterSnapshot, GpuSlot, NodeState, PowerState, RunningJob
from greengpu.sched.placement import allowed_models, chunks_for, place
from greengpu.sched.state import PlacementState

A100x8 = node_type(8)


def state_of(groups: list, busy: dict[str, list[int]] | None = None, shares: dict[tuple[str, int], int] | None = None,
             asleep: tuple[str, ...] = ()) -> PlacementState:
    cluster = make_cluster(groups)
    running = [RunningJob(job(f"busy-{node}", gpus=len(gpus)), tuple(GpuSlot(node, g) for g in gpus), 0, 1)
               for node, gpus in (busy or {}).items()]
    running += [RunningJob(job(f"share-{node}-{gpu}", gpus=units / 1000), (GpuSlot(node, gpu, units),), 0, 1)
                for (node, gpu), units in (shares or {}).items()]
    states = {name: NodeState(PowerState.ASLEEP) for name in asleep}
    return PlacementState(ClusterSnapshot(time_s=0, cluster=cluster, running=tuple(running), node_states=states))


def nodes_of(slots: tuple[GpuSlot, ...] | None) -> list[tuple[str, int]]:
    assert slots is not None
    return sorted((s.node, s.gpu_index) for s in slots)


def test_chunks_per_node() -> None:
    assert chunks_for(job("a", gpus=8), 8) == [8]
    assert chunks_for(job("a", gpus=20), 8) == [8, 8, 4]
    assert chunks_for(job("a", gpus=16), 8) == [8, 8]
    assert chunks_for(job("a", gpus=6, gpus_per_node=4), 8) == [4, 2]
    assert chunks_for(job("a", gpus=8, gpus_per_node=2), 8) == [2, 2, 2, 2]
    assert chunks_for(job("a", gpus=8, gpus_per_node=16), 8) is None  # more per node than a node has
    assert chunks_for(job("a", gpus=8, gpus_per_node=0), 8) is None


def test_allowed_models_keep_the_clusters_order() -> None:
    state = state_of([(1, node_type(8, "A100"), "r"), (1, node_type(8, "H100"), "r")])
    assert allowed_models(state, job("a")) == state.models
    assert allowed_models(state, job("a", gpu_types=frozenset({"H100"}))) == ("H100",)
    assert allowed_models(state, job("a", gpu_types=frozenset({"V100"}))) == ()
    assert place(state, job("a", gpu_types=frozenset({"V100"}))) is None


def test_best_fit_takes_the_node_with_the_fewest_free_gpus_that_fit() -> None:
    # Free: n0000 8, n0001 3, n0002 5, n0003 2. Two GPUs: n0003 (2 free); three: n0001; four: n0002.
    state = state_of([(4, A100x8, "r")], busy={"n0001": list(range(5)), "n0002": [0, 1, 2], "n0003": list(range(6))})
    assert nodes_of(place(state, job("two", gpus=2))) == [("n0003", 6), ("n0003", 7)]
    assert nodes_of(place(state, job("three", gpus=3))) == [("n0001", 5), ("n0001", 6), ("n0001", 7)]
    assert {n for n, _ in nodes_of(place(state, job("four", gpus=4)))} == {"n0002"}
    assert {n for n, _ in nodes_of(place(state, job("six", gpus=6)))} == {"n0000"}
    assert place(state, job("nine", gpus=9, gpus_per_node=9)) is None


def test_excluded_and_only_nodes_are_honoured() -> None:
    state = state_of([(3, A100x8, "r")], busy={"n0001": [0, 1, 2, 3, 4, 5]})
    assert {n for n, _ in nodes_of(place(state, job("a", gpus=2)))} == {"n0001"}
    assert {n for n, _ in nodes_of(place(state, job("a", gpus=2), excluded={1}))} == {"n0000"}
    assert {n for n, _ in nodes_of(place(state, job("a", gpus=2), excluded={0, 1}))} == {"n0002"}
    assert {n for n, _ in nodes_of(place(state, job("a", gpus=2), only={0, 2}))} == {"n0000"}
    assert {n for n, _ in nodes_of(place(state, job("a", gpus=2), only={2}))} == {"n0002"}
    assert place(state, job("a", gpus=4), only={1}) is None
    assert place(state, job("a", gpus=1), excluded={0, 1, 2}) is None


def test_sleeping_nodes_are_not_placed_on_even_when_only_names_them() -> None:
    state = state_of([(2, A100x8, "r")], asleep=("n0000",))
    assert {n for n, _ in nodes_of(place(state, job("a", gpus=8)))} == {"n0001"}
    assert place(state, job("a", gpus=1), only={0}) is None


def test_a_fraction_goes_to_the_fullest_shared_gpu_it_fits_then_to_a_fresh_gpu_on_the_fullest_node() -> None:
    # Shared GPUs: n0000:0 has 600 used (400 free), n0001:3 has 250 used (750 free).
    state = state_of([(2, A100x8, "r")], busy={"n0001": [0, 1]}, shares={("n0000", 0): 600, ("n0001", 3): 250})
    assert place(state, job("q", gpus=0.4)) == (GpuSlot("n0000", 0, 400),)  # exactly fills the tightest
    assert place(state, job("h", gpus=0.5)) == (GpuSlot("n0001", 3, 500),)  # too big for n0000:0
    # Too big for both shared GPUs: a fresh GPU on the node with the fewest whole free GPUs (n0001).
    assert place(state, job("b", gpus=0.8)) == (GpuSlot("n0001", 2, 800),)
    assert place(state, job("q", gpus=0.4), excluded={0}) == (GpuSlot("n0001", 3, 400),)
    assert place(state, job("q", gpus=0.4), only={1}) == (GpuSlot("n0001", 3, 400),)


def test_a_gang_fills_whole_nodes_across_domains_only_when_no_domain_holds_it() -> None:
    # rackA: n0000, n0001 whole; rackB: n0002 whole, n0003 busy. 3 whole nodes: no rack has 3.
    state = state_of([(2, A100x8, "rackA"), (2, A100x8, "rackB")], busy={"n0003": [0]})
    assert {n for n, _ in nodes_of(place(state, job("g", gpus=24)))} == {"n0000", "n0001", "n0002"}
    assert place(state, job("g", gpus=32)) is None  # only 3 whole nodes free
    assert {n for n, _ in nodes_of(place(state, job("g", gpus=16), excluded={0}))} == {"n0001", "n0002"}


def test_a_gang_with_a_partial_chunk_takes_best_fit_nodes_for_each_chunk() -> None:
    # 12 GPUs on 8-GPU nodes: chunks 8 + 4. Free: n0000 8, n0001 8, n0002 5 (one domain).
    state = state_of([(3, A100x8, "r")], busy={"n0002": [0, 1, 2]})
    slots = place(state, job("g", gpus=12))
    per_node: dict[str, int] = {}
    for node, _ in nodes_of(slots):
        per_node[node] = per_node.get(node, 0) + 1
    # The 8 goes to the first whole node, the 4 to the tightest node that holds 4 (n0002, 5 free).
    assert per_node == {"n0000": 8, "n0002": 4}


def test_a_gang_across_domains_spans_the_roomiest_domains_best_fit_inside() -> None:
    # 2 GPUs per node on 3 nodes. rackA: n0000 2 free; rackB: n0001 3 free, n0002 4 free.
    # No rack has 3 nodes: rackB (7 free) first, best fit inside (n0001, then n0002), then rackA.
    state = state_of([(1, A100x8, "rackA"), (2, A100x8, "rackB")],
                     busy={"n0000": list(range(6)), "n0001": list(range(5)), "n0002": list(range(4))})
    slots = nodes_of(place(state, job("g", gpus=6, gpus_per_node=2)))
    assert {n for n, _ in slots} == {"n0000", "n0001", "n0002"}
    assert place(state, job("g", gpus=8, gpus_per_node=2)) is None  # 4 chunks, 3 nodes


def test_a_gang_never_mixes_gpu_models() -> None:
    state = state_of([(1, node_type(8, "A100"), "r"), (1, node_type(8, "H100"), "r")])
    assert place(state, job("g", gpus=16)) is None
    assert place(state, job("g", gpus=12, gpus_per_node=6)) is None


def test_the_whole_node_reserve_keeps_the_last_whole_nodes_for_big_jobs() -> None:
    state = state_of([(2, A100x8, "r")], busy={"n0001": [0, 1, 2, 3, 4, 5, 6, 7]})
    # One whole node left and a reserve of one: a small job may not take it, a whole-node job may.
    assert place(state, job("s", gpus=1), whole_node_reserve=1) is None
    assert place(state, job("s", gpus=0.5), whole_node_reserve=1) is None
    assert {n for n, _ in nodes_of(place(state, job("w", gpus=8), whole_node_reserve=1))} == {"n0000"}
    assert {n for n, _ in nodes_of(place(state, job("s", gpus=1), whole_node_reserve=0))} == {"n0000"}
    two_free = state_of([(3, A100x8, "r")], busy={"n0001": [0, 1, 2, 3, 4, 5, 6, 7]})
    assert {n for n, _ in nodes_of(place(two_free, job("s", gpus=1), whole_node_reserve=1))} == {"n0000"}


def test_a_fresh_gpu_for_a_fraction_goes_to_the_fullest_node_with_one_free_and_respects_only() -> None:
    # No shared GPU yet. n0000 has exactly 1 whole GPU free, n0001 all 8: best fit is n0000's last GPU.
    state = state_of([(2, A100x8, "r")], busy={"n0000": list(range(7))})
    assert place(state, job("f", gpus=0.5)) == (GpuSlot("n0000", 7, 500),)
    assert place(state, job("f", gpus=0.5), only={1}) == (GpuSlot("n0001", 0, 500),)


def test_the_biggest_chunk_gets_a_node_first() -> None:
    # 12 GPUs on two whole nodes: chunks 8 + 4. Largest first: 8 on n0000, 4 on n0001.
    state = state_of([(2, A100x8, "r")])
    per_node: dict[str, int] = {}
    for node, _ in nodes_of(place(state, job("g", gpus=12))):
        per_node[node] = per_node.get(node, 0) + 1
    assert per_node == {"n0000": 8, "n0001": 4}


def test_whole_nodes_across_domains_take_only_what_is_missing_from_the_next_domain() -> None:
    # Two racks of 2 whole nodes, a 3-node gang: rackA's two, then one of rackB's.
    state = state_of([(2, A100x8, "rackA"), (2, A100x8, "rackB")])
    assert {n for n, _ in nodes_of(place(state, job("g", gpus=24)))} == {"n0000", "n0001", "n0002"}


def test_a_whole_node_gang_kept_to_only_nodes() -> None:
    state = state_of([(4, A100x8, "r")])
    assert {n for n, _ in nodes_of(place(state, job("g", gpus=16), only={2, 3}))} == {"n0002", "n0003"}
    assert place(state, job("g", gpus=16), only={3}) is None


def test_a_partial_node_gang_kept_to_awake_only_nodes_and_away_from_excluded_ones() -> None:
    state = state_of([(3, A100x8, "r")], asleep=("n0002",))
    assert {n for n, _ in nodes_of(place(state, job("g", gpus=4, gpus_per_node=2), only={0, 1}))} == \
        {"n0000", "n0001"}
    assert place(state, job("g", gpus=4, gpus_per_node=2), only={1, 2}) is None  # n0002 sleeps
    mixed = state_of([(2, A100x8, "r"), (1, node_type(8, "H100"), "r")])
    assert place(mixed, job("g", gpus=4, gpus_per_node=2), only={1, 2}) is None  # one A100, one H100
    three = state_of([(3, A100x8, "r")])
    assert {n for n, _ in nodes_of(place(three, job("g", gpus=4, gpus_per_node=2), excluded={0}))} == \
        {"n0001", "n0002"}


def test_a_partial_gang_prefers_a_tight_domain_to_the_tightest_nodes_across_domains() -> None:
    # Chunks 4 + 4. rackA: 6 + 6 free (12); rackB: 4 + 8 + 8 free (20). rackA holds it and is the
    # tighter domain, although rackB's 4-free node is the tightest single node.
    state = state_of([(2, A100x8, "rackA"), (3, A100x8, "rackB")],
                     busy={"n0000": [0, 1], "n0001": [0, 1], "n0002": [0, 1, 2, 3]})
    assert {n for n, _ in nodes_of(place(state, job("g", gpus=8, gpus_per_node=4)))} == {"n0000", "n0001"}


def test_a_domain_with_exactly_the_gangs_free_gpus_holds_it() -> None:
    # Chunks 4 + 4 and rackA has exactly 4 + 4 free: it fits, and it is the tightest.
    state = state_of([(2, A100x8, "rackA"), (3, A100x8, "rackB")], busy={"n0000": [0, 1, 2, 3], "n0001": [0, 1, 2, 3]})
    assert {n for n, _ in nodes_of(place(state, job("g", gpus=8, gpus_per_node=4)))} == {"n0000", "n0001"}


def test_across_domains_the_roomiest_domain_comes_first_whatever_its_name() -> None:
    # 2 GPUs per node on 3 nodes; no rack has 3 nodes. rackB (2 nodes, 16 free) first, then rackA
    # before rackC (8 free each, by name).
    state = state_of([(1, A100x8, "rackA"), (2, A100x8, "rackB"), (1, A100x8, "rackC")])
    assert {n for n, _ in nodes_of(place(state, job("g", gpus=6, gpus_per_node=2)))} == {"n0000", "n0001", "n0002"}
    small_a = state_of([(1, A100x8, "rackA"), (2, A100x8, "rackB"), (1, A100x8, "rackC")],
                       busy={"n0000": [0, 1, 2, 3, 4]})
    # rackA has only 3 free now, rackC 8: rackB then rackC.
    assert {n for n, _ in nodes_of(place(small_a, job("g", gpus=6, gpus_per_node=2)))} == \
        {"n0001", "n0002", "n0003"}


def test_a_gang_on_a_model_with_two_node_sizes_uses_nodes_that_hold_its_chunks() -> None:
    # A100 nodes of 4 and of 8 GPUs: a 16-GPU gang is two chunks of 8, which only the 8-GPU nodes hold.
    state = state_of([(2, node_type(4, "A100", name="small"), "r"), (2, node_type(8, "A100", name="big"), "r")])
    slots = place(state, job("g", gpus=16))
    assert {n for n, _ in nodes_of(slots)} == {"n0002", "n0003"} and len(nodes_of(slots)) == 16


def test_chunks_of_exactly_a_node() -> None:
    assert chunks_for(job("a", gpus=16, gpus_per_node=8), 8) == [8, 8]


def test_best_fit_looks_at_every_model_at_each_level_before_a_looser_one() -> None:
    # A100: one node with 4 free; H100: one node with 2 free. A 2-GPU job takes the H100 node's 2.
    groups = [(1, node_type(8, "A100"), "r"), (1, node_type(8, "H100"), "r")]
    state = state_of(groups, busy={"n0000": [0, 1, 2, 3], "n0001": [0, 1, 2, 3, 4, 5]})
    assert {n for n, _ in nodes_of(place(state, job("j", gpus=2)))} == {"n0001"}


def test_the_walk_over_free_counts_stops_at_each_models_own_node_size() -> None:
    # A100 nodes of 4 GPUs (all busy), H100 nodes of 8 (free): a 4-GPU job walks past 4 free GPUs,
    # where the A100 index ends, to the H100 node's 8.
    groups = [(1, node_type(4, "A100"), "r"), (1, node_type(8, "H100"), "r")]
    state = state_of(groups, busy={"n0000": [0, 1, 2, 3]})
    assert {n for n, _ in nodes_of(place(state, job("j", gpus=4)))} == {"n0001"}


def test_only_nodes_that_are_excluded_do_not_end_the_search() -> None:
    state = state_of([(3, A100x8, "r")])
    assert {n for n, _ in nodes_of(place(state, job("a", gpus=2), only={0, 2}, excluded={0}))} == {"n0002"}


def test_the_reserve_is_per_model_and_another_model_may_still_serve_a_small_job() -> None:
    # One whole A100 node (the last: reserved) and two whole H100 nodes (one may go).
    groups = [(1, node_type(8, "A100"), "r"), (2, node_type(8, "H100"), "r")]
    state = state_of(groups)
    assert {n for n, _ in nodes_of(place(state, job("s", gpus=1), whole_node_reserve=1))} == {"n0001"}


def test_a_gang_is_tried_on_the_next_model_when_one_cannot_split_it() -> None:
    groups = [(2, node_type(4, "A100"), "r"), (2, node_type(8, "H100"), "r")]
    state = state_of(groups)
    assert {n for n, _ in nodes_of(place(state, job("g", gpus=12, gpus_per_node=6)))} == {"n0002", "n0003"}


def test_a_job_that_fits_one_node_of_some_model_is_never_split_over_smaller_ones() -> None:
    # 6 GPUs fit one H100 node (busy now), not one A100 node: the job waits rather than span two A100s.
    groups = [(2, node_type(4, "A100"), "r"), (1, node_type(8, "H100"), "r")]
    state = state_of(groups, busy={"n0002": [0, 1, 2, 3]})
    assert place(state, job("j", gpus=6)) is None
