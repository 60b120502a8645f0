"""The slack rule in the simulator: caps lift on exactly the jobs in a waiting job's way, hand-computed;
and energy per completed GPU-hour."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
from schedkit import job

from greengpu.config.policy import load_policy
from greengpu.energy.power_model import busy_gpu
from greengpu.model import Cluster, Node, NodeType, Site, Tenant
from greengpu.policy import CappingPolicy, ClassCapping, Policy, SleepPolicy
from greengpu.sim.engine import Simulation

T0 = 1_700_000_000.0
ONE_GPU = NodeType(name="one", gpus=1, gpu_model="A100", gpu_idle_w=50, gpu_max_w=300, gpu_min_limit_w=100,
                   host_idle_w=100, host_sleep_w=10, boot_s=180)


def two_nodes() -> Cluster:
    # Tenant "a" may not borrow: with one GPU running it is at its quota.
    return Cluster(site=Site(pue=1.5), node_types={"one": ONE_GPU},
                   nodes=(Node("n1", "one"), Node("n2", "one")),
                   tenants={"a": Tenant("a", quota_gpus=1, borrow_limit_gpus=0), "b": Tenant("b", quota_gpus=1)})


def capped_policy(relax: bool = True) -> Policy:
    capping = CappingPolicy(enabled=True, classes={"training": ClassCapping(mode="fixed", limit_w=200)},
                            relax_when_queued=relax)
    return replace(load_policy("always-on"), capping=capping, sleep=SleepPolicy(enabled=False))


def test_a_quota_wait_lifts_the_cap_of_its_tenants_job_and_no_other() -> None:
    _, speed = busy_gpu(ONE_GPU, 200)
    assert speed < 1.0
    jobs = [job("a1", tenant="a", duration_s=3600, submit_time_s=T0),
            job("b1", tenant="b", duration_s=3600, submit_time_s=T0),
            job("a2", tenant="a", duration_s=600, submit_time_s=T0 + 1000)]
    simulation = Simulation(two_nodes(), capped_policy(), jobs)
    result = simulation.run().to_json()
    # a2 waits for its tenant's quota from 1,000 s: only a1's completion frees its way, so a1 runs
    # uncapped from then; b1 is in nobody's way and keeps its cap to the end.
    a1_end = 1000 + math.ceil(3600 - 1000 * speed)
    b1_end = math.ceil(3600 / speed)
    assert simulation.first_start["a2"] - T0 == a1_end
    assert simulation.finish_s["b1"] - T0 == b1_end
    assert result["wait_s"]["p99"] == a1_end - 1000
    # Without the rule a1 keeps its cap (the old rule saw no "capacity" wait here either).
    steady = Simulation(two_nodes(), capped_policy(relax=False), jobs)
    steady.run()
    assert steady.first_start["a2"] - T0 == math.ceil(3600 / speed) > a1_end


def test_energy_per_gpu_hour_counts_completed_work_at_full_speed() -> None:
    jobs = [job("a1", tenant="a", duration_s=3600, submit_time_s=T0),
            job("b1", tenant="b", duration_s=1800, submit_time_s=T0)]
    result = Simulation(two_nodes(), load_policy("always-on"), jobs).run().to_json()
    assert result["energy_kwh_per_gpu_hour"] == pytest.approx(result["energy_kwh"] / 1.5)
    capped = Simulation(two_nodes(), capped_policy(), jobs).run().to_json()
    # Capped jobs run longer but complete the same work: energy per GPU-hour counts the work.
    assert capped["energy_kwh_per_gpu_hour"] == pytest.approx(capped["energy_kwh"] / 1.5)
    nothing = Simulation(two_nodes(), load_policy("always-on"), jobs, until_s=60).run().to_json()
    assert nothing["energy_kwh_per_gpu_hour"] is None
