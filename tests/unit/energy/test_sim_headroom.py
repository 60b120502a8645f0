"""The headroom rule (greengpu.sleep.headroom): with no GPUs to spare beyond the warm reserve, every cap
lifts, although no job waits; when a finish gives the slack back, the caps return. Hand-computed paces."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
from schedkit import job
from test_sim_slack import ONE_GPU, T0, capped_policy

from greengpu.energy.power_model import busy_gpu
from greengpu.model import Cluster, Node, Site, Tenant
from greengpu.policy import Policy, SleepPolicy
from greengpu.sim.engine import Simulation
from greengpu.sleep.headroom import levers_have_slack


@pytest.mark.parametrize(("total", "busy", "floor", "share", "slack"), [
    (10, 0, 0, 0.35, True),    # an empty cluster
    (10, 7, 0, 0.35, True),    # 3 free, floor(2.45) = 2 asked
    (10, 8, 0, 0.35, True),    # 2 free, floor(2.8) = 2 asked
    (10, 9, 0, 0.35, False),   # 1 free, floor(3.15) = 3 asked
    (10, 10, 0, 0.0, True),    # no reserve asked: full is not "no slack" (a queue lifts caps then)
    (10, 9, 2, 0.0, False),    # the fixed floor alone: 1 free, 2 asked
    (1000, 741, 0, 0.35, True),
    (1000, 742, 0, 0.35, False),
])
def test_slack_is_the_free_gpus_covering_the_warm_reserve(total: int, busy: int, floor: int, share: float,
                                                          slack: bool) -> None:
    policy = SleepPolicy(enabled=False, warm_reserve_gpus=floor, warm_reserve_busy_fraction=share)
    free, asked = total - busy, max(floor, math.floor(share * busy + 1e-9))
    assert slack == (free >= asked)
    assert levers_have_slack(total, busy, policy) is slack


def four_nodes() -> Cluster:
    return Cluster(site=Site(pue=1.5), node_types={"one": ONE_GPU}, nodes=tuple(Node(f"n{i}", "one") for i in range(4)),
                   tenants={"a": Tenant("a", quota_gpus=4)})


def reserving(share: float) -> Policy:
    # Sleep stays off: the reserve's settings still say how big a burst the cluster must take.
    policy = capped_policy()
    return replace(policy, sleep=SleepPolicy(enabled=False, warm_reserve_busy_fraction=share))


def test_caps_lift_on_every_job_while_no_slack_is_left_and_return_with_it() -> None:
    _, speed = busy_gpu(ONE_GPU, 200)
    assert speed < 1.0
    jobs = [job("j1", tenant="a", duration_s=3600, submit_time_s=T0),
            job("j2", tenant="a", duration_s=3600, submit_time_s=T0),
            job("j3", tenant="a", duration_s=600, submit_time_s=T0 + 1000)]
    # A reserve of all the GPUs in use: with 2 busy, 2 free cover it (capped); with 3 busy, 1 free does not.
    run = Simulation(four_nodes(), reserving(1.0), jobs)
    run.run()
    assert run.first_start["j3"] == T0 + 1000  # it never waited: nothing in the queue lifted the caps
    assert run.finish_s["j3"] - T0 == 1600  # uncapped from its start (no slack while it runs)
    # j1: capped for 1,000 s, uncapped for 600 s, capped again once j3's end gave the slack back.
    done_s = 1000 * speed + 600
    assert run.finish_s["j1"] - T0 == 1600 + math.ceil((3600 - done_s) / speed - 1e-9)
    # With no reserve asked, 3 busy of 4 is slack: everything runs capped to the end.
    steady = Simulation(four_nodes(), reserving(0.0), jobs)
    steady.run()
    assert steady.finish_s["j1"] - T0 == math.ceil(3600 / speed - 1e-9)
    assert steady.finish_s["j3"] - T0 == 1000 + math.ceil(600 / speed - 1e-9)
    assert run.finish_s["j1"] < steady.finish_s["j1"]


def test_a_replay_that_only_drains_keeps_no_reserve_so_its_caps_return() -> None:
    """Four jobs at once on five GPUs with a reserve of all the GPUs in use: no slack, caps lift. Two days
    on, the short one ends and nothing has arrived for a day: the reserve's share of use counts no GPUs
    (greengpu.sleep.arrivals), so the three left get their caps back."""
    _, speed = busy_gpu(ONE_GPU, 200)
    day = 86_400
    cluster = replace(four_nodes(), nodes=tuple(Node(f"n{i}", "one") for i in range(5)),
                      tenants={"a": Tenant("a", quota_gpus=5)})
    jobs = [job(f"j{i}", tenant="a", duration_s=3 * day, submit_time_s=T0) for i in range(3)]
    jobs.append(job("short", tenant="a", duration_s=2 * day, submit_time_s=T0))
    run = Simulation(cluster, reserving(1.0), jobs)
    run.run()
    assert run.finish_s["short"] - T0 == 2 * day  # uncapped all along
    assert run.finish_s["j0"] - T0 == 2 * day + math.ceil(day / speed - 1e-9)  # capped for its last day
    assert run.arrivals.gpus(T0 + 3 * day) == 0
