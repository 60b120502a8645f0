"""Jobs with node constraints (Slurm's -w, -x, --constraint, -p, --exclusive): placed and woken for only on the
nodes they allow; jobs without constraints decide exactly as before."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from schedkit import job, make_cluster, node_type

from greengpu.errors import BadInput
from greengpu.model import (
    ClusterSnapshot,
    GpuSlot,
    Job,
    NodeState,
    PendingJob,
    PlaceJob,
    PowerState,
    RunningJob,
    WakeNode,
)
from greengpu.policy import SchedulerPolicy
from greengpu.sched.core import WAIT_CAPACITY, WAIT_WAKE, schedule_cycle
from greengpu.sched.node_rules import node_allows

X4 = node_type(4, name="a100x4")


def run(pending: list[Job], power: dict[str, PowerState], running: tuple[RunningJob, ...] = (),
        features: dict[str, frozenset[str]] | None = None, incremental: bool = False,
        ) -> tuple[list[str], dict[str, str], dict[str, PlaceJob]]:
    cluster = make_cluster([(4, X4, "r")])
    if features:
        cluster = replace(cluster, nodes=tuple(replace(n, features=features.get(n.name, frozenset()))
                                               for n in cluster.nodes))
    snapshot = ClusterSnapshot(time_s=100.0, cluster=cluster, running=running,
                               pending=tuple(PendingJob(j) for j in pending),
                               node_states={name: NodeState(power=state) for name, state in power.items()})
    result = schedule_cycle(snapshot, SchedulerPolicy(), incremental=incremental)
    wakes = [a.node for a in result.actions if isinstance(a, WakeNode)]
    placed = {a.job_id: a for a in result.actions if isinstance(a, PlaceJob)}
    return wakes, dict(result.waiting), placed


ALL_ASLEEP = {f"n000{i}": PowerState.ASLEEP for i in range(4)}


def test_a_pinned_job_wakes_only_its_pinned_node() -> None:
    # The issue's case: a 4-GPU job pinned with -w to the last node; without the pin the tightest node is n0000.
    for incremental in (False, True):
        wakes, waiting, _ = run([job("pinned", gpus=4, required_nodes=frozenset({"n0003"}))], ALL_ASLEEP,
                                incremental=incremental)
        assert wakes == ["n0003"] and waiting == {"pinned": WAIT_WAKE}
    wakes, _, _ = run([job("free", gpus=4)], ALL_ASLEEP)
    assert wakes == ["n0000"]


def test_a_pinned_job_is_placed_on_its_node_or_waits_and_wakes_nothing_else() -> None:
    awake = {"n0000": PowerState.AWAKE}
    _, waiting, placed = run([job("pinned", gpus=2, required_nodes=frozenset({"n0002"}))],
                             {**awake, "n0001": PowerState.AWAKE, "n0002": PowerState.AWAKE, "n0003": PowerState.AWAKE})
    assert {s.node for s in placed["pinned"].slots} == {"n0002"} and waiting == {}
    # Its node busy, other nodes free: it waits (never placed elsewhere) and no node wakes for it.
    busy = RunningJob(job=job("busy", gpus=4, duration_s=36_000), slots=tuple(GpuSlot("n0002", g) for g in range(4)),
                      start_time_s=0.0, expected_end_s=36_000.0)
    wakes, waiting, placed = run([job("pinned", gpus=2, required_nodes=frozenset({"n0002"}))],
                                 {"n0003": PowerState.ASLEEP}, running=(busy,))
    assert placed == {} and wakes == [] and waiting == {"pinned": WAIT_CAPACITY}


def test_excluded_nodes_features_and_partitions_narrow_the_wake() -> None:
    wakes, _, _ = run([job("x", gpus=4, excluded_nodes=frozenset({"n0000", "n0001"}))], ALL_ASLEEP)
    assert wakes == ["n0002"]
    features = {"n0001": frozenset({"ib"}), "n0003": frozenset({"ib", "nvlink"})}
    wakes, _, _ = run([job("f", gpus=4, features=(frozenset({"ib", "nvlink"}),))], ALL_ASLEEP, features=features)
    assert wakes == ["n0003"]
    wakes, _, _ = run([job("f", gpus=4, features=(frozenset({"nvlink"}), frozenset({"ib"})))], ALL_ASLEEP,
                      features=features)
    assert wakes == ["n0001"]
    wakes, waiting, _ = run([job("f", gpus=4, features=(frozenset({"none"}),))], ALL_ASLEEP, features=features)
    assert wakes == [] and waiting == {"f": WAIT_CAPACITY}


def test_exclusive_jobs_take_whole_nodes_when_woken_for() -> None:
    # Two 1-GPU jobs share one woken node; two exclusive ones need a node each.
    wakes, _, _ = run([job("a", gpus=1), job("b", gpus=1)], ALL_ASLEEP)
    assert wakes == ["n0000"]
    wakes, _, _ = run([job("a", gpus=1, exclusive=True), job("b", gpus=1, exclusive=True)], ALL_ASLEEP)
    assert sorted(wakes) == ["n0000", "n0001"]


def test_an_exclusive_job_is_not_placed_beside_running_work() -> None:
    busy = RunningJob(job=job("busy", gpus=1, duration_s=36_000), slots=(GpuSlot("n0000", 0),),
                      start_time_s=0.0, expected_end_s=36_000.0)
    _, _, placed = run([job("e", gpus=1, exclusive=True)], {}, running=(busy,))
    assert {s.node for s in placed["e"].slots} != {"n0000"}
    _, _, placed = run([job("s", gpus=1)], {}, running=(busy,))
    assert {s.node for s in placed["s"].slots} == {"n0000"}  # best fit, as ever, without the constraint


def test_node_allows_reads_every_constraint_and_unknown_partitions_allow() -> None:
    node = make_cluster([(1, X4, "r")]).nodes[0]
    assert node_allows(node, job("j"))
    assert node_allows(node, job("j", partitions=frozenset({"gpu"})))
    assert not node_allows(replace(node, partitions=frozenset({"cpu"})), job("j", partitions=frozenset({"gpu"})))
    assert node_allows(replace(node, partitions=frozenset({"cpu", "gpu"})), job("j", partitions=frozenset({"gpu"})))
    assert job("j").node_rule is None and job("j", exclusive=True).node_rule is not None


def test_inventory_features_and_partitions_reach_the_core(tmp_path: Path) -> None:
    from inventories import a100_type, write_inventory

    from greengpu.config.inventory import load_cluster

    inventory = write_inventory(tmp_path / "c.yaml", {"g": a100_type(gpus=4)}, [
        '{name: "n[1-2]", type: g}', '{name: "n3", type: g, features: [ib, nvlink], partitions: "gpu,long"}'])
    cluster = load_cluster(inventory)
    assert cluster.nodes[2].features == {"ib", "nvlink"} and cluster.nodes[2].partitions == {"gpu", "long"}
    assert cluster.nodes[0].features == frozenset() and cluster.nodes[0].partitions == frozenset()
    snapshot = ClusterSnapshot(time_s=0.0, cluster=cluster, pending=(
        PendingJob(job("ib", gpus=4, features=(frozenset({"ib"}),))),),
        node_states={n.name: NodeState(power=PowerState.ASLEEP) for n in cluster.nodes})
    result = schedule_cycle(snapshot, SchedulerPolicy(), incremental=False)
    assert [a.node for a in result.actions if isinstance(a, WakeNode)] == ["n3"]
    bad = write_inventory(tmp_path / "bad.yaml", {"g": a100_type(gpus=4)}, ['{name: "n1", type: g, features: 3}'])
    with pytest.raises(BadInput, match="features"):
        load_cluster(bad)
