"""The tick caps the GPUs of a job it just placed for that job, not as idle GPUs.

A body that observes before it carries out the cycle (the daemon) asks the capping lever with GPUs that
were idle when it looked; the tick applies the cycle's placements first, as the simulator does by
starting jobs before it asks the lever."""

from __future__ import annotations

from schedkit import job, make_cluster, node_type

from greengpu.brain.control_tick import control_tick
from greengpu.capping.gpu_power import observe_typed_gpu
from greengpu.config.policy import load_policy
from greengpu.model import ClusterSnapshot, PendingJob, PlaceJob, SetPowerLimit
from greengpu.sleep.sleep_wake import SleepObservation


def limits_after_one_tick(pending: list[PendingJob]) -> tuple[dict[tuple[str, int], SetPowerLimit], set[str]]:
    kind = node_type(gpus=4)
    cluster = make_cluster([(2, kind, "r")])
    gpus = [observe_typed_gpu(n.name, i, kind, None) for n in cluster.nodes for i in range(4)]  # all idle now
    snapshot = ClusterSnapshot(100.0, cluster, (), tuple(pending), {})
    result = control_tick(snapshot, load_policy("default"), gpus, SleepObservation(now_s=100.0))
    placed = {a.job_id for a in result.actions if isinstance(a, PlaceJob)}
    return {(a.node, a.gpu_index): a for a in result.power if isinstance(a, SetPowerLimit)}, placed


def test_a_job_placed_this_tick_is_not_capped_as_an_idle_gpu() -> None:
    limits, placed = limits_after_one_tick([PendingJob(job("infer", gpus=2, job_class="inference")),
                                            PendingJob(job("train", gpus=4, job_class="training"))])
    assert placed == {"infer", "train"}
    idle = [a for a in limits.values() if a.reason.startswith("idle GPU")]
    assert len(idle) == 8 - 6  # only the two GPUs no job was placed on
    assert all(a.limit_w == 100.0 for a in idle)  # the default policy's idle GPUs go to their minimum
    busy = [a for a in limits.values() if not a.reason.startswith("idle GPU")]
    assert len(busy) == 6 and all(a.limit_w > 100.0 for a in busy)
    assert sum("inference" in a.reason for a in busy) == 2 and sum("training" in a.reason for a in busy) == 4


def test_without_placements_every_idle_gpu_is_idle() -> None:
    limits, placed = limits_after_one_tick([])
    assert placed == set()
    assert len(limits) == 8 and all(a.limit_w == 100.0 and a.reason.startswith("idle GPU") for a in limits.values())
