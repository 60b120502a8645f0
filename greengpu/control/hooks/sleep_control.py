"""Carrying out sleep and wake with verification: the controller side, shared by the Slurm hooks, the
Kubernetes path and the daemon. Decisions come from `greengpu.sleep.wake_verify` (pure); this module
sends the wake-ups, persists every step in the state store and raises the alerts.
"""

from __future__ import annotations

import logging
import shlex
import subprocess
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace

from greengpu.backends.wol import WakeError, Waker
from greengpu.control.hooks.state_store import StateStore, wall_clock
from greengpu.policy import SleepPolicy
from greengpu.sleep.wake_verify import WakeEvent, WakeStage, WakeTrack, advance, start_wake

log = logging.getLogger("greengpu.sleep")


SUSPEND_TIMEOUT_S = 120.0
"""How long a suspend command may take to say how it went (ssh's ConnectTimeout is 10 s; `systemctl
suspend` and `poweroff` return once the job is queued). Longer counts as failed: the node is then
treated as awake, the safe side."""
STDERR_TAIL_CHARS = 400


@dataclass(frozen=True)
class SuspendResult:
    """How one suspend command ended: its exit code (None: it could not start or did not finish in time)
    and the tail of its stderr, the real cause of a failure (ssh's own words, node-suspend's refusal)."""

    node: str
    argv: tuple[str, ...]
    returncode: int | None
    stderr_tail: str
    duration_s: float

    @property
    def ok(self) -> bool:
        return self.returncode == 0

    def describe(self) -> str:
        """One line for the log, the audit and the alert."""
        command = shlex.join(self.argv)
        if self.ok:
            return f"{self.node}: suspend command succeeded in {self.duration_s:.1f} s: {command}"
        how = f"exited {self.returncode}" if self.returncode is not None else "did not complete"
        said = f": {self.stderr_tail}" if self.stderr_tail else " (no stderr)"
        return f"{self.node}: suspend command {how} after {self.duration_s:.1f} s ({command}){said}"


def suspend_argv(template: str, node: str) -> list[str]:
    """The suspend command for `node`: `{node}` in `template` replaced."""
    return [part.format(node=node) for part in shlex.split(template)]


def run_suspend(template: str, node: str, timeout_s: float = SUSPEND_TIMEOUT_S,
                monotonic: Callable[[], float] = time.monotonic) -> SuspendResult:
    """Run the suspend command for `node`, wait for it (at most `timeout_s`) and say how it ended.

    Never raises: a command that cannot start or hangs is a failed suspend like any other, so that every
    caller reads the outcome and none records a node asleep that is not.
    """
    argv = tuple(suspend_argv(template, node))
    started = monotonic()
    try:
        result = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                timeout=timeout_s, check=False, start_new_session=True)
    except subprocess.TimeoutExpired as error:
        said = _tail(error.stderr)
        return SuspendResult(node, argv, None, f"no exit within {timeout_s:g} s" + (f"; {said}" if said else ""),
                             monotonic() - started)
    except OSError as error:
        return SuspendResult(node, argv, None, f"cannot start: {error}", monotonic() - started)
    return SuspendResult(node, argv, result.returncode, _tail(result.stderr), monotonic() - started)


def _tail(raw: bytes | str | None) -> str:
    text = raw.decode(errors="replace") if isinstance(raw, bytes) else (raw or "")
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return " | ".join(lines)[-STDERR_TAIL_CHARS:]


class SleepControl:
    def __init__(self, store: StateStore, waker: Waker, policy: SleepPolicy,
                 clock: Callable[[], float] = wall_clock) -> None:
        self.store = store
        self.waker = waker
        self.policy = policy
        self.clock = clock
        self.alerts: list[str] = []

    def suspended(self, nodes: Iterable[str], reason: str) -> None:
        """Remember that greengpu put `nodes` to sleep, and why."""
        now = self.clock()
        for node in nodes:
            self.store.record_suspend(node, now, reason)
            log.info("%s: suspended (%s)", node, reason)

    def refused(self, nodes: Iterable[str], why: str) -> None:
        """Remember that a suspend of `nodes` was refused (they stay awake), and why."""
        now = self.clock()
        for node in nodes:
            self.store.add_event(now, node, "refused", f"{node}: suspend refused: {why}")

    def suspend_failed(self, result: SuspendResult) -> str:
        """The suspend command failed: the node is recorded awake (never asleep), and the alert names the
        command's exit code and its stderr, the real cause."""
        now = self.clock()
        message = f"{result.describe()}; the node stays awake"
        self.store.record_suspend_failed(result.node, now, message)
        self.alerts.append(message)
        log.error("ALERT %s", message)
        return message

    def failed(self, nodes: Iterable[str], why: str) -> list[str]:
        """The workload manager gave up on waking `nodes`: close their wake-ups as failed and alert."""
        now = self.clock()
        messages: list[str] = []
        for node in nodes:
            track = self.store.track(node) or WakeTrack(node, WakeStage.WAKING, 0, now, now, now)
            self.store.save_track(replace(track, stage=WakeStage.FAILED, next_try_s=None), now)
            event = WakeEvent(node, "failed", f"{node}: did not wake ({why}) after {track.attempts} wake-up(s); "
                                              "check its power, BMC and wake-on-LAN setting")
            messages.extend(e.message for e in self._carry_out([event], now))
        return messages

    def wake(self, nodes: Iterable[str], reason: str) -> list[WakeEvent]:
        """Send a first wake-up to each node not already being woken; verification follows in `verify`."""
        now = self.clock()
        events = []
        for node in nodes:
            if self.store.track(node) is not None:
                continue  # already waking: its verification goes on
            track, event = start_wake(node, now, self.policy, reason)
            self.store.save_track(track, now)  # persisted before the packet: a crash here still verifies
            events.extend(self._carry_out([event], now))
        return events

    def verify(self, up_nodes: Iterable[str]) -> list[WakeEvent]:
        """Advance every open wake-up: nodes reported up are done; timeouts are retried, then failed."""
        now = self.clock()
        up = set(up_nodes)
        events: list[WakeEvent] = []
        for track in self.store.open_tracks():
            new_track, new_events = advance(track, now, track.node in up, self.policy)
            if new_track != track:
                self.store.save_track(new_track, now)
            events.extend(self._carry_out(new_events, now))
        return events

    def failed_nodes(self) -> set[str]:
        return {r.node for r in self.store.records() if r.state == WakeStage.FAILED.value}

    def _carry_out(self, events: list[WakeEvent], now: float) -> list[WakeEvent]:
        done = []
        for event in events:
            if event.kind == "send":
                try:
                    self.waker.wake([event.node])
                except (WakeError, OSError) as error:
                    event = WakeEvent(event.node, "send_failed", f"{event.node}: wake-up not sent: {error}")
            self.store.add_event(now, event.node, event.kind, event.message)
            if event.kind in ("failed", "send_failed"):
                self.alerts.append(event.message)
                log.error("ALERT %s", event.message)
            else:
                log.info("%s", event.message)
            done.append(event)
        return done
