"""Hand-computable simulator scenarios: exact energy, cost, CO2; idle-timeout sleep and wake; hourly tariff."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
from schedkit import job

from greengpu.config.policy import load_policy
from greengpu.model import Cluster, Node, NodeType, Site, TimeSeries
from greengpu.sim.engine import Simulation, simulate

T0 = 1_700_000_000.0  # a Tuesday, 22:13 UTC
ONE_GPU = NodeType(name="one", gpus=1, gpu_model="A100", gpu_idle_w=50, gpu_max_w=300, gpu_min_limit_w=100,
                   host_idle_w=100, host_sleep_w=10, boot_s=180)


def one_node(site: Site | None = None) -> Cluster:
    return Cluster(site=site or Site(pue=1.5, price_per_kwh=0.2, carbon_g_per_kwh=400),
                   node_types={"one": ONE_GPU}, nodes=(Node("n1", "one"),), tenants={})


def kwh(watts: float, seconds: float) -> float:
    return watts * seconds / 3_600_000


def test_one_node_one_job_exact_energy_cost_co2() -> None:
    result = simulate(one_node(), load_policy("always-on"), [job("j", gpus=1, duration_s=3600, submit_time_s=T0)])
    assert result["jobs_completed"] == 1
    assert result["gpu_energy_kwh"] == pytest.approx(0.3)  # 300 W for one hour
    assert result["energy_kwh"] == pytest.approx((0.3 + 0.1) * 1.5)
    assert result["cost"] == pytest.approx(0.6 * 0.2)
    assert result["co2_kg"] == pytest.approx(0.6 * 0.4)
    assert result["wait_s"] == {"p50": 0.0, "p95": 0.0, "p99": 0.0, "mean": 0.0}
    assert result["makespan_s"] == 3600
    assert result["gpu_hours_allocated"] == pytest.approx(1.0)
    assert result["invariant_violations"] == 0


def test_idle_timeout_suspends_after_exactly_its_timeout_and_pays_the_boot_delay() -> None:
    jobs = [job("a", duration_s=600, submit_time_s=T0), job("b", duration_s=600, submit_time_s=T0 + 5000)]
    result = simulate(one_node(), load_policy("idle-timeout"), jobs)
    suspend_at = 600 + 1800  # idle from 600 s, SuspendTime 30 min
    asleep_at = suspend_at + 30  # the suspend itself takes 30 s at idle power
    assert result["wakes"] == 1
    assert result["node_sleep_hours"] == pytest.approx((5000 - asleep_at) / 3600)
    assert result["wait_s"]["p95"] == 180  # b waits exactly the boot time
    assert result["makespan_s"] == 5000 + 180 + 600
    gpu = kwh(300, 600) + kwh(50, asleep_at - 600) + kwh(50, 180) + kwh(300, 600)
    host = kwh(100, asleep_at) + kwh(10, 5000 - asleep_at) + kwh(100, 180 + 600)
    assert result["gpu_energy_kwh"] == pytest.approx(gpu)
    assert result["energy_kwh"] == pytest.approx((gpu + host) * 1.5)
    always_on = simulate(one_node(), load_policy("always-on"), jobs)
    assert always_on["energy_kwh"] > result["energy_kwh"]
    assert always_on["wait_s"]["p95"] == 0


def test_sleep_windows_follow_the_sites_time_zone() -> None:
    # T0 is 22:13:20 UTC on a Tuesday in November, 17:13 in New York (UTC-5). With a nightly 22:00-06:00 window,
    # the node idle from 22:23 sleeps at once past its 30-minute timeout at a UTC site; in New York it waits
    # for 22:00 local (03:00 UTC). Both wake for the job at T0 + 20 h.
    from datetime import UTC, datetime

    from greengpu.policy import SleepWindow

    policy = load_policy("idle-timeout")
    window = SleepWindow(start_minute=22 * 60, end_minute=6 * 60)
    nights = replace(policy, sleep=replace(policy.sleep, windows=(window,)))
    jobs = [job("a", duration_s=600, submit_time_s=T0), job("b", duration_s=600, submit_time_s=T0 + 72_000)]
    site = Site(pue=1.5, price_per_kwh=0.2, carbon_g_per_kwh=400)
    utc = simulate(one_node(site), nights, jobs)
    new_york = simulate(one_node(replace(site, timezone="America/New_York")), nights, jobs)
    assert utc["node_sleep_hours"] == pytest.approx((72_000 - (600 + 1800 + 30)) / 3600)
    window_opens = datetime(2023, 11, 15, 3, 0, tzinfo=UTC).timestamp() - T0  # 22:00 EST
    assert new_york["node_sleep_hours"] == pytest.approx((72_000 - (window_opens + 30)) / 3600)
    assert new_york["wakes"] == utc["wakes"] == 1


def test_hourly_tariff_is_charged_hour_by_hour() -> None:
    hour0, hour1 = 0.10, 0.30
    tariff = TimeSeries(times_s=(T0 - 600, T0 + 3000, T0 + 6600), values=(hour0, hour1, hour0))
    site = Site(pue=1.0, tariff=tariff, carbon_g_per_kwh=0)
    result = simulate(one_node(site), load_policy("always-on"), [job("j", duration_s=7200, submit_time_s=T0)])
    draw_kw = 0.4  # 300 W GPU + 100 W host
    expected = draw_kw * (3000 / 3600) * hour0 + draw_kw * 1.0 * hour1 + draw_kw * (600 / 3600) * hour0
    assert result["cost"] == pytest.approx(expected)
    flat = simulate(one_node(replace(site, tariff=None, price_per_kwh=hour0)), load_policy("always-on"),
                    [job("j", duration_s=7200, submit_time_s=T0)])
    assert flat["cost"] < result["cost"]


def test_same_inputs_same_results_bit_for_bit() -> None:
    jobs = [job(f"j{i}", gpus=1, duration_s=100 + 37 * i, submit_time_s=T0 + 11 * i) for i in range(40)]
    first = simulate(one_node(), load_policy("default"), jobs)
    second = simulate(one_node(), load_policy("default"), jobs)
    first.pop("sim_wall_s")
    second.pop("sim_wall_s")
    assert first == second


def test_until_stops_the_clock() -> None:
    jobs = [job("a", duration_s=3600, submit_time_s=T0), job("b", duration_s=60, submit_time_s=T0 + 7200)]
    result = simulate(one_node(), load_policy("always-on"), jobs, until_s=1800)
    assert result["jobs_completed"] == 0
    assert result["gpu_energy_kwh"] == pytest.approx(kwh(300, 1800))
    assert result["gpu_hours_allocated"] == pytest.approx(0.5)


def test_running_jobs_go_uncapped_while_a_queue_lasts_and_capped_again_after() -> None:
    """relax_when_queued in a per-tick controller: the cap lifts for every running job while work waits
    for capacity and returns once none does; work is integrated across the changes of pace."""
    from greengpu.energy.power_model import busy_gpu
    from greengpu.policy import CappingPolicy, ClassCapping, SleepPolicy

    base = load_policy("always-on")
    capping = CappingPolicy(enabled=True, classes={"training": ClassCapping(mode="fixed", limit_w=200)},
                            relax_when_queued=True)
    policy = replace(base, capping=capping, sleep=SleepPolicy(enabled=False))
    capped_w, speed = busy_gpu(ONE_GPU, 200)
    assert speed < 1.0 and capped_w < 300
    jobs = [job("a", tenant="ta", duration_s=3600, submit_time_s=T0),
            job("b", tenant="tb", duration_s=600, submit_time_s=T0 + 1000)]
    simulation = Simulation(one_node(), policy, jobs, attribute=True)
    result = simulation.run().to_json()
    # a runs capped for 1,000 s; b then waits for the only GPU, so a runs uncapped to its end.
    a_end = 1000 + math.ceil(3600 - 1000 * speed)
    # b starts once a is done; nothing waits then, so b runs capped.
    b_run = math.ceil(600 / speed)
    assert result["makespan_s"] == a_end + b_run
    assert result["wait_s"]["p95"] == a_end - 1000
    gpu = kwh(capped_w, 1000) + kwh(300, a_end - 1000) + kwh(capped_w, b_run)
    assert result["gpu_energy_kwh"] == pytest.approx(gpu)
    assert result["slowdown_mean"] == pytest.approx((a_end / 3600 + b_run / 600) / 2)
    # The ledger charges each pace at its own watts: a's GPU capped, then uncapped, plus its host.
    assert simulation.attribution is not None
    charged = simulation.attribution.tenant_totals()
    a_kwh = (kwh(capped_w, 1000) + kwh(300, a_end - 1000) + kwh(100, a_end)) * 1.5
    assert charged["ta"]["energy_kwh"] == pytest.approx(a_kwh, abs=0.001)
    assert charged["tb"]["energy_kwh"] == pytest.approx((kwh(capped_w, b_run) + kwh(100, b_run)) * 1.5, abs=0.001)
    # Without the rule, a keeps its cap throughout (and so b waits longer).
    steady = simulate(one_node(), replace(policy, capping=replace(capping, relax_when_queued=False)), jobs)
    assert steady["makespan_s"] == math.ceil(3600 / speed) + b_run
    assert steady["wait_s"]["p95"] > result["wait_s"]["p95"]


def test_a_checkpoint_saves_the_work_done_at_each_pace_before_it() -> None:
    """A preempted job keeps the work up to its last checkpoint, counted at the pace it ran then."""
    from greengpu.energy.power_model import busy_gpu
    from greengpu.policy import CappingPolicy, ClassCapping, SleepPolicy

    capping = CappingPolicy(enabled=True, classes={"training": ClassCapping(mode="fixed", limit_w=200)},
                            relax_when_queued=True)
    policy = replace(load_policy("always-on"), capping=capping, sleep=SleepPolicy(enabled=False))
    _, speed = busy_gpu(ONE_GPU, 200)
    jobs = [job("a", duration_s=3600, submit_time_s=T0, checkpoint_interval_s=600),
            job("c", duration_s=100, submit_time_s=T0 + 500),  # queues: a runs uncapped from 500 s
            job("b", priority=10, duration_s=600, submit_time_s=T0 + 1000)]  # preempts a (grace 120 s)
    result = simulate(one_node(), policy, jobs)
    assert result["preemptions"] == 1
    saved_s = 500 * speed + 100  # capped to 500 s, uncapped to the checkpoint at 600 s
    assert result["lost_gpu_hours"] == pytest.approx((1120 - 600) / 3600)
    # b runs 1120-1720 (c waits, so uncapped); a then redoes only what it lost, uncapped while c waits;
    # c runs last, capped.
    assert result["makespan_s"] == 1720 + math.ceil(3600 - saved_s) + math.ceil(100 / speed)


def test_fair_share_remembers_past_use_when_usage_weight_is_set() -> None:
    """Tenant a used the one GPU for ten hours; then a and b each submit a job at the same moment.
    With usage_weight 0 the tie goes to queue order (a first, it was submitted first); with usage
    weighed, b's empty history puts it first: the replay keeps the decayed GPU-hours the core asks for."""
    from greengpu.model import Tenant
    from greengpu.policy import FairSharePolicy

    cluster = replace(one_node(), tenants={"a": Tenant("a", quota_gpus=1), "b": Tenant("b", quota_gpus=1)})
    jobs = [job("history", tenant="a", duration_s=36_000, submit_time_s=T0),
            job("a-next", tenant="a", duration_s=600, submit_time_s=T0 + 36_000),
            job("b-next", tenant="b", duration_s=600, submit_time_s=T0 + 36_000)]
    base = load_policy("always-on")

    def first_of_the_two(usage_weight: float) -> str:
        fair = FairSharePolicy(usage_half_life_s=7 * 86_400.0, usage_weight=usage_weight)
        policy = replace(base, scheduler=replace(base.scheduler, fair_share=fair))
        sim = Simulation(cluster, policy, jobs)
        sim.run()
        return min(("a-next", "b-next"), key=lambda j: sim.first_start[j])

    assert first_of_the_two(0.0) == "a-next"
    assert first_of_the_two(1.0) == "b-next"
