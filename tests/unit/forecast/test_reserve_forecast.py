"""The forecast-driven warm reserve: the calibrated upper rise of demand per hour of day, and the
simulator waking nodes before a daily ramp."""

from __future__ import annotations

from dataclasses import replace

from schedkit import job

from greengpu.config.policy import load_policy
from greengpu.forecast.calibration import conformal_upper
from greengpu.forecast.reserve import HOUR_S, DemandRiseForecaster
from greengpu.model import Cluster, Node, NodeType, Site
from greengpu.policy import SleepPolicy
from greengpu.sim.engine import Simulation
from greengpu.sleep.suspends import warm_reserve_target_gpus

DAY_S = 86_400.0
T0 = 1_700_006_400.0  # a whole hour: 2023-11-15 00:00 UTC


def test_conformal_upper_takes_the_finite_sample_rank() -> None:
    # 19 samples at 95%: rank ceil(20 x 0.95) = 19, the largest; 39 samples: rank 38.
    assert conformal_upper([float(i) for i in range(19)], 0.95) == 18.0
    assert conformal_upper([float(i) for i in range(39)], 0.95) == 37.0
    assert conformal_upper([], 0.95) == 0.0


def ramp_days(forecaster: DemandRiseForecaster, days: int, ramp_gpus: float) -> None:
    """Demand sits at 10 GPUs and jumps by `ramp_gpus` at 09:20 every day, back at 17:00."""
    for day in range(days):
        base = T0 + day * DAY_S
        forecaster.observe(base + 9 * HOUR_S + 1200, 10 + ramp_gpus)
        forecaster.observe(base + 17 * HOUR_S, 10.0)


def test_the_rise_is_learnt_per_hour_of_day_and_needs_a_few_days() -> None:
    forecaster = DemandRiseForecaster(min_samples=3)
    forecaster.observe(T0, 10.0)
    ramp_days(forecaster, 2, 40.0)
    nine = T0 + 2 * DAY_S + 9 * HOUR_S
    assert forecaster.upper_rise_gpus(nine) == 0.0  # two days seen: not enough to say
    ramp_days_from = T0 + 2 * DAY_S
    for day in range(3):
        base = ramp_days_from + day * DAY_S
        forecaster.observe(base + 9 * HOUR_S + 1200, 50.0)
        forecaster.observe(base + 17 * HOUR_S, 10.0)
    nine = T0 + 5 * DAY_S + 9 * HOUR_S
    forecaster.observe(nine, 10.0)  # the 09:00 hour of day 6 begins
    assert forecaster.upper_rise_gpus(nine) == 40.0
    assert forecaster.upper_rise_gpus(nine + 2 * HOUR_S) == 0.0  # 11:00: demand never rises then
    # Before the ramp the reserve keeps the whole rise; once 25 GPUs have arrived, the rest.
    assert forecaster.headroom_gpus(nine + 60, 10.0) == 40
    forecaster.observe(nine + 600, 35.0)
    assert forecaster.headroom_gpus(nine + 600, 35.0) == 15


def test_the_forecast_adds_to_the_reserve_only_when_the_policy_uses_it() -> None:
    policy = SleepPolicy(enabled=True, warm_reserve_gpus=4, warm_reserve_busy_fraction=0.1)
    assert warm_reserve_target_gpus(policy, 100.0, 30) == 10
    assert warm_reserve_target_gpus(replace(policy, use_forecast=True), 100.0, 30) == 30
    assert warm_reserve_target_gpus(replace(policy, use_forecast=True), 100.0, 0) == 10


def ramp_cluster(nodes: int) -> Cluster:
    node_type = NodeType(name="four", gpus=4, gpu_model="A100", gpu_idle_w=50, gpu_max_w=300, gpu_min_limit_w=100,
                         host_idle_w=200, host_sleep_w=10, boot_s=300)
    return Cluster(site=Site(pue=1.0, price_per_kwh=0.1, carbon_g_per_kwh=100), node_types={"four": node_type},
                   nodes=tuple(Node(f"n{i:02d}", "four") for i in range(nodes)), tenants={})


def morning_ramp_jobs(days: int) -> list:
    """Every day at 09:10, sixteen one-GPU jobs of 40 minutes arrive together; nothing else."""
    return [job(f"d{day}-{k}", gpus=1, duration_s=2400, submit_time_s=T0 + day * DAY_S + 9 * HOUR_S + 600)
            for day in range(days) for k in range(16)]


def test_the_simulator_wakes_nodes_for_the_forecast_ramp_before_jobs_wait() -> None:
    base = load_policy("default")
    no_forecast = replace(base, sleep=replace(base.sleep, warm_reserve_busy_fraction=0.0, use_forecast=False))
    with_forecast = replace(base, sleep=replace(base.sleep, warm_reserve_busy_fraction=0.0, use_forecast=True))
    jobs = morning_ramp_jobs(8)
    plain = Simulation(ramp_cluster(6), no_forecast, jobs)
    plain.run()
    forecast = Simulation(ramp_cluster(6), with_forecast, jobs)
    result = forecast.run().to_json()
    assert result["invariant_violations"] == 0

    def waits_on(sim: Simulation, day: int) -> list[float]:
        return [sim.first_start[j.job_id] - j.submit_time_s for j in sim.jobs if j.job_id.startswith(f"d{day}-")]

    # Without the forecast every morning's jobs wait a boot; with it, once three mornings are known,
    # the 09:00 hour opens with 16 GPUs awake and nobody waits.
    assert all(max(waits_on(plain, day)) >= 300 for day in range(1, 8))
    assert all(max(waits_on(forecast, day)) == 0 for day in range(4, 8))
    assert max(waits_on(forecast, 1)) >= 300  # day 1: nothing learnt yet


def test_hours_of_day_follow_the_sites_offset() -> None:
    assert DemandRiseForecaster().hour_of_day(24 * 100 + 9) == 9
    assert DemandRiseForecaster(timezone="Etc/GMT-2").hour_of_day(24 * 100 + 9) == 11  # UTC+2 (POSIX signs)
    assert DemandRiseForecaster(timezone="Etc/GMT+10").hour_of_day(24 * 100 + 9) == 23  # UTC-10


def test_quiet_hours_count_as_no_rise_and_the_window_keeps_the_last_days() -> None:
    forecaster = DemandRiseForecaster(min_samples=2, window_days=3, level=0.5)
    forecaster.observe(T0, 10.0)
    forecaster.observe(T0 + 1200, 30.0)  # hour 00: rose 20
    forecaster.observe(T0 + 2 * DAY_S + 100, 10.0)  # two quiet days in between: zeros at every hour
    # 00:00 has seen rises of 20 and 0: at 50%, rank ceil(3 x 0.5) = 2, the larger.
    assert forecaster.upper_rise_gpus(T0 + 2 * DAY_S) == 20.0
    # Hour 05 saw two quiet days: rises of 0.
    assert forecaster.upper_rise_gpus(T0 + 2 * DAY_S + 5 * HOUR_S) == 0.0
    # Ten 00:00 hours rising 7 each: the window keeps 3 of them, all 7.
    for day in range(3, 13):
        forecaster.observe(T0 + day * DAY_S, 10.0)
        forecaster.observe(T0 + day * DAY_S + 600, 17.0)
        forecaster.observe(T0 + day * DAY_S + 2 * HOUR_S, 10.0)
    assert forecaster.upper_rise_gpus(T0 + 13 * DAY_S) == 7.0


def test_headroom_counts_from_the_hours_start_and_never_goes_negative() -> None:
    forecaster = DemandRiseForecaster(min_samples=1, level=0.5)
    forecaster.observe(T0, 10.0)
    forecaster.observe(T0 + 600, 14.0)  # hour 00 of day 0 rose 4
    forecaster.observe(T0 + 3000, 10.0)
    forecaster.observe(T0 + DAY_S + 1, 10.0)  # day 1's 00:00 hour begins at 10
    assert forecaster.headroom_gpus(T0 + DAY_S + 60, 10.0) == 4
    assert forecaster.headroom_gpus(T0 + DAY_S + 60, 13.0) == 1  # 3 of the 4 already arrived
    assert forecaster.headroom_gpus(T0 + DAY_S + 60, 20.0) == 0
    # In an hour the forecaster has not seen yet, the reserve counts from the demand given.
    assert forecaster.headroom_gpus(T0 + 2 * DAY_S + 60, 12.0) == 4


def test_the_window_forgets_older_days() -> None:
    forecaster = DemandRiseForecaster(min_samples=1, window_days=2, level=0.95)
    for day, rise in enumerate((20.0, 7.0, 7.0)):
        forecaster.observe(T0 + day * DAY_S, 10.0)
        forecaster.observe(T0 + day * DAY_S + 600, 10.0 + rise)
        forecaster.observe(T0 + day * DAY_S + 3000, 10.0)
    forecaster.observe(T0 + 3 * DAY_S + 1, 10.0)
    assert forecaster.upper_rise_gpus(T0 + 3 * DAY_S) == 7.0  # the 20 of day 0 is out of the 2-day window


def test_the_hour_after_a_change_counts_as_quiet() -> None:
    forecaster = DemandRiseForecaster(min_samples=2, level=0.5)
    forecaster.observe(T0, 10.0)
    forecaster.observe(T0 + HOUR_S, 10.0)
    forecaster.observe(T0 + HOUR_S + 600, 15.0)  # 01:00 rose 5 on day 0
    forecaster.observe(T0 + DAY_S, 15.0)  # day 1, 00:00: the 01:00 hour to come is quiet
    forecaster.observe(T0 + DAY_S + 3 * HOUR_S, 15.0)
    # 01:00 has seen rises of 5 and 0: at 50%, the ceil(3 x 0.5) = 2nd smallest, 5.
    assert forecaster.upper_rise_gpus(T0 + 2 * DAY_S + HOUR_S) == 5.0


def test_a_gap_longer_than_the_window_leaves_only_zeros() -> None:
    forecaster = DemandRiseForecaster(min_samples=2, window_days=2, level=0.95)
    forecaster.observe(T0, 10.0)
    forecaster.observe(T0 + 600, 19.0)  # 00:00 rose 9
    forecaster.observe(T0 + 10 * DAY_S + 1, 10.0)  # ten quiet days later
    assert forecaster.upper_rise_gpus(T0 + 11 * DAY_S) == 0.0  # 00:00 holds two quiet days now


def test_a_forecast_reserve_follows_the_upper_bound_above_the_floor_and_falls_back_without_history() -> None:
    policy = SleepPolicy(enabled=True, warm_reserve_gpus=8, warm_reserve_busy_fraction=0.35,
                         warm_reserve_from_forecast=True)
    # With history the forecast's upper bound sizes it alone: 600 GPUs in use no longer keep 210 awake ...
    assert warm_reserve_target_gpus(policy, 600, forecast_headroom_gpus=40) == 40
    assert warm_reserve_target_gpus(policy, 600, forecast_headroom_gpus=300) == 300
    # ... never below the fixed floor (a quiet hour's forecast of 0 still keeps the floor) ...
    assert warm_reserve_target_gpus(policy, 600, forecast_headroom_gpus=0) == 8
    # ... and before the forecast knows the hour (None) the share of use holds, as without the key.
    assert warm_reserve_target_gpus(policy, 600, forecast_headroom_gpus=None) == 210
    assert warm_reserve_target_gpus(policy, 600) == warm_reserve_target_gpus(
        replace(policy, warm_reserve_from_forecast=False), 600)


def test_the_reserve_forecast_says_nothing_before_history_and_then_the_rise_over_a_boot() -> None:
    forecaster = DemandRiseForecaster(min_samples=3, horizon_s=300.0)
    forecaster.observe(T0, 10.0)
    at_ramp = 9 * HOUR_S + 1200

    def sweep(day: int) -> None:
        """A sweep at 09:20: 40 GPUs asked within two minutes, 30 more an hour into the 10:00 hour."""
        base = T0 + day * DAY_S
        forecaster.observe(base + at_ramp, 30.0)
        forecaster.observe(base + at_ramp + 120, 50.0)
        forecaster.observe(base + 10 * HOUR_S + 1800, 80.0)
        forecaster.observe(base + 17 * HOUR_S, 10.0)

    for day in range(2):
        sweep(day)
    assert forecaster.reserve_gpus(T0 + 2 * DAY_S + 9 * HOUR_S, 10.0, known_only=True) is None
    assert forecaster.reserve_gpus(T0 + 2 * DAY_S + 9 * HOUR_S, 10.0) == 0  # use_forecast's reading: 0
    sweep(2)
    forecaster.observe(T0 + 3 * DAY_S, 10.0)
    # Three days known: the 09:00 hour's rise within a boot is the sweep's 40 GPUs; the 10:00 hour's 30.
    assert forecaster.reserve_gpus(T0 + 3 * DAY_S + 9 * HOUR_S, 10.0, known_only=True) == 40
    assert forecaster.reserve_gpus(T0 + 3 * DAY_S + 10 * HOUR_S, 50.0, known_only=True) == 30
    # A quiet hour is known too, and keeps nothing for bursts that never came at that hour.
    assert forecaster.reserve_gpus(T0 + 3 * DAY_S + 3 * HOUR_S, 10.0, known_only=True) == 0
    # Over the whole hour (the default horizon) a slow climb counts: 10 -> 50 at 09:00.
    hourly = DemandRiseForecaster(min_samples=3)
    hourly.observe(T0, 10.0)
    for day in range(3):
        base = T0 + day * DAY_S
        hourly.observe(base + 9 * HOUR_S + 60, 30.0)
        hourly.observe(base + 9 * HOUR_S + 3000, 50.0)
        hourly.observe(base + 17 * HOUR_S, 10.0)
    hourly.observe(T0 + 3 * DAY_S, 10.0)
    assert hourly.reserve_gpus(T0 + 3 * DAY_S + 9 * HOUR_S, 10.0, known_only=True) == 40
    slow = DemandRiseForecaster(min_samples=3, horizon_s=300.0)
    slow.observe(T0, 10.0)
    for day in range(3):
        base = T0 + day * DAY_S
        slow.observe(base + 9 * HOUR_S + 60, 30.0)
        slow.observe(base + 9 * HOUR_S + 3000, 50.0)
        slow.observe(base + 17 * HOUR_S, 10.0)
    slow.observe(T0 + 3 * DAY_S, 10.0)
    assert slow.reserve_gpus(T0 + 3 * DAY_S + 9 * HOUR_S, 10.0, known_only=True) == 20  # a node boots in between


def test_the_reserve_forecaster_counts_a_boot_per_band_of_demand() -> None:
    from greengpu.forecast.reserve import RESERVE_LEVEL, reserve_forecaster

    hourly = reserve_forecaster(False, 300.0, 1000.0)
    assert (hourly.horizon_s, hourly.band_gpus, hourly.level) == (HOUR_S, 0.0, 0.95)  # use_forecast's, unchanged
    forecaster = reserve_forecaster(True, 300.0, 1000.0)
    assert (forecaster.horizon_s, forecaster.band_gpus, forecaster.level) == (300.0, 100.0, RESERVE_LEVEL)
    # Busy hours (demand 600-699 at their start) see 80-GPU sweeps within a boot; quiet ones (100-199) none.
    forecaster.observe(T0, 650.0)
    for hour in range(4):
        base = T0 + hour * HOUR_S
        forecaster.observe(base + 600, 650.0 + 80.0)
        forecaster.observe(base + 1200, 650.0)
    forecaster.observe(T0 + 4 * HOUR_S + 60, 150.0)  # a fall is no rise
    quiet_s = T0 + 9 * HOUR_S
    forecaster.observe(quiet_s, 150.0)
    assert forecaster.reserve_gpus(quiet_s, 150.0, known_only=True) == 0
    forecaster.observe(quiet_s + 4000, 650.0)
    assert forecaster.reserve_gpus(quiet_s + 4000, 650.0, known_only=True) == 80
    forecaster.observe(quiet_s + 4060, 950.0)  # a band never seen: not known, the share of use holds
    assert forecaster.reserve_gpus(quiet_s + 4060, 950.0, known_only=True) is None


def test_the_daemon_builds_the_same_reserve_forecaster_from_its_inventory() -> None:
    from greengpu.forecast.reserve import cluster_reserve_forecaster, reserve_forecaster

    cluster = ramp_cluster(5)  # five 4-GPU nodes booting in 300 s
    assert cluster_reserve_forecaster(True, cluster) == reserve_forecaster(True, 300.0, 20.0)
    assert cluster_reserve_forecaster(True, cluster).band_gpus == 2.0
    assert cluster_reserve_forecaster(False, cluster) == DemandRiseForecaster()


def test_hours_of_day_are_the_sites_wall_clock_across_daylight_saving() -> None:
    """People's mornings follow the site's clock: in New York a ramp at 09:20 local is 14:20 UTC in winter and
    13:20 UTC in summer. A forecaster on the site's clock learns it in winter and knows it the morning after the
    clocks go forward (2024-03-10); one on UTC looks for it an hour late, where it has learnt nothing."""
    import datetime as dt

    from greengpu.localtime import moment_s

    def ramp_on(forecaster: DemandRiseForecaster, date: dt.date) -> None:
        forecaster.observe(moment_s(date, 9 * 60 + 20, "America/New_York"), 50.0)
        forecaster.observe(moment_s(date, 17 * 60, "America/New_York"), 10.0)

    local = DemandRiseForecaster(min_samples=3, timezone="America/New_York")
    utc = DemandRiseForecaster(min_samples=3)
    start = moment_s(dt.date(2024, 3, 4), 0, "America/New_York")
    for forecaster in (local, utc):
        forecaster.observe(start, 10.0)
        for day in range(4, 10):  # Monday 4 March to Saturday 9 March: standard time (UTC-5)
            ramp_on(forecaster, dt.date(2024, 3, day))
    nine_local = moment_s(dt.date(2024, 3, 11), 9 * 60, "America/New_York")  # Monday, daylight time (UTC-4)
    assert nine_local % HOUR_S == 0.0
    for forecaster in (local, utc):
        forecaster.observe(nine_local, 10.0)
    assert local.hour_of_day(int(nine_local // HOUR_S)) == 9
    assert local.knows(nine_local) and local.upper_rise_gpus(nine_local) == 40.0
    assert utc.upper_rise_gpus(nine_local) == 0.0  # 13:00 UTC: the ramp was learnt at 14:00 UTC
    # The hour the ramp was learnt at in UTC is 10:00 local now: the site's forecaster has no rise there.
    assert local.upper_rise_gpus(nine_local + HOUR_S) == 0.0


def test_a_body_keeps_its_reserve_forecast_on_the_sites_clock() -> None:
    from greengpu.forecast.reserve import cluster_reserve_forecaster

    cluster = replace(ramp_cluster(2), site=Site(timezone="Europe/Berlin"))
    assert cluster_reserve_forecaster(False, cluster).timezone == "Europe/Berlin"
