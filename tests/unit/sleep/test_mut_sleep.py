"""The sleep planner's newer parts by hand: a node's idle draw, and the nodes a waiting job could use."""

from __future__ import annotations

from dataclasses import replace

from schedkit import node_type

from greengpu.model import PowerState
from greengpu.policy import SleepPolicy
from greengpu.sleep.suspends import NodeView, idle_draw_w, plan_suspends


def test_idle_draw_is_the_host_and_every_idle_gpu() -> None:
    # schedkit's node type: host 400 W idle, each GPU 50 W idle; 8 GPUs: 800 W, 2 GPUs: 500 W.
    assert idle_draw_w(node_type(8)) == 800.0
    assert idle_draw_w(node_type(2)) == 500.0


def idle(name: str, gpus: int = 8) -> NodeView:
    return NodeView(name, gpus, PowerState.AWAKE, power_since_s=0.0, busy=False, idle_since_s=0.0)


def test_nodes_a_waiting_job_could_use_stay_awake_only_when_the_planner_is_priority_aware() -> None:
    nodes = [idle("a"), idle("b")]
    aware = SleepPolicy(enabled=True, idle_timeout_s=60.0, min_awake_s=0.0)
    slept = plan_suspends(7200.0, nodes, aware, blocked_pending=True, suspends_last_minute=0, keep_awake={"a"})
    assert [s.node for s in slept] == ["b"]
    unaware = replace(aware, priority_aware=False)
    slept = plan_suspends(7200.0, nodes, unaware, blocked_pending=True, suspends_last_minute=0, keep_awake={"a"})
    assert [s.node for s in slept] == ["a", "b"]
