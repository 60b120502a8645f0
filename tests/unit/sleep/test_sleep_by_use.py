"""Idle by measured utilisation (the sleep lever with the agents' reports): a node idle in the scheduler's books
sleeps only when its GPUs are all below `idle_util_threshold` and run no process; a stale report keeps it awake;
a node without reports is idle as before (no job); idle time counts from the last report that showed it busy."""

from __future__ import annotations

from greengpu.model import PowerState
from greengpu.policy import SleepPolicy, SleepWindow
from greengpu.sleep.sleep_wake import SleepObservation, plan_sleep
from greengpu.sleep.suspends import NodeUse, NodeView
from greengpu.sleep.work_waiting import NOTHING_WAITS

NOW = 100_000.0
POLICY = SleepPolicy(enabled=True, idle_timeout_s=600.0, idle_util_threshold=0.2, windows=(SleepWindow(),),
                     min_awake_s=0.0, max_suspends_per_min=10)


def idle_node(name: str) -> NodeView:
    return NodeView(name, 4, PowerState.AWAKE, 0.0, False, NOW - 3600.0)


def slept(use: dict[str, NodeUse]) -> set[str]:
    seen = SleepObservation(now_s=NOW, idle_awake=tuple(idle_node(n) for n in ("a", "b", "c", "d", "e")), use=use)
    return {action.node for action in plan_sleep(seen, POLICY, NOTHING_WAITS)}


def test_without_reports_a_node_without_a_job_sleeps_as_before() -> None:
    assert slept({}) == {"a", "b", "c", "d", "e"}


def test_measured_use_keeps_busy_or_unknown_nodes_awake() -> None:
    use = {
        "a": NodeUse(0.9, 0, NOW - 10.0),    # a GPU busy outside the scheduler's books
        "b": NodeUse(0.0, 1, NOW - 10.0),    # a job process on a GPU at 0 %: still a process
        "c": NodeUse(None, 0, NOW - 3600.0),  # stale report: unknown, stays awake
        "d": NodeUse(0.05, 0, NOW - 3600.0),  # below the threshold, no process, idle long enough: sleeps
        # "e": no report at all (a node without an agent): as before
    }
    assert slept(use) == {"d", "e"}


def test_the_threshold_is_the_policys_and_a_gpu_at_it_is_busy() -> None:
    assert slept({"d": NodeUse(0.2, 0, None)}) == {"a", "b", "c", "e"}
    assert slept({"d": NodeUse(0.19, 0, None)}) == {"a", "b", "c", "d", "e"}


def test_idle_time_counts_from_the_last_report_that_showed_the_node_busy() -> None:
    # Free in the books for an hour, but busy by its report 5 minutes ago: not idle for the 10-minute timeout.
    assert "d" not in slept({"d": NodeUse(0.0, 0, NOW - 300.0)})
    assert "d" in slept({"d": NodeUse(0.0, 0, NOW - 700.0)})
