"""MIG instances and time-slice replicas in the scheduling core (greengpu.sched.shared_cycle)."""

from __future__ import annotations

import math
from dataclasses import replace

from schedkit import job
from sharingkit import ONE_G, a100, lab

from greengpu.model import (
    GPU_UNITS,
    TIMESLICE,
    Cluster,
    ClusterSnapshot,
    GpuSlot,
    MigPartition,
    NodeState,
    PartitionGpu,
    PendingJob,
    PlaceJob,
    PowerState,
    RunningJob,
    Tenant,
    WakeNode,
)
from greengpu.policy import SchedulerPolicy
from greengpu.sched.core import schedule_cycle
from greengpu.sched.invariants import check_invariants
from greengpu.sched.shared_cycle import split_shared
from greengpu.sched.waits import WaitReason


def snapshot(cluster: Cluster, pending: list[object], running: tuple[RunningJob, ...] = (),
             partitions: dict[tuple[str, int], MigPartition] | None = None, time_s: float = 0.0,
             states: dict[str, NodeState] | None = None) -> ClusterSnapshot:
    return ClusterSnapshot(time_s, cluster, running, tuple(PendingJob(j) for j in pending),  # type: ignore[arg-type]
                           states or {}, mig_partitions=partitions or {})


def ran(job_id: str, node: str, gpu: int, instance: str, profile: str, units: int, tenant: str = "t",
        job_class: str = "batch") -> RunningJob:
    return RunningJob(job(job_id, tenant=tenant, gpu_profile=profile, job_class=job_class),
                      (GpuSlot(node, gpu, units, instance),), 0.0, 3600.0)


def places(result: object) -> dict[str, PlaceJob]:
    return {a.job_id: a for a in result.actions if isinstance(a, PlaceJob)}  # type: ignore[attr-defined]


SEVEN = MigPartition(tuple(f"1g.5gb@{s}" for s in range(7)))
POLICY = SchedulerPolicy()


def test_a_mig_job_takes_a_free_instance_on_the_fullest_gpu() -> None:
    cluster = lab(a100("mig", mig=2))
    running = (ran("a", "n0", 0, "1g.5gb@0", "1g.5gb", ONE_G), ran("b", "n0", 1, "1g.5gb@0", "1g.5gb", ONE_G),
               ran("c", "n0", 1, "1g.5gb@1", "1g.5gb", ONE_G))
    snap = snapshot(cluster, [job("new", gpu_profile="1g.5gb", job_class="inference")], running,
                    {("n0", 0): SEVEN, ("n0", 1): SEVEN})
    result = schedule_cycle(snap, POLICY)
    slot = places(result)["new"].slots
    assert slot == (GpuSlot("n0", 1, ONE_G, "1g.5gb@2"),)  # GPU 1 holds two already: best fit keeps GPU 0 roomier
    assert not [a for a in result.actions if isinstance(a, PartitionGpu)]


def test_a_layout_that_fits_is_preferred_to_a_repartition() -> None:
    cluster = lab(a100("mig", mig=2))
    # GPU 0 is not partitioned (free to repartition), GPU 1 has a free 3g.20gb instance
    snap = snapshot(cluster, [job("new", gpu_profile="3g.20gb")], (),
                    {("n0", 1): MigPartition(("4g.20gb@0", "3g.20gb@4"))})
    result = schedule_cycle(snap, POLICY)
    assert places(result)["new"].slots == (GpuSlot("n0", 1, 3 * GPU_UNITS // 7, "3g.20gb@4"),)
    assert not [a for a in result.actions if isinstance(a, PartitionGpu)]


def test_without_a_fitting_instance_an_unused_gpu_is_repartitioned_and_the_job_waits() -> None:
    cluster = lab(a100("mig", mig=2))
    # GPU 0 runs a 4g job: it cannot be repartitioned; GPU 1 is partitioned for 1g.5gb, none in use
    running = (ran("big", "n0", 0, "4g.20gb@0", "4g.20gb", 4 * GPU_UNITS // 7),)
    partitions = {("n0", 0): MigPartition(("4g.20gb@0", "3g.20gb@4")), ("n0", 1): SEVEN}
    first = schedule_cycle(snapshot(cluster, [job("x", gpu_profile="2g.10gb"), job("y", gpu_profile="2g.10gb",
                                                                                   submit_time_s=1.0)],
                                    running, partitions), POLICY)
    parts = [a for a in first.actions if isinstance(a, PartitionGpu)]
    assert parts == [PartitionGpu("n0", 1, ("2g.10gb@0", "2g.10gb@2", "2g.10gb@4", "1g.5gb@6"),
                                  "2g.10gb for x")]  # one repartition: y counts on the same new partition
    assert not places(first)
    assert first.waits["x"].reason is WaitReason.CAPACITY and first.waits["x"].nodes == frozenset({"n0"})
    assert first.waits["y"].reason is WaitReason.CAPACITY
    # while it reconfigures nothing lands there and nothing is repartitioned again
    reconfiguring = {**partitions, ("n0", 1): MigPartition(parts[0].instances, ready_s=60.0)}
    during = schedule_cycle(snapshot(cluster, [job("x", gpu_profile="2g.10gb"), job("y", gpu_profile="2g.10gb",
                                                                                    submit_time_s=1.0)],
                                     running, reconfiguring, time_s=30.0), POLICY)
    assert not during.actions and during.unchanged_until_s == 60.0
    after = schedule_cycle(snapshot(cluster, [job("x", gpu_profile="2g.10gb"), job("y", gpu_profile="2g.10gb",
                                                                                   submit_time_s=1.0)],
                                    running, reconfiguring, time_s=60.0), POLICY)
    assert {a.job_id: a.slots[0].instance for a in places(after).values()} == {"x": "2g.10gb@0", "y": "2g.10gb@2"}


def test_a_gpu_with_an_instance_in_use_is_never_repartitioned() -> None:
    cluster = lab(a100("mig", mig=1))
    running = (ran("small", "n0", 0, "1g.5gb@0", "1g.5gb", ONE_G),)
    result = schedule_cycle(snapshot(cluster, [job("big", gpu_profile="7g.40gb")], running, {("n0", 0): SEVEN}),
                            POLICY)
    assert not result.actions
    assert result.waits["big"].reason is WaitReason.CAPACITY


def test_time_slicing_only_for_the_allowed_classes() -> None:
    cluster = lab(a100("ts", sliced=2))
    result = schedule_cycle(snapshot(cluster, [job("nb", gpu_profile=TIMESLICE, job_class="interactive"),
                                               job("train", gpu_profile=TIMESLICE, job_class="training")]), POLICY)
    assert places(result)["nb"].slots == (GpuSlot("n0", 0, GPU_UNITS // 4, TIMESLICE),)
    assert "train" not in places(result)
    assert result.waits["train"].reason is WaitReason.NO_MODEL


def test_replicas_fill_the_fullest_gpu_and_never_exceed_their_count() -> None:
    cluster = lab(a100("ts", sliced=2, replicas=2))
    running = (ran("r0", "n0", 1, TIMESLICE, TIMESLICE, GPU_UNITS // 2),)
    pending = [job(f"j{i}", gpu_profile=TIMESLICE, job_class="batch", submit_time_s=i) for i in range(4)]
    result = schedule_cycle(snapshot(cluster, pending, running), POLICY)
    got = {job_id: a.slots[0].gpu_index for job_id, a in places(result).items()}
    assert got == {"j0": 1, "j1": 0, "j2": 0}  # GPU 1 is fuller: its last replica first
    assert result.waits["j3"].reason is WaitReason.CAPACITY


def test_whole_gpu_and_fractional_jobs_never_land_on_shared_gpus() -> None:
    cluster = lab(a100("mixed", mig=2, sliced=1))
    result = schedule_cycle(snapshot(cluster, [job("two", gpus=2), job("half", gpus=0.5, submit_time_s=1.0),
                                               job("one", gpus=1, submit_time_s=2.0)]), POLICY)
    got = places(result)
    assert [s.gpu_index for s in got["half"].slots] == [3]
    assert "two" not in got or all(s.gpu_index == 3 for s in got["two"].slots)
    used = [s.gpu_index for a in got.values() for s in a.slots]
    assert all(gpu == 3 for gpu in used)  # only GPU 3 takes ordinary work: 0-1 are MIG, 2 is time-sliced


def test_quotas_count_an_instance_as_its_slices() -> None:
    tenant = Tenant("small", quota_gpus=0.5, borrow_limit_gpus=0.0)
    cluster = lab(a100("mig", mig=1), tenants=(tenant,))
    pending = [job(f"j{i}", tenant="small", gpu_profile="1g.5gb", submit_time_s=i) for i in range(4)]
    result = schedule_cycle(snapshot(cluster, pending, (), {("n0", 0): SEVEN}), POLICY)
    assert sorted(places(result)) == ["j0", "j1", "j2"]  # 3/7 of a GPU within 0.5; a fourth would be 4/7
    assert result.waits["j3"].reason is WaitReason.QUOTA
    # the main pass sees the same charge: a whole-GPU job of the tenant is over quota already
    held = tuple(RunningJob(job(a.job_id, tenant="small", gpu_profile="1g.5gb"), a.slots, 0.0, 3600.0)
                 for a in places(result).values())
    after = schedule_cycle(snapshot(cluster, [job("whole", tenant="small", gpus=1)], held,
                                    {("n0", 0): SEVEN}), POLICY)
    assert after.waits["whole"].reason is WaitReason.QUOTA


def test_a_sleeping_node_with_a_fitting_gpu_is_woken() -> None:
    cluster = lab(a100("ts", sliced=1))
    asleep = {"n0": NodeState(power=PowerState.ASLEEP)}
    result = schedule_cycle(snapshot(cluster, [job("nb", gpu_profile=TIMESLICE, job_class="interactive")],
                                     states=asleep), POLICY)
    assert [a for a in result.actions if isinstance(a, WakeNode)] == [WakeNode("n0", "needed by nb")]
    assert result.waits["nb"].reason is WaitReason.WAKE


def test_a_cluster_without_sharing_blocks_takes_the_main_pass_alone() -> None:
    cluster = lab(a100("plain"))
    snap = snapshot(cluster, [job("a", gpus=1)])
    assert split_shared(snap) == (snap, ())
    assert split_shared(snap)[0] is snap
    result = schedule_cycle(snap, POLICY)
    assert places(result)["a"].slots == (GpuSlot("n0", 0),)
    # a profile job on a cluster that offers none never gets whole GPUs
    alone = schedule_cycle(snapshot(cluster, [job("m", gpu_profile="1g.5gb")]), POLICY)
    assert not alone.actions


def test_the_invariant_checks_catch_broken_sharing() -> None:
    cluster = lab(a100("mixed", mig=1, sliced=1, replicas=2))
    partitions = {("n0", 0): SEVEN}
    good = (ran("a", "n0", 0, "1g.5gb@0", "1g.5gb", ONE_G), ran("b", "n0", 1, TIMESLICE, TIMESLICE, 500))
    assert check_invariants(snapshot(cluster, [], good, partitions)) == []
    whole = RunningJob(job("w"), (GpuSlot("n0", 0),), 0.0, 1.0)
    twice = ran("c", "n0", 0, "1g.5gb@0", "1g.5gb", ONE_G)
    stray = ran("d", "n0", 0, "3g.20gb@4", "3g.20gb", 3 * GPU_UNITS // 7)
    over = ran("e", "n0", 1, TIMESLICE, TIMESLICE, 250), ran("f", "n0", 1, TIMESLICE, TIMESLICE, 250)
    problems = check_invariants(snapshot(cluster, [], (*good, whole, twice, stray, *over), partitions))
    text = "\n".join(problems)
    assert "w asked for no profile and runs on shared GPU n0:0" in text
    assert "MIG instance 1g.5gb@0 of n0:0 held by a and c" in text
    assert "d holds 3g.20gb@4 of n0:0, not in its partition" in text
    assert "time-sliced GPU n0:1 has 3 of 2 replicas taken" in text


def test_nothing_decided_promises_to_stand_until_a_gpu_is_ready() -> None:
    cluster = lab(a100("mig", mig=1))
    snap = snapshot(cluster, [job("x", gpu_profile="7g.40gb")], (),
                    {("n0", 0): MigPartition(("7g.40gb@0",), ready_s=500.0)}, time_s=100.0)
    result = schedule_cycle(snap, POLICY)
    assert not result.actions and result.unchanged_until_s == 500.0
    ready = schedule_cycle(replace(snap, time_s=500.0), POLICY)
    assert places(ready)["x"].slots[0].instance == "7g.40gb@0"
    assert math.isinf(ready.unchanged_until_s)


def test_a_gpu_repartitioned_this_cycle_gives_none_of_its_old_instances() -> None:
    # found by the replay fuzz: tenant b's 2g.10gb job goes first (fair share) and repartitions the unused 1g
    # GPU; tenant a's 1g.5gb job after it must not take an instance of the old partition
    cluster = lab(a100("mig", mig=1))
    busy = tuple(RunningJob(job(f"a{i}", tenant="a", gpus=1), (GpuSlot("n0", 3),), 0.0, 3600.0) for i in range(1))
    result = schedule_cycle(snapshot(cluster, [job("b2", tenant="b", gpu_profile="2g.10gb"),
                                               job("a1", tenant="a", gpu_profile="1g.5gb", submit_time_s=1.0)],
                                     busy, {("n0", 0): SEVEN}), POLICY)
    assert [a.job_id for a in result.actions if isinstance(a, PlaceJob)] == []
    assert [a.gpu_index for a in result.actions if isinstance(a, PartitionGpu)] == [0]
    assert result.waits["a1"].reason is WaitReason.CAPACITY


def test_a_job_counts_only_on_coming_instances_its_quota_admits() -> None:
    sxm = a100("sxm", mig=1)
    pcie = replace(a100("pcie", mig=1), gpu_model="A100-PCIE-40GB")
    tenant = Tenant("a", quota_gpus_by_model={"A100-PCIE-40GB": 1.0}, borrow_limit_gpus=0.0)
    cluster = lab(sxm, pcie, tenants=(tenant,))
    whole = MigPartition(("7g.40gb@0",))
    running = (ran("c", "n1", 0, "7g.40gb@0", "7g.40gb", GPU_UNITS, tenant="c"),)
    result = schedule_cycle(snapshot(cluster, [job("b1", tenant="b", gpu_profile="2g.10gb", priority=1),
                                               job("a1", tenant="a", gpu_profile="1g.5gb")],
                                     running, {("n1", 0): whole}), POLICY)
    assert [a.node for a in result.actions if isinstance(a, PartitionGpu)] == ["n0"]
    assert result.waits["b1"].nodes == frozenset({"n0"})
    # the new partition's 1g.5gb@6 is on a model tenant a has no quota on: it waits for its own GPUs
    assert result.waits["a1"].reason is WaitReason.CAPACITY and result.waits["a1"].detail == ""


def test_no_node_is_woken_for_whole_gpus_its_shared_gpus_would_not_give() -> None:
    cluster = lab(a100("plain"), a100("mig", mig=2))
    busy = (RunningJob(job("r", gpus=4), tuple(GpuSlot("n0", g) for g in range(4)), 0.0, 3600.0),)
    asleep = {"n1": NodeState(power=PowerState.ASLEEP)}
    three = schedule_cycle(snapshot(cluster, [job("three", gpus=3)], busy, states=asleep), POLICY)
    assert not [a for a in three.actions if isinstance(a, WakeNode)]  # n1 has 2 GPUs for whole work, not 4
    two = schedule_cycle(snapshot(cluster, [job("two", gpus=2)], busy, states=asleep), POLICY)
    assert [a.node for a in two.actions if isinstance(a, WakeNode)] == ["n1"]


def test_a_replay_names_whole_gpu_jobs_only_shared_gpus_could_hold() -> None:
    from greengpu.sim.feasibility import never_fits_reason

    cluster = lab(a100("mig", mig=2), a100("ts", sliced=1))
    # 2 + 3 GPUs take whole-GPU work, not 8
    assert never_fits_reason(job("six", gpus=6), cluster) == (
        "job six asks for 6 GPUs, more than the cluster's 5 A100-SXM4-40GB GPUs")
    assert never_fits_reason(job("four", gpus=4, gpus_per_node=4), cluster) == (
        "job four asks for 4 GPUs per node; no node of its GPU models has that many")
    assert never_fits_reason(job("three", gpus=3, gpus_per_node=3), cluster) is None
    assert never_fits_reason(job("m", gpu_profile="1g.5gb"), cluster) is None
    assert never_fits_reason(job("t", gpu_profile=TIMESLICE, job_class="training"), cluster) == (
        "job t asks for a time-slice replica; no time-sliced GPU takes training jobs")


def test_a_memory_cap_counts_an_instance_as_its_share_of_the_gpus_memory() -> None:
    tenant = Tenant("small", quota_gpus=4.0, max_gpu_memory_gb=12.0)  # a 40 GB GPU: 1/7 of it is 5.7 GB
    cluster = lab(a100("mig", mig=1), tenants=(tenant,))
    pending = [job(f"j{i}", tenant="small", gpu_profile="1g.5gb", submit_time_s=i) for i in range(3)]
    result = schedule_cycle(snapshot(cluster, pending, (), {("n0", 0): SEVEN}), POLICY)
    assert sorted(places(result)) == ["j0", "j1"]
    assert result.waits["j2"].reason is WaitReason.QUOTA
    assert result.waits["j2"].detail == "tenant at its GPU memory cap"


def test_waits_that_follow_the_queue_order_promise_no_longer_than_it_stands() -> None:
    cluster = lab(a100("mig", mig=1))
    coming = {("n0", 0): MigPartition(("3g.20gb@0", "3g.20gb@4"), ready_s=10_000.0)}
    pending = [job(f"j{i}", gpu_profile="3g.20gb", submit_time_s=float(i)) for i in range(3)]
    result = schedule_cycle(snapshot(cluster, pending, (), coming, time_s=100.0), POLICY)
    assert not result.actions
    assert [result.waits[f"j{i}"].detail != "" for i in range(3)] == [True, True, False]  # two instances coming
    # j0's first age-boost step (an hour after submit) is the first time the order could change
    assert result.unchanged_until_s == 3600.0
