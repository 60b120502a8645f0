"""Wake verification (pure) and its controller side: retries with backoff, failure, restart mid-wake."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
from inventories import a100_type, wol_node, write_inventory
from manual_clock import ManualClock

from greengpu.backends.wol import Waker
from greengpu.config.inventory import load_cluster
from greengpu.control.hooks.sleep_control import SleepControl
from greengpu.control.hooks.state_store import StateStore
from greengpu.policy import SleepPolicy
from greengpu.sleep.wake_verify import JITTER_FRACTION, WakeStage, advance, backoff_s, next_due_s, start_wake

POLICY = SleepPolicy(enabled=True, wake_timeout_s=600.0, wake_retries=2, wake_backoff_s=30.0)


def test_a_node_reported_up_is_done() -> None:
    track, event = start_wake("gpu01", 0.0, POLICY, "job 7")
    assert event.kind == "send" and track.stage is WakeStage.WAKING and track.deadline_s == 600.0
    track, events = advance(track, 120.0, is_up=False, policy=POLICY)
    assert track.stage is WakeStage.WAKING and events == []  # before the deadline: keep waiting
    track, events = advance(track, 181.0, is_up=True, policy=POLICY)
    assert track.stage is WakeStage.UP and [e.kind for e in events] == ["up"]


def test_timeouts_retry_with_growing_jittered_backoff_then_fail() -> None:
    track, _ = start_wake("gpu01", 0.0, POLICY, "job 7")
    kinds: list[str] = []
    sends_at = [0.0]
    now = 0.0
    while track.stage not in (WakeStage.FAILED, WakeStage.UP):
        due = next_due_s(track)
        assert due is not None
        now = due
        track, events = advance(track, now, is_up=False, policy=POLICY)
        kinds += [e.kind for e in events]
        sends_at += [now for e in events if e.kind == "send"]
    assert kinds == ["timeout", "send", "timeout", "send", "failed"]
    assert track.attempts == 1 + POLICY.wake_retries
    first_gap = sends_at[1] - (sends_at[0] + 600.0)
    second_gap = sends_at[2] - (sends_at[1] + 600.0)
    assert 30.0 <= first_gap <= 30.0 * (1 + JITTER_FRACTION)
    assert 60.0 <= second_gap <= 60.0 * (1 + JITTER_FRACTION)
    assert backoff_s("gpu01", 1, POLICY) != backoff_s("gpu02", 1, POLICY)  # nodes do not retry in step
    assert backoff_s("gpu01", 1, POLICY) == backoff_s("gpu01", 1, POLICY)  # and the decision is pure


def test_an_up_report_during_backoff_wins() -> None:
    track, _ = start_wake("gpu01", 0.0, POLICY, "r")
    track, _ = advance(track, 600.0, False, POLICY)
    assert track.stage is WakeStage.BACKOFF
    track, events = advance(track, 610.0, True, POLICY)
    assert track.stage is WakeStage.UP and events[0].kind == "up"


def test_the_events_say_when_and_how_often_with_the_figures_of_the_track() -> None:
    track, event = start_wake("gpu01", 100.0, POLICY, "job 7")
    assert event.message == "gpu01: wake-up 1 sent (job 7)"
    track, events = advance(track, 700.0, False, POLICY)
    wait_s = backoff_s("gpu01", 1, POLICY)
    assert track.next_try_s == 700.0 + wait_s and track.sent_s == 100.0
    assert [e.message for e in events] == [f"gpu01: not up 600 s after wake-up 1; retrying at +{wait_s:.0f} s"]
    track, events = advance(track, 700.0 + wait_s, False, POLICY)
    assert (track.stage, track.attempts, track.sent_s, track.next_try_s) == (WakeStage.WAKING, 2, 700.0 + wait_s, None)
    assert track.deadline_s == pytest.approx(1300.0 + wait_s)
    assert [e.message for e in events] == ["gpu01: wake-up 2 sent (retry)"]
    track, events = advance(track, 1400.0 + wait_s, True, POLICY)
    assert track.stage is WakeStage.UP and track.next_try_s is None
    assert [e.message for e in events] == [f"gpu01: up {1300.0 + wait_s:.0f} s after the first wake-up (attempt 2)"]
    assert advance(track, 5000.0, False, POLICY) == (track, [])  # done: nothing more to do or say


def test_an_up_report_during_backoff_clears_the_retry() -> None:
    track, _ = start_wake("gpu01", 0.0, POLICY, "r")
    track, _ = advance(track, 600.0, False, POLICY)
    assert track.next_try_s is not None
    track, _ = advance(track, 601.0, True, POLICY)
    assert track.stage is WakeStage.UP and track.next_try_s is None and next_due_s(track) is None


def test_before_the_retry_time_a_backoff_waits() -> None:
    track, _ = start_wake("gpu01", 0.0, POLICY, "r")
    track, _ = advance(track, 600.0, False, POLICY)
    assert track.next_try_s is not None
    assert advance(track, track.next_try_s - 1.0, False, POLICY) == (track, [])


def test_the_failure_alert_names_the_attempts_and_the_time() -> None:
    once = SleepPolicy(enabled=True, wake_timeout_s=300.0, wake_retries=0, wake_backoff_s=30.0)
    track, _ = start_wake("gpu07", 50.0, once, "r")
    track, events = advance(track, 350.0, False, once)
    assert track.stage is WakeStage.FAILED and track.next_try_s is None and next_due_s(track) is None
    assert [e.message for e in events] == [
        "gpu07: did not wake after 1 wake-ups over 300 s; marked failed, no longer counted on; "
        "check its power, BMC and wake-on-LAN setting"]
    assert advance(track, 9999.0, True, once) == (track, [])  # a failed node stays failed until re-planned


def test_without_backoff_a_timed_out_wake_is_resent_at_once() -> None:
    eager = SleepPolicy(enabled=True, wake_timeout_s=300.0, wake_retries=1, wake_backoff_s=0.0)
    track, _ = start_wake("gpu01", 0.0, eager, "r")
    track, events = advance(track, 300.0, False, eager)
    assert [e.kind for e in events] == ["timeout", "send"]
    assert (track.stage, track.attempts, track.sent_s, track.deadline_s) == (WakeStage.WAKING, 2, 300.0, 600.0)


def test_backoff_doubles_per_attempt_up_to_its_cap_and_jitters_by_at_most_a_quarter() -> None:
    for attempt, base in ((1, 30.0), (2, 60.0), (3, 120.0), (5, 480.0), (6, 600.0), (12, 600.0)):
        delay = backoff_s("gpu01", attempt, POLICY)
        assert base <= delay <= base * (1 + JITTER_FRACTION), (attempt, delay)
    assert 30.0 <= backoff_s("gpu01", 0, POLICY) <= 37.5  # attempt 0 counts as the first
    # The jitter is spread over the whole quarter, not stuck at one end: over many nodes it covers both halves.
    fractions = [backoff_s(f"n{i}", 1, POLICY) / 30.0 - 1.0 for i in range(200)]
    assert min(fractions) < JITTER_FRACTION / 4 and max(fractions) > 3 * JITTER_FRACTION / 4


def inventory(tmp_path: Path, port: int) -> Path:
    return write_inventory(tmp_path / "cluster.yaml", {"a100x8": a100_type()},
                           [wol_node("gpu[01-02]", "a100x8", "02:00:5e:10:00:01", port)])






def received_macs(sock: socket.socket, count: int) -> list[str]:
    macs = []
    for _ in range(count):
        packet, _ = sock.recvfrom(4096)
        assert len(packet) == 102 and packet[:6] == b"\xff" * 6
        macs.append(packet[6:12].hex(":"))
    return macs


def test_controller_restart_in_the_middle_of_a_wake_resumes_verification(tmp_path: Path, udp: socket.socket) -> None:
    cluster = load_cluster(inventory(tmp_path, udp.getsockname()[1]))
    clock = ManualClock()
    first = SleepControl(StateStore(tmp_path / "state.db"), Waker(cluster), POLICY, clock=clock)
    first.suspended(["gpu02"], "idle 900 s in the night window")
    first.wake(["gpu02"], "job 42 needs 8 GPUs")
    assert received_macs(udp, 1) == ["02:00:5e:10:00:02"]
    del first  # the controller dies here, the node never came up

    clock.now_s += 700.0  # past the deadline of the first wake-up
    second = SleepControl(StateStore(tmp_path / "state.db"), Waker(cluster), POLICY, clock=clock)
    [track] = second.store.open_tracks()
    assert (track.node, track.attempts, track.reason) == ("gpu02", 1, "job 42 needs 8 GPUs")
    events = second.verify(up_nodes=[])
    assert [e.kind for e in events] == ["timeout"]  # waits out the backoff first
    clock.now_s += 40.0
    assert [e.kind for e in second.verify(up_nodes=[])] == ["send"]
    assert received_macs(udp, 1) == ["02:00:5e:10:00:02"]  # a second packet, from the new controller
    clock.now_s += 200.0
    assert [e.kind for e in second.verify(up_nodes=["gpu02"])] == ["up"]
    assert second.store.open_tracks() == []
    [record] = second.store.records()
    assert (record.node, record.state, record.reason) == ("gpu02", "up", "idle 900 s in the night window")
    kinds = [kind for _, _, kind, _ in second.store.events("gpu02")]
    assert kinds == ["suspend", "send", "timeout", "send", "up"]


def test_a_node_that_never_wakes_is_failed_and_alerted(tmp_path: Path, udp: socket.socket) -> None:
    cluster = load_cluster(inventory(tmp_path, udp.getsockname()[1]))
    clock = ManualClock()
    control = SleepControl(StateStore(tmp_path / "state.db"), Waker(cluster), POLICY, clock=clock)
    control.wake(["gpu01"], "job 1")
    for _ in range(20):
        clock.now_s += 300.0
        control.verify(up_nodes=[])
    assert control.failed_nodes() == {"gpu01"}
    assert len(control.alerts) == 1 and control.alerts[0].startswith("gpu01: did not wake after 3 wake-ups")
    assert received_macs(udp, 3) == ["02:00:5e:10:00:01"] * 3
    assert control.wake(["gpu01"], "again") != []  # a failed node can be tried again by an operator's request


def test_a_node_already_waking_is_not_sent_twice(tmp_path: Path, udp: socket.socket) -> None:
    cluster = load_cluster(inventory(tmp_path, udp.getsockname()[1]))
    control = SleepControl(StateStore(tmp_path / "state.db"), Waker(cluster), POLICY, clock=ManualClock())
    assert len(control.wake(["gpu01", "gpu02"], "burst")) == 2
    assert control.wake(["gpu01"], "another job") == []
    received_macs(udp, 2)
    udp.settimeout(0.2)
    with pytest.raises(TimeoutError):
        udp.recvfrom(4096)


def test_the_worst_case_last_attempt_bounds_every_simulated_retry_schedule() -> None:
    """`last_attempt_s` (what `greengpu check` compares with Slurm's ResumeTimeout) is never earlier than
    the last wake-up the pure decision sends, for any node name (jitter), polled every 60 s."""
    from greengpu.sleep.wake_verify import last_attempt_s

    bound_s = last_attempt_s(POLICY, poll_interval_s=60.0)
    for node in (f"gpu{i:03d}" for i in range(50)):
        track, _ = start_wake(node, 0.0, POLICY, "r")
        last_send_s, now = 0.0, 0.0
        while track.stage is not WakeStage.FAILED:
            now += 60.0  # the verification pass runs every minute
            track, events = advance(track, now, is_up=False, policy=POLICY)
            if any(e.kind == "send" for e in events):
                last_send_s = now
        assert last_send_s <= bound_s
    # And it is tight: without polling delay it is the timeouts plus the full-jitter backoffs.
    assert last_attempt_s(POLICY) == 2 * 600.0 + (30.0 + 60.0) * (1 + JITTER_FRACTION)
