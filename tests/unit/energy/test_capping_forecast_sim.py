"""The forecast-slack rule in a replay (issue 35): after four days in which the cluster filled from 09:00, a job
started at 02:00 whose end would fall in the busy hours runs uncapped, while a short job started with it keeps
its cap; without the rule both stay capped."""

from __future__ import annotations

from dataclasses import replace

import pytest
from schedkit import job

from greengpu.config.policy import load_policy
from greengpu.energy.power_model import busy_gpu
from greengpu.model import Cluster, Node, NodeType, Site, Tenant
from greengpu.policy import CappingPolicy, ClassCapping, Policy, SleepPolicy
from greengpu.sim.engine import Simulation

DAY_S, HOUR_S = 86_400.0, 3_600.0
T0 = 19_676 * DAY_S  # a midnight (UTC): the forecast's hours of day are the trace's
ONE_GPU = NodeType(name="one", gpus=1, gpu_model="A100", gpu_idle_w=50, gpu_max_w=300, gpu_min_limit_w=100,
                   host_idle_w=100, host_sleep_w=10, boot_s=180)


def four_gpus() -> Cluster:
    return Cluster(site=Site(pue=1.5), node_types={"one": ONE_GPU},
                   nodes=tuple(Node(f"n{i}", "one") for i in range(4)), tenants={"t": Tenant("t", quota_gpus=4)})


def policy(forecast_slack: bool) -> Policy:
    capping = CappingPolicy(enabled=True, classes={"training": ClassCapping(mode="fixed", limit_w=200)},
                            relax_when_queued=True, forecast_slack=forecast_slack)
    no_reserve = SleepPolicy(enabled=False, warm_reserve_gpus=0, warm_reserve_busy_fraction=0.0)
    return replace(load_policy("always-on"), capping=capping, sleep=no_reserve)


def replay(forecast_slack: bool) -> dict[str, float]:
    busy_days = [job(f"d{day}-{i}", duration_s=8 * HOUR_S, submit_time_s=T0 + day * DAY_S + 9 * HOUR_S)
                 for day in range(4) for i in range(4)]  # every GPU taken from 09:00, four days running
    night_s = T0 + 4 * DAY_S + 2 * HOUR_S
    tonight = [job("long", duration_s=8 * HOUR_S, submit_time_s=night_s),  # would end at 10:00: busy hours
               job("short", duration_s=2 * HOUR_S, submit_time_s=night_s),  # ends at 04:00: quiet
               job("nudge", duration_s=60, submit_time_s=night_s + 120)]  # a decision after they started
    simulation = Simulation(four_gpus(), policy(forecast_slack), busy_days + tonight)
    simulation.run()
    return {job_id: simulation.finish_s[job_id] - night_s for job_id in ("long", "short")}


def test_a_long_job_ending_in_the_forecast_busy_hours_runs_uncapped_a_short_one_stays_capped() -> None:
    _, speed = busy_gpu(ONE_GPU, 200)
    assert speed < 0.99
    ruled = replay(forecast_slack=True)
    # Capped for the two minutes before the first verdict that saw it, uncapped from then on.
    assert ruled["long"] == pytest.approx(120 + (8 * HOUR_S - 120 * speed), abs=2)
    assert ruled["short"] == pytest.approx(2 * HOUR_S / speed, abs=2)
    present_only = replay(forecast_slack=False)
    assert present_only["long"] == pytest.approx(8 * HOUR_S / speed, abs=2)
    assert present_only["short"] == pytest.approx(ruled["short"], abs=2)
