"""The sleep planner and the simulator's sleep body: busy nodes never sleep, rate limits and minimum
times hold, a waking node is not counted on before it is up, a node that never wakes is failed and
the waiting job goes elsewhere."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from schedkit import job

from greengpu.config.policy import load_policy
from greengpu.model import Cluster, Node, NodeType, PowerState, Site
from greengpu.policy import SleepPolicy, SleepWindow
from greengpu.sim.engine import Simulation
from greengpu.sleep.suspends import NodeView, plan_suspends
from greengpu.sleep.wake_verify import backoff_s

T0 = 1_700_000_000.0
ONE_GPU = NodeType(name="one", gpus=1, gpu_model="A100", gpu_idle_w=50, gpu_max_w=300, gpu_min_limit_w=100,
                   host_idle_w=100, host_sleep_w=10, boot_s=180)

views = st.builds(
    NodeView,
    name=st.sampled_from([f"n{i}" for i in range(8)]),
    gpus=st.sampled_from([4, 8]),
    power=st.sampled_from(list(PowerState)),
    power_since_s=st.floats(0, 10_000),
    busy=st.booleans(),
    idle_since_s=st.one_of(st.none(), st.floats(0, 10_000)),
)


@settings(max_examples=300, deadline=None)
@given(nodes=st.lists(views, max_size=8, unique_by=lambda v: v.name), recent=st.integers(0, 5),
       reserve=st.sampled_from([0, 4, 16]))
def test_the_planner_never_suspends_a_busy_young_or_reserved_node(nodes: list[NodeView], recent: int,
                                                                   reserve: int) -> None:
    policy = SleepPolicy(enabled=True, idle_timeout_s=600, min_awake_s=1200, max_suspends_per_min=3,
                         warm_reserve_gpus=reserve, priority_aware=True)
    now = 12_000.0
    chosen = plan_suspends(now, nodes, policy, blocked_pending=False, suspends_last_minute=recent)
    by_name = {n.name: n for n in nodes}
    assert len(chosen) <= max(0, 3 - recent)
    for action in chosen:
        node = by_name[action.node]
        assert not node.busy and node.power is PowerState.AWAKE
        assert node.idle_since_s is not None and now - node.idle_since_s >= 600
        assert now - node.power_since_s >= 1200
    free_awake = sum(n.gpus for n in nodes if n.power is PowerState.AWAKE and not n.busy)
    slept = sum(by_name[a.node].gpus for a in chosen)
    assert not chosen or free_awake - slept >= reserve
    assert plan_suspends(now, nodes, policy, blocked_pending=True, suspends_last_minute=0) == []


def nodes(count: int) -> Cluster:
    return Cluster(site=Site(pue=1.0, price_per_kwh=0.1, carbon_g_per_kwh=100), node_types={"one": ONE_GPU},
                   nodes=tuple(Node(f"n{i}", "one") for i in range(1, count + 1)), tenants={})


def sleepy(**changes: object) -> object:
    policy = load_policy("idle-timeout")
    return replace(policy, sleep=replace(policy.sleep, **changes))


def waits(sim: Simulation) -> dict[str, float]:
    return {j.job_id: sim.first_start[j.job_id] - j.submit_time_s for j in sim.jobs}


def test_a_waking_node_is_not_counted_on_before_it_is_up() -> None:
    jobs = [job("a", duration_s=60, submit_time_s=T0), job("b", duration_s=60, submit_time_s=T0 + 4000)]
    sim = Simulation(nodes(1), sleepy(), jobs)
    result = sim.run().to_json()
    assert waits(sim)["b"] == ONE_GPU.boot_s  # placed exactly when the boot completes, not before
    assert result["invariant_violations"] == 0  # no work on a node that is not up


def test_wake_rate_limit_spaces_the_wakes() -> None:
    # Five sleeping nodes, five jobs at once, at most two wakes per minute.
    jobs = [job("warm", duration_s=60, submit_time_s=T0)]
    jobs += [job(f"b{i}", duration_s=3600, submit_time_s=T0 + 4000) for i in range(5)]
    sim = Simulation(nodes(5), sleepy(max_wakes_per_min=2), jobs)
    sim.run()
    burst = sorted(w for j, w in waits(sim).items() if j != "warm")
    assert burst == [180, 180, 240, 240, 300]


def test_a_job_wakes_a_node_that_has_just_gone_to_sleep_and_minimum_awake_time_delays_a_suspend() -> None:
    # idle-timeout: suspend 1800 s after idle, taking 30 s; min_asleep 600 s; min_awake 2400 s.
    jobs = [job("a", duration_s=60, submit_time_s=T0), job("b", duration_s=60, submit_time_s=T0 + 60 + 1830 + 100),
            job("c", duration_s=60, submit_time_s=T0 + 20_000)]
    sim = Simulation(nodes(1), sleepy(min_asleep_s=600, min_awake_s=2400), jobs)
    result = sim.run().to_json()
    # b arrives 100 s after the node fell asleep: it is woken at once (a lever never buys energy with
    # queue time), not after the node has slept its 600 s minimum, and b waits one boot.
    assert waits(sim)["b"] == ONE_GPU.boot_s
    woken_at = jobs[1].submit_time_s
    # b ends at woken_at + 240; its idle timeout would allow a suspend at woken_at + 2040, but the node
    # came up at woken_at + 180 and must stay awake 2400 s: it suspends at woken_at + 2580.
    second_asleep_at = woken_at + 180 + 2400 + 30
    assert result["wakes"] == 2
    assert waits(sim)["c"] == 180
    assert result["node_sleep_hours"] == pytest.approx(
        (jobs[1].submit_time_s - (T0 + 60 + 1830) + jobs[2].submit_time_s - second_asleep_at) / 3600, abs=60 / 3600)


def test_minimum_asleep_time_holds_back_the_warm_reserve_not_a_job() -> None:
    from greengpu.model import WakeNode
    from greengpu.sleep.sleep_wake import SleepObservation, plan_wakes

    policy = SleepPolicy(enabled=True, min_asleep_s=600, warm_reserve_gpus=2)
    views = tuple(NodeView(f"n{i}", 1, PowerState.ASLEEP, T0 - 100, False, None) for i in range(3))
    seen = SleepObservation(now_s=T0, asleep=views)  # all three asleep for 100 s only
    assert plan_wakes(seen, policy) == ()  # the reserve waits for the minimum
    asked = plan_wakes(seen, policy, [WakeNode("n1", "needed by j")])
    assert [w.node for w in asked] == ["n1"]  # the job's node wakes at once
    later = replace(seen, now_s=T0 + 500)
    assert sorted(w.node for w in plan_wakes(later, policy)) == ["n0", "n1"]  # then the reserve's two


def test_a_node_that_never_wakes_is_retried_then_failed_and_the_job_goes_elsewhere() -> None:
    policy = sleepy(wake_timeout_s=600, wake_retries=3, wake_backoff_s=30)
    jobs = [job("a", duration_s=60, submit_time_s=T0), job("b", duration_s=60, submit_time_s=T0 + 4000)]
    sim = Simulation(nodes(2), policy, jobs, never_wake={"n1"})
    result = sim.run().to_json()
    assert result["failed_nodes"] == ["n1"]
    assert result["jobs_completed"] == 2 and result["invariant_violations"] == 0
    assert result["wakes"] == 4 + 1  # four wake-ups to n1, then one to n2
    retries_s = sum(backoff_s("n1", attempt, policy.sleep) for attempt in (1, 2, 3))
    expected = 4 * 600 + retries_s + ONE_GPU.boot_s
    assert waits(sim)["b"] == pytest.approx(expected, abs=60)  # plus at most one scheduling tick
    assert sim.nodes["n1"].power is PowerState.FAILED


def test_windows_confine_sleep() -> None:
    # A window that never includes the idle period: no sleep at all.
    jobs = [job("a", duration_s=60, submit_time_s=T0), job("b", duration_s=60, submit_time_s=T0 + 4000)]
    t0_minute = int(T0 % 86400 // 60)
    closed = SleepWindow(days=("mon",), start_minute=(t0_minute + 600) % 1440, end_minute=(t0_minute + 660) % 1440)
    sim = Simulation(nodes(1), sleepy(windows=(closed,)), jobs)
    result = sim.run().to_json()
    assert result["wakes"] == 0 and result["node_sleep_hours"] == 0


def test_warm_reserve_follows_use_with_a_floor() -> None:
    from greengpu.sleep.suspends import warm_reserve_target_gpus

    policy = SleepPolicy(enabled=True, warm_reserve_gpus=8, warm_reserve_busy_fraction=0.25)
    assert warm_reserve_target_gpus(policy, 0) == 8
    assert warm_reserve_target_gpus(policy, 100) == 25
    # Rounded down: the reserve is what use justifies in whole GPUs, never a GPU bought for a fraction.
    assert warm_reserve_target_gpus(policy, 103) == 25
    assert warm_reserve_target_gpus(policy, 104) == 26
    assert warm_reserve_target_gpus(SleepPolicy(), 500) == 0
    # A lab with two GPUs in use and a 35% share keeps no idle node awake for 0.7 GPU of reserve
    # (rounded up, it kept a whole 4-GPU server awake); its fixed floor, when set, still holds.
    lab = SleepPolicy(enabled=True, warm_reserve_gpus=0, warm_reserve_busy_fraction=0.35)
    assert warm_reserve_target_gpus(lab, 2) == 0
    assert warm_reserve_target_gpus(lab, 6) == 2
    assert warm_reserve_target_gpus(SleepPolicy(enabled=True, warm_reserve_gpus=1, warm_reserve_busy_fraction=0.35),
                                    2) == 1


def test_reserve_shortfall_counts_free_awake_and_waking_nodes() -> None:
    from greengpu.sleep.suspends import warm_reserve_shortfall_gpus

    views_now = [NodeView("a", 8, PowerState.AWAKE, 0, False, 0), NodeView("b", 8, PowerState.WAKING, 0, False, 0),
                 NodeView("c", 8, PowerState.AWAKE, 0, True, None), NodeView("d", 8, PowerState.ASLEEP, 0, False, 0)]
    policy = SleepPolicy(enabled=True)
    assert warm_reserve_shortfall_gpus(views_now, policy, reserve_gpus=24) == 8  # a and b count; c is busy
    assert warm_reserve_shortfall_gpus(views_now, policy, reserve_gpus=16) == 0


def idle(name: str, gpus: int, idle_since_s: float, power_since_s: float = 0.0) -> NodeView:
    return NodeView(name, gpus, PowerState.AWAKE, power_since_s, False, idle_since_s)


PLANNER = SleepPolicy(enabled=True, idle_timeout_s=600, min_awake_s=1200, max_suspends_per_min=2)


def test_the_planner_suspends_the_longest_idle_first_and_says_for_how_long() -> None:
    now = 10_000.0
    views_now = [idle("b", 8, 8_000.0), idle("a", 8, 7_000.0), idle("c", 8, 8_000.0)]
    chosen = plan_suspends(now, views_now, PLANNER, blocked_pending=False, suspends_last_minute=0)
    assert [(s.node, s.reason) for s in chosen] == [("a", "idle 3000 s"), ("b", "idle 2000 s")]


def test_the_suspend_budget_is_per_minute_to_the_node() -> None:
    now = 10_000.0
    views_now = [idle("a", 8, 0.0), idle("b", 8, 1.0), idle("c", 8, 2.0)]
    plan = PLANNER
    assert [s.node for s in plan_suspends(now, views_now, plan, blocked_pending=False, suspends_last_minute=1)] == ["a"]
    assert plan_suspends(now, views_now, plan, blocked_pending=False, suspends_last_minute=2) == []
    assert [s.node for s in plan_suspends(now, views_now, plan, blocked_pending=False,
                                          suspends_last_minute=0)] == ["a", "b"]


def test_idle_timeout_and_minimum_awake_time_hold_to_the_second() -> None:
    now = 10_000.0
    views_now = [idle("young", 8, now - 599), idle("due", 8, now - 600), idle("woken", 8, 0.0, now - 1199),
                 idle("settled", 8, 1.0, now - 1200)]
    chosen = plan_suspends(now, views_now, replace(PLANNER, max_suspends_per_min=10), blocked_pending=False,
                           suspends_last_minute=0)
    assert [s.node for s in chosen] == ["settled", "due"]


def test_a_node_too_big_for_the_reserve_is_skipped_and_a_smaller_one_still_sleeps() -> None:
    now = 10_000.0
    views_now = [idle("big", 8, 0.0), idle("small", 4, 100.0), NodeView("busy", 8, PowerState.AWAKE, 0, True, None)]
    # 12 free GPUs awake, 6 to keep: big would leave 4, small leaves 8.
    chosen = plan_suspends(now, views_now, PLANNER, blocked_pending=False, suspends_last_minute=0, reserve_gpus=6)
    assert [s.node for s in chosen] == ["small"]
    floor = replace(PLANNER, warm_reserve_gpus=6)
    assert [s.node for s in plan_suspends(now, views_now, floor, blocked_pending=False,
                                          suspends_last_minute=0)] == ["small"]
    # reserve_gpus given replaces the policy's floor (0 here): both may sleep.
    assert [s.node for s in plan_suspends(now, views_now, floor, blocked_pending=False, suspends_last_minute=0,
                                          reserve_gpus=0)] == ["big", "small"]


def test_the_warm_reserve_is_held_by_the_nodes_that_cost_least_to_keep_awake() -> None:
    """A lab: a 4-GPU server (350 W host + 4 x 52 W idle GPUs) and a 2-GPU workstation (120 + 2 x 35 W).
    A reserve of 2 GPUs is kept on the workstation, whichever has been idle longer."""
    now = 10_000.0
    server_w, station_w = 350 + 4 * 52, 120 + 2 * 35
    for server_idle, station_idle in ((0.0, 100.0), (100.0, 0.0)):
        views_now = [replace(idle("server", 4, server_idle), idle_w=server_w),
                     replace(idle("station", 2, station_idle), idle_w=station_w)]
        chosen = plan_suspends(now, views_now, PLANNER, blocked_pending=False, suspends_last_minute=0, reserve_gpus=2)
        assert [s.node for s in chosen] == ["server"]
        # A reserve of 3 needs the server's GPUs: the workstation sleeps instead.
        chosen = plan_suspends(now, views_now, PLANNER, blocked_pending=False, suspends_last_minute=0, reserve_gpus=3)
        assert [s.node for s in chosen] == ["station"]
    # Without a reserve the longest idle sleeps first, as always (the order matters under the rate limit).
    views_now = [replace(idle("server", 4, 100.0), idle_w=server_w), replace(idle("station", 2, 0.0), idle_w=station_w)]
    one_a_minute = replace(PLANNER, max_suspends_per_min=1)
    assert [s.node for s in plan_suspends(now, views_now, one_a_minute, blocked_pending=False,
                                          suspends_last_minute=0)] == ["station"]


def test_the_warm_reserve_wakes_the_cheapest_node_first() -> None:
    from greengpu.sleep.sleep_wake import SleepObservation, plan_wakes

    asleep = (NodeView("a-server", 4, PowerState.ASLEEP, 0.0, False, None, 558.0),
              NodeView("b-station", 2, PowerState.ASLEEP, 0.0, False, None, 190.0))
    seen = SleepObservation(now_s=10_000.0, asleep=asleep)
    policy = SleepPolicy(enabled=True, warm_reserve_gpus=2)
    assert [w.node for w in plan_wakes(seen, policy)] == ["b-station"]
    assert [w.node for w in plan_wakes(seen, replace(policy, warm_reserve_gpus=3))] == ["b-station", "a-server"]


def test_the_planner_only_suspends_inside_a_window_in_local_time() -> None:
    from datetime import UTC, datetime

    monday_1730_utc = datetime(2024, 1, 1, 17, 30, tzinfo=UTC).timestamp()
    nights = replace(PLANNER, windows=(SleepWindow(days=("mon",), start_minute=19 * 60, end_minute=7 * 60),))
    views_now = [idle("a", 8, 0.0)]
    assert plan_suspends(monday_1730_utc, views_now, nights, blocked_pending=False, suspends_last_minute=0) == []
    chosen = plan_suspends(monday_1730_utc, views_now, nights, blocked_pending=False, suspends_last_minute=0,
                           timezone="Europe/Athens")  # 19:30 at the site (UTC+2 in January)
    assert [s.node for s in chosen] == ["a"]
    one_second_early = datetime(2024, 1, 1, 18, 59, 59, tzinfo=UTC).timestamp()
    assert plan_suspends(one_second_early, views_now, nights, blocked_pending=False, suspends_last_minute=0) == []
    assert plan_suspends(monday_1730_utc + 7200, views_now, replace(nights, enabled=False), blocked_pending=False,
                         suspends_last_minute=0) == []


def test_reserve_shortfall_uses_the_policy_floor_and_nothing_when_disabled() -> None:
    from greengpu.sleep.suspends import warm_reserve_shortfall_gpus

    views_now = [idle("a", 4, 0.0)]
    assert warm_reserve_shortfall_gpus(views_now, SleepPolicy(enabled=True, warm_reserve_gpus=6)) == 2
    assert warm_reserve_shortfall_gpus([], SleepPolicy(enabled=True, warm_reserve_gpus=1)) == 1
    assert warm_reserve_shortfall_gpus([], SleepPolicy(enabled=False, warm_reserve_gpus=8)) == 0
    assert warm_reserve_shortfall_gpus([], SleepPolicy(enabled=True), reserve_gpus=0) == 0


def test_the_forecast_headroom_counts_only_with_use_forecast() -> None:
    from greengpu.sleep.suspends import warm_reserve_target_gpus

    forecasting = SleepPolicy(enabled=True, warm_reserve_gpus=4, use_forecast=True)
    assert warm_reserve_target_gpus(forecasting, 0) == 4
    assert warm_reserve_target_gpus(replace(forecasting, warm_reserve_gpus=0), 0) == 0
    assert warm_reserve_target_gpus(forecasting, 0, forecast_headroom_gpus=12) == 12
    assert warm_reserve_target_gpus(replace(forecasting, use_forecast=False), 0, forecast_headroom_gpus=12) == 4


def test_each_suspension_counts_against_the_reserve_for_the_next() -> None:
    # Three idle 8-GPU nodes and 8 GPUs to keep: the first two may sleep (24 -> 16 -> 8), the third not.
    views_now = [idle("a", 8, 0.0), idle("b", 8, 1.0), idle("c", 8, 2.0)]
    chosen = plan_suspends(10_000.0, views_now, replace(PLANNER, max_suspends_per_min=10), blocked_pending=False,
                           suspends_last_minute=0, reserve_gpus=8)
    assert [s.node for s in chosen] == ["a", "b"]
