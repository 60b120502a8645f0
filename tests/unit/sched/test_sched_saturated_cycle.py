"""A full cluster's cycle asks one question per kind of waiting job (greengpu.sched.cycle.alike, `wait_alike`), and
still lets each job backfill that can: a shorter job alike to one that could not backfill may fit where
the longer one did not, on a node whose reservation starts between their ends.

The Driver also runs every cycle with fresh books and no shortcuts, and asserts the same decisions.
"""

from __future__ import annotations

from schedkit import Driver, job, make_cluster, node_type

from greengpu.model import GpuSlot, PlaceJob, RunningJob
from greengpu.policy import BackfillPolicy, PreemptionPolicy, SchedulerPolicy
from greengpu.sched.waits import WaitReason


def _running(job_id: str, node: str, gpus: int, end_s: float) -> RunningJob:
    return RunningJob(job(job_id, gpus=gpus, duration_s=end_s), tuple(GpuSlot(node, g) for g in range(gpus)),
                      start_time_s=0.0, expected_end_s=end_s)


def _full_cluster_with_two_reservations() -> Driver:
    """n0 and n1 free up at 3600 s (n1 has 2 GPUs free now), n3 at 1800 s (2 free now), n2 not before
    99,999 s. An 8-GPU job reserves n3 from 1800 s, then a 16-GPU gang n0+n1 from 3600 s; nothing else is free."""
    cluster = make_cluster([(4, node_type(8), "d0")])
    policy = SchedulerPolicy(preemption=PreemptionPolicy(enabled=False), backfill=BackfillPolicy(reservations=2))
    driver = Driver(cluster, policy)
    driver.start_running(_running("r0", "n0000", 8, 3600.0))
    driver.start_running(_running("r1", "n0001", 6, 3600.0))
    driver.start_running(_running("r2", "n0002", 8, 99_999.0))
    driver.start_running(_running("r3", "n0003", 6, 1800.0))
    driver.submit(job("eight", gpus=8, priority=9, duration_s=7200),
                  job("gang", gpus=16, priority=8, duration_s=7200, gpus_per_node=8))
    return driver


def test_a_shorter_job_alike_backfills_where_a_longer_one_failed() -> None:
    driver = _full_cluster_with_two_reservations()
    # Alike in all but duration, in this queue order: ends 3000 s, 2500 s, 1000 s.
    driver.submit(job("long", gpus=2, priority=3, duration_s=3000), job("middle", gpus=2, priority=2, duration_s=2500),
                  job("short", gpus=2, priority=1, duration_s=1000))
    result = driver.cycle(auto_finish=False)

    placed = {a.job_id: a for a in result.actions if isinstance(a, PlaceJob)}
    assert {a.job_id: {s.node for s in a.slots} for a in placed.values()} == {"long": {"n0001"}, "short": {"n0003"}}
    assert all(a.backfilled for a in placed.values())
    assert not placed.keys() & result.waits.keys()
    # "middle" ends after n3's reservation starts and n1 is taken by "long": it waits for capacity.
    assert result.waits["middle"].reason is WaitReason.CAPACITY
    assert {r.job_id: (r.start_s, r.nodes) for r in result.reservations} == {"eight": (1800.0, frozenset({3})),
                                                                            "gang": (3600.0, frozenset({0, 1}))}


def test_jobs_alike_too_long_to_backfill_share_one_wait_and_none_starts() -> None:
    driver = _full_cluster_with_two_reservations()
    driver.submit(*[job(f"w{i}", gpus=2, duration_s=4000 + i) for i in range(50)])
    result = driver.cycle(auto_finish=False)

    assert not [a for a in result.actions if isinstance(a, PlaceJob)]
    waits = {result.waits[f"w{i}"] for i in range(50)}
    assert len(waits) == 1 and next(iter(waits)).reason is WaitReason.CAPACITY
