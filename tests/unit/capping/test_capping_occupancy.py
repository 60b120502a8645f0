"""Occupancy-aware capping (issue 35): a cap is priced in the GPU-time it adds (its GPUs through the tail by
which it ends later) and kept only while the forecast leaves those GPUs free, beyond the warm reserve."""

from __future__ import annotations

import pytest

from greengpu.capping.demand_forecast import DemandPeakForecaster
from greengpu.capping.occupancy import HOUR_S, CapCandidate, FreeGpus, SlackBudget, free_gpus, jobs_to_cap

TOTAL = 100.0
DAY_S = 24 * HOUR_S
QUIET, BUSY, RISE_HOUR = 30.0, 95.0, 9


def reserve_35(busy_gpus: float) -> float:
    """The shipped default's warm reserve: 35% of the GPUs in use."""
    return float(int(0.35 * busy_gpus))


def busy(hour: int) -> float:
    """Quiet demand, rising to near the cluster's size for the nine hours from 09:00."""
    return BUSY if RISE_HOUR <= hour % 24 < RISE_HOUR + 9 else QUIET


def learnt(days: int = 4) -> DemandPeakForecaster:
    forecaster = DemandPeakForecaster()
    for hour in range(days * 24):
        forecaster.observe(hour * HOUR_S + 1, busy(hour))
    return forecaster


def free_of(forecaster: DemandPeakForecaster, now_s: float, demand_gpus: float) -> FreeGpus:
    return lambda hour: free_gpus(TOTAL, forecaster.upper_at(hour, now_s, demand_gpus), reserve_35)


def test_a_cap_costs_its_gpus_through_the_tail_it_adds() -> None:
    job = CapCandidate("j", gpus=8, remaining_s=10 * HOUR_S, slowdown=0.05)
    assert job.added_gpu_s == pytest.approx(8 * 10 * HOUR_S * 0.05)
    start_s, end_s = job.tail_s(1000.0)
    assert (start_s, end_s) == pytest.approx((1000.0 + 10 * HOUR_S, 1000.0 + 10.5 * HOUR_S))
    assert job.gpus * (end_s - start_s) == pytest.approx(job.added_gpu_s)


def test_the_forecast_learns_the_daily_peak() -> None:
    forecaster = learnt()
    now_s = 4 * DAY_S + 2 * HOUR_S  # 02:00 on the fifth day
    assert forecaster.upper_at(4 * 24 + 2, now_s, QUIET) == QUIET
    assert forecaster.upper_at(4 * 24 + 9, now_s, QUIET) == BUSY
    assert forecaster.upper_at(5 * 24 + 12, now_s, QUIET) == BUSY  # any day: the hour of day
    assert forecaster.upper_at(4 * 24 + 2, now_s, 60.0) == 60.0  # the hour now is never below the demand now


def test_before_it_has_history_the_forecast_says_nothing() -> None:
    forecaster = learnt(days=2)
    assert forecaster.upper_gpus(2 * 24 + 10) is None
    job = CapCandidate("j", gpus=16, remaining_s=8 * HOUR_S, slowdown=0.05)
    assert jobs_to_cap([job], 2 * DAY_S, free_of(forecaster, 2 * DAY_S, QUIET)) == {"j"}


def test_a_long_job_is_refused_a_cap_when_the_cluster_fills_before_it_would_end() -> None:
    """Quiet now (02:00), the forecast fills the cluster from 09:00: a job ending at 12:00 would hold its 16
    GPUs 30 minutes longer in the busy hours, where no GPU is free beyond the reserve."""
    forecaster = learnt()
    now_s = 4 * DAY_S + 2 * HOUR_S
    long_job = CapCandidate("long", gpus=16, remaining_s=10 * HOUR_S, slowdown=0.05)
    assert jobs_to_cap([long_job], now_s, free_of(forecaster, now_s, QUIET)) == frozenset()


def test_a_short_job_may_still_be_capped_in_the_same_state() -> None:
    forecaster = learnt()
    now_s = 4 * DAY_S + 2 * HOUR_S
    long_job = CapCandidate("long", gpus=16, remaining_s=10 * HOUR_S, slowdown=0.05)
    short_job = CapCandidate("short", gpus=16, remaining_s=3 * HOUR_S, slowdown=0.05)
    assert jobs_to_cap([long_job, short_job], now_s, free_of(forecaster, now_s, QUIET)) == {"short"}


def test_a_cap_is_lifted_before_a_forecast_rise_not_after_the_queue_forms() -> None:
    """Two quiet-then-busy days are not yet a forecast: a job to end at 12:00 is capped on the present's
    slack. Once the third day has shown the 09:00 rise, the next morning's verdict (05:00, demand still at
    its quiet level, nothing waiting) lifts the cap of a job in the same position, before the rise."""
    forecaster = learnt(days=2)
    first_s = 2 * DAY_S + 2 * HOUR_S
    forecaster.observe(first_s, QUIET)
    job = CapCandidate("j", gpus=16, remaining_s=10 * HOUR_S, slowdown=0.05)
    assert jobs_to_cap([job], first_s, free_of(forecaster, first_s, QUIET)) == {"j"}
    for hour in range(2 * 24 + 3, 3 * 24 + 6):  # the rest of the third day, with its rise, and a quiet night
        forecaster.observe(hour * HOUR_S + 1, busy(hour))
    next_s = 3 * DAY_S + 5 * HOUR_S + 2
    assert forecaster.upper_at(3 * 24 + 5, next_s, QUIET) == QUIET  # quiet now: no queue
    later = CapCandidate("j", gpus=16, remaining_s=7 * HOUR_S, slowdown=0.05)  # to end at 12:00
    assert jobs_to_cap([later], next_s, free_of(forecaster, next_s, QUIET)) == frozenset()


def test_a_job_that_ends_after_the_busy_hours_keeps_its_cap() -> None:
    """Capped or not it holds the same GPUs through the busy hours: only its tail, at 22:00, is priced."""
    forecaster = learnt()
    now_s = 4 * DAY_S + 2 * HOUR_S
    job = CapCandidate("j", gpus=16, remaining_s=20 * HOUR_S, slowdown=0.05)
    assert jobs_to_cap([job], now_s, free_of(forecaster, now_s, QUIET)) == {"j"}


def test_the_slack_is_shared_shortest_remaining_first() -> None:
    """Five GPUs free beyond the reserve in every hour (18,000 GPU-seconds): j0's tail takes 14,400 of hour 1,
    j1's 4,320 no longer fit there; j2's 8 GPUs are never free; j3's small tail fits."""
    jobs = [CapCandidate("j0", gpus=4, remaining_s=HOUR_S, slowdown=1.0),
            CapCandidate("j1", gpus=4, remaining_s=1.5 * HOUR_S, slowdown=0.2),
            CapCandidate("j2", gpus=8, remaining_s=3 * HOUR_S, slowdown=0.01),
            CapCandidate("j3", gpus=2, remaining_s=4 * HOUR_S, slowdown=0.05)]
    assert jobs_to_cap(jobs, 0.0, lambda hour: 5.0) == {"j0", "j3"}


def test_the_budget_spends_gpu_seconds_per_hour() -> None:
    budget = SlackBudget(lambda hour: 2.0 if hour == 0 else None)
    assert budget.take(0.0, 1800.0, 2.0)
    assert not budget.take(1800.0, 3600.0 + 60.0, 3.0)  # 3 GPUs do not fit in hour 0's other half
    assert budget.take(1800.0, 7200.0, 2.0)  # hour 1 is not known: not limited
    assert not budget.take(0.0, 1.0, 0.5)  # hour 0 is spent


def test_a_cap_that_costs_no_time_is_always_kept() -> None:
    assert jobs_to_cap([CapCandidate("free", 8, 100 * HOUR_S, 0.0)], 0.0, lambda hour: 0.0) == {"free"}
    assert jobs_to_cap([CapCandidate("slow", 8, 100 * HOUR_S, 0.05)], 0.0, lambda hour: 0.0) == frozenset()


def test_the_peak_forecast_reads_hours_on_the_sites_clock_across_daylight_saving() -> None:
    """New York is busy from 09:00 to 18:00 on its own clock: 14:00-23:00 UTC in winter, 13:00-22:00 UTC once the
    clocks go forward (2024-03-10). A forecast on the site's clock knows the Monday after that 09:00 is busy; one
    on UTC finds 13:00 quiet in its history and would leave a long job capped into the busy morning."""
    import datetime as dt

    from greengpu.localtime import moment_s, weekday_and_minute

    site = "America/New_York"
    local, utc = DemandPeakForecaster(timezone=site), DemandPeakForecaster()
    start = moment_s(dt.date(2024, 3, 4), 0, site)  # Monday, standard time (UTC-5)
    learnt_until = moment_s(dt.date(2024, 3, 10), 0, site)  # a week of standard time, to Saturday's end
    nine_local = moment_s(dt.date(2024, 3, 11), 9 * 60, site)  # the Monday after, daylight time (UTC-4)
    assert nine_local % HOUR_S == 0.0
    for hour in range(int(start // HOUR_S), int(learnt_until // HOUR_S)):
        time_s = hour * HOUR_S + 1
        local_hour = weekday_and_minute(time_s, site)[1] // 60
        for forecaster in (local, utc):
            forecaster.observe(time_s, BUSY if RISE_HOUR <= local_hour < RISE_HOUR + 9 else QUIET)
    hour_index = int(nine_local // HOUR_S)
    assert local.hour_of_day(hour_index) == 9 and utc.hour_of_day(hour_index) == 13
    assert local.upper_gpus(hour_index) == BUSY
    assert utc.upper_gpus(hour_index) == QUIET
    assert local.upper_gpus(hour_index - 1) == QUIET  # 08:00 local: before the working day


def test_the_bodies_keep_the_peak_forecast_on_the_sites_clock() -> None:
    """The simulator takes the site's zone from the cluster it replays; the daemon from each snapshot's cluster, and
    starts over (knowing no hour) when an edited inventory moves the site to another zone."""
    from dataclasses import replace

    from greengpu.capping.forecast_caps import ForecastCaps
    from greengpu.config.policy import load_policy
    from greengpu.model import Cluster, Node, NodeType, Site
    from greengpu.sim.engine import Simulation

    node_type = NodeType(name="four", gpus=4, gpu_model="A100", gpu_idle_w=50, gpu_max_w=300, gpu_min_limit_w=100,
                         host_idle_w=200, host_sleep_w=10, boot_s=300)
    cluster = Cluster(site=Site(pue=1.0, price_per_kwh=0.1, carbon_g_per_kwh=100, timezone="Europe/Berlin"),
                      node_types={"four": node_type}, nodes=(Node("n0", "four"),), tenants={})
    policy = load_policy("default")
    assert Simulation(cluster, policy, []).caps.forecaster.timezone == "Europe/Berlin"
    assert Simulation(replace(cluster, site=Site()), policy, []).caps.forecaster.timezone == "UTC"
    caps = ForecastCaps(policy)
    caps.follow_site("Europe/Berlin")
    learnt_here = caps.forecaster
    for hour in range(4 * 24):
        learnt_here.observe(hour * HOUR_S + 1, busy(hour))
    caps.follow_site("Europe/Berlin")
    assert caps.forecaster is learnt_here and caps.forecaster.upper_gpus(4 * 24 + 8) is not None
    caps.follow_site("Asia/Tokyo")
    assert caps.forecaster.timezone == "Asia/Tokyo" and caps.forecaster.upper_gpus(4 * 24 + 8) is None
