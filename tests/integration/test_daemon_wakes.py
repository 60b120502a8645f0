"""The daemon's wake verification on the fake cluster: a wake-up that does not come up is sent again with the
simulator's backoff (greengpu.sleep.wake_verify), and a node given up on raises one alert."""

from __future__ import annotations

import itertools
from pathlib import Path

from manual_clock import ManualClock
from test_daemon import T0, make

from greengpu.model import Job
from greengpu.sleep.wake_verify import last_attempt_s


def test_a_node_that_never_comes_up_is_woken_again_with_backoff_then_raises_one_wake_failed_alert(
        tmp_path: Path) -> None:
    """The simulator's retry rule (greengpu.sleep.wake_verify), live: `1 + wake_retries` wake-ups, each after the
    wake timeout and the rule's backoff, then one alert per lost node."""
    clock = ManualClock(T0)
    wide = [Job(job_id="all", tenant="a", gpus=12, duration_s=600, submit_time_s=T0 + 1200, gpus_per_node=4)]
    daemon, body, store = make(tmp_path, clock, jobs=wide, never_wake=frozenset({"n1", "n2", "n3"}))
    sleep = daemon.policy.sleep
    ticks = int((1200 + last_attempt_s(sleep, 60.0) + sleep.wake_timeout_s) // 60) + 5
    for _ in range(ticks):
        clock.now_s += 60
        daemon.tick()
    alerts = [r for r in daemon.audit.records() if r.get("alert") == "wake_failed"]
    assert alerts and len({a["node"] for a in alerts}) == len(alerts)  # one alert per lost node, not one a tick
    assert all(f"did not wake after {1 + sleep.wake_retries} wake-ups" in a["message"] for a in alerts)
    wakes = [e for e in store.entries() if e.kind == "wake"]
    for alert in alerts:  # every attempt went out, each after the last one's timeout
        sent = sorted(e.time_s for e in wakes if e.node == alert["node"])
        assert len(sent) == 1 + sleep.wake_retries
        assert all(b - a >= sleep.wake_timeout_s + sleep.wake_backoff_s for a, b in itertools.pairwise(sent))
    assert "all" in body.pending  # the job still waits: nothing pretends it ran
