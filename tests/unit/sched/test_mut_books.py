"""The scheduler's remembered books (free-GPU index and quota ledger kept between cycles) against books
built fresh from the same snapshot, field by field, through a job's end, a node's drain, sleep and wake,
a changed expected end, a job moved, and shared-GPU (fractional) jobs; plus hand-counted figures of the
placement index, so that a fault shared by the fresh build and the update is caught too."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping
from dataclasses import replace

import pytest
from schedkit import job, make_cluster, node_type

from greengpu.model import (
    Cluster,
    ClusterSnapshot,
    GpuSlot,
    NodeState,
    PowerState,
    RunningJob,
    Tenant,
)
from greengpu.sched.backfill import NodeEnds, Reservation, ends_by_node, reserve
from greengpu.sched.backfill import _scan as free_time_scan
from greengpu.sched.books import Books, books_for, fresh_books
from greengpu.sched.memory import SchedulerMemory
from greengpu.sched.state import ChangeLog, PlacementState, cluster_layout

# n0000, n0001: A100 x4 in r1; n0002: A100 x2 in r2; n0003: H100 x2 in r2. A100 has two node sizes.
TENANTS = [Tenant("a", quota_gpus_by_model={"A100": 2.0}, max_gpu_memory_gb=10_000.0),
           Tenant("b", quota_gpus=1.0, borrow_limit_gpus=4.0)]


def cluster() -> Cluster:
    return make_cluster([(2, node_type(4, "A100"), "r1"), (1, node_type(2, "A100", name="a100x2", memory_gb=40.0),
                         "r2"), (1, node_type(2, "H100"), "r2")], tenants=TENANTS)


def running(job_id: str, slots: list[tuple[str, int, int]], tenant: str = "a", end_s: float = 5000.0,
            **job_fields: object) -> RunningJob:
    units = sum(u for _, _, u in slots)
    return RunningJob(job(job_id, gpus=units / 1000, tenant=tenant, **job_fields),
                      tuple(GpuSlot(n, g, u) for n, g, u in slots), 0.0, end_s)


def whole(job_id: str, node: str, gpus: list[int], **kwargs: object) -> RunningJob:
    return running(job_id, [(node, g, 1000) for g in gpus], **kwargs)  # type: ignore[arg-type]


def nonempty(mapping: Mapping[object, object]) -> dict[object, object]:
    """Entries that hold something: an emptied entry and a missing one mean the same."""
    return {k: v for k, v in mapping.items() if v}


def state_fields(state: PlacementState) -> dict[str, object]:
    return {
        "schedulable": state.schedulable, "gpu_free": state.gpu_free, "free_whole": state.free_whole,
        "free_units_total": state.free_units_total,
        "buckets": {m: [sorted(b) for b in buckets] for m, buckets in state.buckets.items()},
        "shared": state.shared,
        "whole_by_domain": {m: nonempty({d: sorted(s) for d, s in by.items()})
                            for m, by in state.whole_by_domain.items()},
    }


def ledger_fields(books: Books) -> dict[str, object]:
    ledger = books.ledger
    return {"used": nonempty(ledger.used_units), "total": nonempty(ledger.total_units),
            "memory": {k: round(v, 6) for k, v in ledger.memory_gb.items() if abs(v) > 1e-9}}


def ends_fields(ends: NodeEnds) -> dict[int, object]:
    return nonempty(ends.by_node)


def assert_same_as_fresh(books: Books, snapshot: ClusterSnapshot) -> None:
    fresh = fresh_books(snapshot, books.borrow_non_interruptible)
    assert state_fields(books.state) == state_fields(fresh.state)
    assert ledger_fields(books) == ledger_fields(fresh)
    assert books.running == fresh.running
    assert all(books.running[k] is fresh.running[k] for k in fresh.running)  # the snapshot's own objects
    assert books.by_id == {id(r): r for r in snapshot.running}
    assert books.signalled == fresh.signalled == {id(r) for r in snapshot.running if r.preempt_signalled_s is not None}
    assert books.unschedulable == fresh.unschedulable
    assert books.priorities == fresh.priorities == dict(Counter(r.job.priority for r in snapshot.running))
    on_node: dict[int, dict[str, RunningJob]] = {}
    for r in snapshot.running:
        for name in r.nodes:
            if name in books.state.index:  # a slot on a node outside the cluster is not indexed
                on_node.setdefault(books.state.index[name], {})[r.job.job_id] = r
    assert books.on_node == fresh.on_node == on_node
    assert all(books.on_node[n][j] is on_node[n][j] for n in on_node for j in on_node[n])  # the snapshot's objects
    if books.ends is not None:
        fresh_ends = ends_by_node(fresh.state, snapshot.running)
        assert ends_fields(books.ends) == ends_fields(fresh_ends)
        # The free-time scans kept between cycles follow the change logs to what a fresh scan finds (the
        # per-node memos they fill are put back as they were: tests look at which were dropped).
        memos = {node: dict(memo) for node, memo in books.ends.memo.items()}
        for model, size in books.state.node_size_by_model.items():
            for count in range(1, size + 1):
                assert free_time_scan(books.state, books.ends, model, count) == \
                    free_time_scan(fresh.state, fresh_ends, model, count)
        books.ends.memo.clear()
        books.ends.memo.update(memos)


class Cycles:
    """Successive snapshots of one cluster, each with a new running tuple and node-state mapping."""

    def __init__(self, purpose: str) -> None:
        self.cluster = cluster()
        self.purpose = purpose
        self.memory = SchedulerMemory()
        self.running: dict[str, RunningJob] = {}
        self.states: dict[str, NodeState] = {}
        self.time_s = 0.0

    def snapshot(self) -> ClusterSnapshot:
        self.time_s += 60.0
        return ClusterSnapshot(self.time_s, self.cluster, tuple(self.running.values()), (), dict(self.states))

    def step(self) -> tuple[Books, ClusterSnapshot]:
        snapshot = self.snapshot()
        books = books_for(snapshot, False, self.memory, purpose=self.purpose)
        assert_same_as_fresh(books, snapshot)
        return books, snapshot


def test_remembered_books_equal_fresh_ones_through_ends_drains_sleep_wake_and_shared_gpus() -> None:
    cycles = Cycles("ends-drains")
    for r in (whole("j1", "n0000", [0, 1]), running("f1", [("n0000", 2, 500)]),
              running("f2", [("n0001", 0, 250)], tenant="b"),
              running("g1", [("n0001", 2, 1000), ("n0001", 3, 1000), ("n0003", 0, 1000)], tenant="b")):
        cycles.running[r.job.job_id] = r
    books, _ = cycles.step()
    books.ends = ends_by_node(books.state, books.running.values())
    state = books.state
    # By hand: 12 GPUs, 5.75 of them used.
    assert state.free_units_total == 12_000 - 5_750
    assert state.free_whole == [1, 1, 2, 1]
    assert state.shared == {"A100": [(500, 0, 2), (750, 1, 0)], "H100": []}
    assert [sorted(b) for b in state.buckets["A100"]] == [[], [0, 1], [2], [], []]
    assert state.whole_by_domain["A100"] == {"r2": {2}} and state.buckets["H100"][1] == {3}
    assert books.ledger.used_units == {("a", "A100"): 2500, ("b", "*"): 3250}

    # A job ends; a fraction joins f1 on its GPU (the shared index moves the GPU, not adds one).
    version = books.version
    assert version == 0
    del cycles.running["j1"]
    cycles.running["f3"] = running("f3", [("n0000", 2, 300)], tenant="b")
    books, _ = cycles.step()
    assert books.version == version + 2
    assert state.free_whole == [3, 1, 2, 1] and state.shared["A100"] == [(200, 0, 2), (750, 1, 0)]
    assert state.free_units_total == 12_000 - 4_050

    # n0001 is drained (it holds work), n0002 goes to sleep, and a name the cluster does not know is reported.
    cycles.states = {"n0001": NodeState(drained=True), "n0002": NodeState(PowerState.ASLEEP),
                     "ghost": NodeState(drained=True)}
    books, _ = cycles.step()
    assert books.unschedulable == {1, 2}
    assert state.free_units_total == 12_000 - 4_050 - (4_000 - 2_250) - 2_000
    assert state.shared["A100"] == [(200, 0, 2)] and not state.whole_by_domain["A100"].get("r2")
    assert state.total_free_units() == state.free_units_total

    # The drained node's gang ends while it is drained, with f3; then n0002 wakes and n0001 is undrained.
    version = books.version
    del cycles.running["g1"]
    f3 = cycles.running.pop("f3")
    books, _ = cycles.step()
    assert books.version == version + 2
    cycles.running["f3"] = f3
    books, _ = cycles.step()
    assert state.free_whole[1] == 3 and state.free_units_total == 12_000 - 4_050 - (4_000 - 2_250) - 2_000 + 1_000
    cycles.states = {}
    books, _ = cycles.step()
    assert books.unschedulable == set() and state.schedulable == [True] * 4
    assert state.free_units_total == 12_000 - 1_050
    assert state.whole_by_domain["A100"] == {"r2": {2}} and state.whole_by_domain["H100"] == {"r2": {3}}


def test_a_changed_expected_end_or_a_new_object_for_the_same_allocation_moves_only_the_ends() -> None:
    cycles = Cycles("expected-end")
    cycles.running = {"j1": whole("j1", "n0000", [0, 1], end_s=900.0), "j2": whole("j2", "n0000", [2], end_s=1200.0)}
    books, _ = cycles.step()
    books.ends = ends_by_node(books.state, books.running.values())
    books.ends.memo = {0: {}, 1: {}, 3: {}}  # each node's memo is dropped when its jobs change
    version, ledger_version = books.version, books.ledger.version
    later = replace(cycles.running["j1"], expected_end_s=3000.0)
    cycles.running["j1"] = later
    books, _ = cycles.step()
    assert books.running["j1"] is later and books.version == version and books.ledger.version == ledger_version
    assert [e[0] for e in books.ends.by_node[0]] == [1200.0, 3000.0]
    assert set(books.ends.memo) == {1, 3}
    # A preemption signal makes a new object with the same allocation and end: nothing else changes.
    books.ends.memo = {0: {}, 1: {}}
    signalled = replace(later, preempt_signalled_s=100.0, preempted_for="p")
    cycles.running["j1"] = signalled
    books, _ = cycles.step()
    assert books.running["j1"] is signalled and books.version == version and set(books.ends.memo) == {0, 1}
    # The same job id on other GPUs (moved): released where it was, allocated where it is.
    cycles.running["j1"] = whole("j1", "n0001", [0, 1], end_s=3000.0)
    books, _ = cycles.step()
    assert books.version == version + 2  # one release, one allocation
    assert books.state.free_whole[:2] == [3, 2] and [e[:2] for e in books.ends.by_node[1]] == [(3000.0, "j1")]
    assert [e[:2] for e in books.ends.by_node[0]] == [(1200.0, "j2")]


def test_a_remembered_snapshot_or_mapping_seen_again_is_not_walked_again() -> None:
    cycles = Cycles("seen-again")
    cycles.running = {"j1": whole("j1", "n0000", [0])}
    cycles.states = {"n0002": NodeState(drained=True)}
    snapshot = cycles.snapshot()
    books = books_for(snapshot, False, cycles.memory, purpose=cycles.purpose)  # built fresh: nothing remembered yet
    assert books.last_running is None and books.last_states is None
    assert books_for(snapshot, False, cycles.memory, purpose=cycles.purpose) is books
    assert books.last_running is snapshot.running and books.last_states is snapshot.node_states
    # The same mapping object comes back: the books trust it (a caller must pass a new one to change state).
    books.state.set_schedulable(2, True)
    books_for(replace(snapshot, time_s=snapshot.time_s + 60.0), False, cycles.memory, purpose=cycles.purpose)
    assert books.state.schedulable[2] is True
    books_for(replace(snapshot, node_states=dict(snapshot.node_states)), False, cycles.memory, purpose=cycles.purpose)
    assert books.state.schedulable[2] is False and books.unschedulable == {2}


def test_commit_records_started_and_stopped_jobs_and_their_ends() -> None:
    snapshot = ClusterSnapshot(0.0, cluster(), (whole("old", "n0000", [0], end_s=100.0),))
    books = fresh_books(snapshot, False)
    books.ends = ends_by_node(books.state, books.running.values())
    books.last_running = snapshot.running
    new = whole("new", "n0001", [1], end_s=200.0)
    books.commit([new], ["old", "unknown"])
    assert books.running == {"new": new} and books.by_id == {id(new): new} and books.version == 1
    assert books.last_running is None and nonempty(books.ends.by_node) == {1: [(200.0, "new", new.slots)]}
    books.last_running = snapshot.running
    books.commit([], [])
    assert books.version == 1 and books.last_running is snapshot.running
    # Only started, then only stopped: each is a change.
    books.commit([whole("more", "n0001", [2])], [])
    assert books.version == 2 and books.last_running is None and set(books.running) == {"new", "more"}
    books.last_running = snapshot.running
    books.commit([], ["more"])
    assert books.version == 3 and books.last_running is None and books.by_id == {id(new): new}
    # The per-priority counts and per-node index follow the commits.
    assert books.priorities == {new.job.priority: 1} and books.on_node == {1: {"new": new}}


def test_books_are_kept_per_memory_purpose_and_borrowing_rule_and_forgotten_whole() -> None:
    snapshot = ClusterSnapshot(0.0, cluster())
    memory = SchedulerMemory()
    first = books_for(snapshot, False, memory, purpose="p")
    assert books_for(snapshot, False, memory, purpose="p") is first
    assert books_for(snapshot, False, memory, purpose="q") is not first
    assert books_for(snapshot, False, SchedulerMemory(), purpose="p") is not first  # another body's memory
    borrowing = books_for(snapshot, True, memory, purpose="p")
    assert borrowing is not first and borrowing.borrow_non_interruptible is True
    unremembered = books_for(snapshot, True, memory, incremental=False, purpose="p")
    assert unremembered is not borrowing and books_for(snapshot, True, memory, purpose="p") is borrowing
    assert unremembered.borrow_non_interruptible is True and unremembered.ledger.borrow_non_interruptible is True
    assert books_for(snapshot, False, memory) is books_for(snapshot, False, memory, purpose="main")  # the core's
    other = ClusterSnapshot(0.0, cluster())  # another cluster: its books replace the first's
    main = books_for(snapshot, False, memory)
    assert books_for(other, False, memory) is not main and books_for(snapshot, False, memory) is not main
    assert set(memory.books) == {"p", "q", "main"}
    memory.forget()
    assert memory.books == {} and books_for(snapshot, True, memory, purpose="p") is not borrowing


def test_the_layout_is_computed_once_per_cluster_and_counts_node_sizes_per_model() -> None:
    c = cluster()
    memory = SchedulerMemory()
    layout = cluster_layout(c, memory)
    assert cluster_layout(c, memory) is layout and cluster_layout(c) is not layout  # no memory: built afresh
    assert cluster_layout(cluster(), memory) is not layout and memory.layout is not None  # the last cluster's
    assert layout.node_size_by_model == {"A100": 4, "H100": 2}
    assert layout.models == ("A100", "H100") and layout.uniform_models == frozenset({"H100"})
    assert layout.model_of_node == {"n0000": "A100", "n0001": "A100", "n0002": "A100", "n0003": "H100"}
    assert layout.memory_of_node["n0002"] == 40.0 and layout.memory_gb == [80.0, 80.0, 40.0, 80.0]
    assert layout.domain == ["r1", "r1", "r2", "r2"] and layout.size == [4, 4, 2, 2]
    assert layout.index == {"n0000": 0, "n0001": 1, "n0002": 2, "n0003": 3}


def test_the_placement_index_by_hand_with_slots_outside_the_cluster_ignored() -> None:
    stray = running("stray", [("nowhere", 0, 1000), ("n0002", 5, 1000), ("n0002", 1, 400)])
    states = {"n0003": NodeState(failing_gpus=frozenset({1}))}
    state = PlacementState(ClusterSnapshot(0.0, cluster(), (stray,), (), states))
    assert state.gpu_free[2] == [1000, 600] and state.free_whole == [4, 4, 1, 2]
    assert state.schedulable == [True, True, True, False]
    assert state.free_units_total == 10_000 - 400 and state.total_free_units() == 9_600
    assert state.shared == {"A100": [(600, 2, 1)], "H100": []}
    assert state.buckets["H100"] == [set(), set(), set()]
    assert state.whole_by_domain == {"A100": {"r1": {0, 1}}, "H100": {}}
    state.allocate((GpuSlot("n0000", 1), GpuSlot("nowhere", 0), GpuSlot("n0000", 3, 250)))
    assert state.free_gpu_indexes(0, 2) == [0, 2] and state.free_gpu_indexes(0, 9) == [0, 2]
    assert state.whole_slots(0, 1) == (GpuSlot("n0000", 0),)
    assert state.whole_by_domain["A100"] == {"r1": {1}} and state.buckets["A100"][2] == {0}
    state.release((GpuSlot("n0000", 1), GpuSlot("n0000", 3, 250), GpuSlot("n0002", 7)))
    assert state.whole_by_domain["A100"] == {"r1": {0, 1}} and state.free_units_total == 9_600
    state.set_schedulable(3, True)
    state.set_schedulable(3, True)  # no change: counted once
    assert state.free_units_total == 11_600 and state.buckets["H100"][2] == {3}
    state.set_schedulable(2, False)
    assert state.free_units_total == 10_000 and state.shared["A100"] == [] and state.buckets["A100"][1] == set()


@pytest.mark.parametrize("units", [250, 500])
def test_fractions_sharing_one_gpu_leave_the_shared_index_as_the_fresh_build_has_it(units: int) -> None:
    cycles = Cycles(f"shared-{units}")
    for i in range(3):
        cycles.running[f"f{i}"] = running(f"f{i}", [("n0003", i % 2, units)], tenant="b")
        cycles.step()
    for i in range(3):
        del cycles.running[f"f{i}"]
        books, _ = cycles.step()
    assert books.state.shared["H100"] == [] and books.state.free_whole[3] == 2
    assert books.ledger.used_units.get(("b", "*"), 0) == 0


def test_many_jobs_renewed_and_ended_in_one_cycle_are_all_accounted() -> None:
    cycles = Cycles("renewed-and-ended")
    for i in range(10):
        cycles.running[f"j{i}"] = whole(f"j{i}", f"n000{i // 4}", [i % 4], end_s=1000.0 + i)
    books, _ = cycles.step()
    version = books.version
    for i in range(10):
        if i % 2:
            del cycles.running[f"j{i}"]  # ended
        else:
            cycles.running[f"j{i}"] = replace(cycles.running[f"j{i}"], expected_end_s=2000.0 + i)  # renewed
    books, _ = cycles.step()  # the ends are not built: a changed end alone touches nothing
    assert books.version == version + 5 and books.state.free_units_total == 12_000 - 5_000


def test_a_gpu_with_one_milli_gpu_left_is_indexed_as_shared_and_moved_when_it_changes() -> None:
    cycles = Cycles("one-milli")
    cycles.running["big"] = running("big", [("n0003", 1, 999)], tenant="b")
    books, _ = cycles.step()
    assert books.state.shared["H100"] == [(1, 3, 1)]
    del cycles.running["big"]
    cycles.running["less"] = running("less", [("n0003", 1, 998)], tenant="b")
    books, _ = cycles.step()
    assert books.state.shared["H100"] == [(2, 3, 1)]


def test_slots_just_past_a_nodes_last_gpu_are_ignored_and_do_not_stop_the_rest() -> None:
    state = PlacementState(ClusterSnapshot(0.0, cluster()))
    state.allocate((GpuSlot("n0003", 2), GpuSlot("n0003", 0)))
    assert state.gpu_free[3] == [0, 1000]
    state.release((GpuSlot("n0003", 2), GpuSlot("nowhere", 0), GpuSlot("n0003", 0)))
    assert state.gpu_free[3] == [1000, 1000] and state.free_units_total == 12_000


def test_free_time_scans_follow_a_changed_expected_end_and_the_jobs_a_cycle_starts() -> None:
    """The free-time scans kept between cycles move with the ends alone (no GPU freed or taken) and with the
    GPUs a cycle allocates, and start over when a change log is cleared."""
    cycles = Cycles("scans")
    cycles.running = {"j1": whole("j1", "n0000", [0, 1], end_s=900.0), "j2": whole("j2", "n0000", [2], end_s=1200.0)}
    books, _ = cycles.step()
    books.ends = ends_by_node(books.state, books.running.values())
    assert free_time_scan(books.state, books.ends, "A100", 2) == {0: 900.0, 1: -math.inf, 2: -math.inf}
    cycles.running["j1"] = replace(cycles.running["j1"], expected_end_s=3000.0)
    books, _ = cycles.step()  # checks every scan against a fresh one
    assert free_time_scan(books.state, books.ends, "A100", 2)[0] == 1200.0
    # A cycle's own start takes GPUs of n0001 (the index's log) and adds its end (the ends' log).
    started = whole("j3", "n0001", [0, 1, 2], end_s=600.0)
    books.state.allocate(started.slots)
    books.commit([started], [])
    assert free_time_scan(books.state, books.ends, "A100", 2)[1] == 600.0
    # Logs that start over (epoch bumped) make the scans start over too.
    books.state.changes.nodes.clear()
    books.state.changes.epoch += 1
    books.state.release(started.slots)
    books.commit([], ["j3"])
    assert free_time_scan(books.state, books.ends, "A100", 2)[1] == -math.inf


def test_free_time_scans_start_over_when_a_change_log_rolls_over(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ChangeLog, "LIMIT", 1)
    cycles = Cycles("scan-rollover")
    cycles.running = {"j1": whole("j1", "n0000", [0, 1], end_s=900.0)}
    books, _ = cycles.step()
    books.ends = ends_by_node(books.state, books.running.values())
    free_time_scan(books.state, books.ends, "A100", 3)
    epoch = books.state.changes.epoch
    for gpu in range(3):  # three cycles' starts on n0001: the index's log rolls over on the way
        started = whole(f"s{gpu}", "n0001", [gpu], end_s=100.0 * (gpu + 1))
        books.state.allocate(started.slots)
        books.commit([started], [])
    assert books.state.changes.epoch > epoch and books.ends.changes.epoch > 0
    assert free_time_scan(books.state, books.ends, "A100", 3) == {0: 900.0, 1: 200.0}
    # A change on n0001 followed by enough changes on n0000 to roll the log over: n0001's change is no longer
    # in the log, so the scan starts over rather than read on from where it was.
    taken = whole("t", "n0001", [3])
    books.state.allocate(taken.slots)  # n0001 now has no GPU free at all
    shared = running("x", [("n0000", 2, 500)])
    books.state.allocate(shared.slots)
    books.state.release(shared.slots)
    assert free_time_scan(books.state, books.ends, "A100", 3) == {0: 900.0, 1: 300.0}


def test_free_time_scans_start_over_when_only_the_ends_log_rolls_over(monkeypatch: pytest.MonkeyPatch) -> None:
    """A job's new expected end moves no GPU: only the ends' log records it, and when that log alone starts over
    the scans start over too (nothing in the index's log would send them to the node)."""
    monkeypatch.setattr(ChangeLog, "LIMIT", 1)
    cycles = Cycles("ends-rollover")
    cycles.running = {"j1": whole("j1", "n0000", [0, 1], end_s=900.0)}
    books, _ = cycles.step()
    books.ends = ends_by_node(books.state, books.running.values())
    assert free_time_scan(books.state, books.ends, "A100", 3)[0] == 900.0
    state_epoch, ends_epoch = books.state.changes.epoch, books.ends.changes.epoch
    cycles.running["j1"] = replace(cycles.running["j1"], expected_end_s=4000.0)
    books, _ = cycles.step()
    assert books.state.changes.epoch == state_epoch and books.ends.changes.epoch == ends_epoch + 1
    assert free_time_scan(books.state, books.ends, "A100", 3)[0] == 4000.0


def test_a_scan_first_asked_for_after_both_logs_started_over_reads_every_node() -> None:
    cycles = Cycles("late-scan")
    cycles.running = {"j1": whole("j1", "n0000", [0, 1], end_s=900.0), "j2": whole("j2", "n0001", [0, 1], end_s=700.0)}
    books, _ = cycles.step()
    books.ends = ends_by_node(books.state, books.running.values())
    for log in (books.state.changes, books.ends.changes):  # as after one rollover each, with nothing logged since
        log.nodes.clear()
        log.epoch = 1
    assert free_time_scan(books.state, books.ends, "A100", 3) == {0: 900.0, 1: 700.0}


def test_a_reservation_reads_the_free_gpu_index_it_is_given_not_the_one_the_ends_were_built_on() -> None:
    cycles = Cycles("other-index")
    cycles.running = {"j1": whole("j1", "n0000", [0, 1, 2, 3], end_s=900.0),
                      "j2": whole("j2", "n0001", [0, 1, 2, 3], end_s=1500.0)}
    books, snapshot = cycles.step()
    books.ends = ends_by_node(books.state, books.running.values())
    wanted = job("w", gpus=4)
    assert reserve(books.state, wanted, books.ends, set(), 100.0, 60.0) == Reservation("w", frozenset({0}), 900.0)
    assert free_time_scan(books.state, books.ends, "A100", 4) == {0: 900.0, 1: 1500.0}  # kept for the books' index
    drained = PlacementState(replace(snapshot, node_states={"n0000": NodeState(drained=True)}))
    assert not drained.changes.nodes  # built, not changed: nothing in its log points at n0000
    assert reserve(drained, wanted, books.ends, set(), 100.0, 60.0) == Reservation("w", frozenset({1}), 1500.0)


def test_the_books_index_a_job_on_its_nodes_in_the_cluster_past_a_node_outside_it() -> None:
    cycles = Cycles("stray-on-node")
    cycles.running = {"stray": running("stray", [("nowhere", 0, 1000), ("n0002", 1, 1000)], priority=3),
                      "home": whole("home", "n0000", [0])}
    books, _ = cycles.step()
    assert {node: set(jobs) for node, jobs in books.on_node.items()} == {0: {"home"}, 2: {"stray"}}
    assert books.priorities == Counter({3: 1, 0: 1}) and books.lowest_priority() == 0
    del cycles.running["stray"]
    books, _ = cycles.step()
    assert {node: set(jobs) for node, jobs in books.on_node.items()} == {0: {"home"}}
    del cycles.running["home"]
    books, _ = cycles.step()
    assert books.on_node == {} and books.lowest_priority() == math.inf
