"""Wake verification: was a node really woken? Retries with backoff, then a node marked failed. Pure.

A wake-up is a UDP packet that nobody acknowledges (or an IPMI call that says nothing of the boot),
so a node counts as up only when its agent or the workload manager reports it. Until then it is
`waking` and the scheduling core does not place work on it. A node not up within `wake_timeout_s`
is sent another wake-up after an exponential backoff with jitter (base `wake_backoff_s`, doubling,
at most `MAX_BACKOFF_S`, plus up to `JITTER_FRACTION` more so a rack of nodes does not retry in
step); after `1 + wake_retries` attempts it is `failed`: an alert names it and the planner stops
counting on it (the core plans wakes on other nodes for the work that waited).

The jitter is drawn from a hash of node name and attempt, so the decision stays a pure function
of its inputs (the simulator and the daemon get the same retry times).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, replace
from enum import StrEnum

from greengpu.policy import SleepPolicy

MAX_BACKOFF_S = 600.0
JITTER_FRACTION = 0.25


class WakeStage(StrEnum):
    WAKING = "waking"
    """A wake-up was sent; waiting for the node to report up until the deadline."""
    BACKOFF = "backoff"
    """The last attempt timed out; the next wake-up goes out at `next_try_s`."""
    UP = "up"
    FAILED = "failed"


@dataclass(frozen=True)
class WakeTrack:
    node: str
    stage: WakeStage
    attempts: int
    """Wake-ups sent so far."""
    first_sent_s: float
    sent_s: float
    deadline_s: float
    next_try_s: float | None = None
    reason: str = ""


@dataclass(frozen=True)
class WakeEvent:
    node: str
    kind: str
    """`send` (the body sends a wake-up now), `up`, `timeout`, `failed` (an alert)."""
    message: str


def backoff_s(node: str, attempt: int, policy: SleepPolicy) -> float:
    """Delay before attempt `attempt + 1`: base x 2^(attempt-1), capped, plus deterministic jitter."""
    base = min(MAX_BACKOFF_S, policy.wake_backoff_s * 2.0 ** max(0, attempt - 1))
    digest = hashlib.sha256(f"{node}:{attempt}".encode()).digest()
    unit = int.from_bytes(digest[:8], "big") / 2.0**64
    return base * (1.0 + JITTER_FRACTION * unit)


def start_wake(node: str, now_s: float, policy: SleepPolicy, reason: str) -> tuple[WakeTrack, WakeEvent]:
    """A first wake-up for `node`: the track to keep and the `send` event for the body."""
    track = WakeTrack(node, WakeStage.WAKING, 1, now_s, now_s, now_s + policy.wake_timeout_s, reason=reason)
    return track, WakeEvent(node, "send", f"{node}: wake-up 1 sent ({reason})")


def advance(track: WakeTrack, now_s: float, is_up: bool, policy: SleepPolicy) -> tuple[WakeTrack, list[WakeEvent]]:
    """The track at `now_s`, given whether the node reports up, and what the body must do or say."""
    if track.stage in (WakeStage.UP, WakeStage.FAILED):
        return track, []
    node = track.node
    if is_up:
        return replace(track, stage=WakeStage.UP, next_try_s=None), [
            WakeEvent(node, "up", f"{node}: up {now_s - track.first_sent_s:.0f} s after the first wake-up "
                                  f"(attempt {track.attempts})")]
    if track.stage is WakeStage.WAKING and now_s >= track.deadline_s:
        if track.attempts >= 1 + policy.wake_retries:
            return replace(track, stage=WakeStage.FAILED, next_try_s=None), [
                WakeEvent(node, "failed", f"{node}: did not wake after {track.attempts} wake-ups over "
                                          f"{now_s - track.first_sent_s:.0f} s; marked failed, no longer "
                                          "counted on; check its power, BMC and wake-on-LAN setting")]
        retry_at = now_s + backoff_s(node, track.attempts, policy)
        track = replace(track, stage=WakeStage.BACKOFF, next_try_s=retry_at)
        events = [WakeEvent(node, "timeout", f"{node}: not up {policy.wake_timeout_s:.0f} s after wake-up "
                                             f"{track.attempts}; retrying at +{retry_at - now_s:.0f} s")]
        if retry_at > now_s:
            return track, events
        return _resend(track, now_s, policy, events)
    if track.stage is WakeStage.BACKOFF and track.next_try_s is not None and now_s >= track.next_try_s:
        return _resend(track, now_s, policy, [])
    return track, []


def _resend(track: WakeTrack, now_s: float, policy: SleepPolicy,
            events: list[WakeEvent]) -> tuple[WakeTrack, list[WakeEvent]]:
    attempt = track.attempts + 1
    track = replace(track, stage=WakeStage.WAKING, attempts=attempt, sent_s=now_s,
                    deadline_s=now_s + policy.wake_timeout_s, next_try_s=None)
    return track, [*events, WakeEvent(track.node, "send", f"{track.node}: wake-up {attempt} sent (retry)")]


def next_due_s(track: WakeTrack) -> float | None:
    """When `advance` next has something to do without news from the node (None: nothing)."""
    if track.stage is WakeStage.WAKING:
        return track.deadline_s
    if track.stage is WakeStage.BACKOFF:
        return track.next_try_s
    return None


def last_attempt_s(policy: SleepPolicy, poll_interval_s: float = 0.0) -> float:
    """Worst case, seconds from the first wake-up to the last one: every attempt times out, every backoff
    draws its full jitter, and each timeout and each retry is noticed up to `poll_interval_s` late (the
    period of the verification pass). A node woken by that last attempt is up `boot_s` later.
    """
    total_s = 0.0
    for attempt in range(1, 1 + min(policy.wake_retries, 64)):
        total_s += _worst_retry_step_s(policy, attempt, poll_interval_s)
    if policy.wake_retries > 64:  # the backoff is capped long before: every further step is the same
        total_s += (policy.wake_retries - 64) * _worst_retry_step_s(policy, 65, poll_interval_s)
    return total_s


def _worst_retry_step_s(policy: SleepPolicy, attempt: int, poll_interval_s: float) -> float:
    base_s = min(MAX_BACKOFF_S, policy.wake_backoff_s * 2.0 ** (attempt - 1))
    return policy.wake_timeout_s + poll_interval_s + base_s * (1.0 + JITTER_FRACTION) + poll_interval_s
