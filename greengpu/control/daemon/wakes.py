"""The daemon's wake verification: the simulator's retry rule (`greengpu.sleep.wake_verify`), live.

A wake-up the daemon sent is tracked until the node reports awake. One that is not up within
`wake_timeout_s` is sent again after the pure rule's backoff (doubling, deterministic jitter, the same
retry times the simulator uses); after `1 + wake_retries` attempts the node is given up on and one
`wake_failed` alert names it. The decisions are the pure rule's; this module only keeps the tracks.
"""

from __future__ import annotations

from collections.abc import Mapping

from greengpu.model import NodeState, PowerState
from greengpu.policy import SleepPolicy
from greengpu.sleep.wake_verify import WakeEvent, WakeStage, WakeTrack, advance, start_wake


class WakeWatch:
    """The wake-ups in flight, one track per node."""

    def __init__(self, policy: SleepPolicy) -> None:
        self.policy = policy
        self.tracks: dict[str, WakeTrack] = {}

    def sent(self, node: str, now_s: float, reason: str) -> None:
        """The daemon sent `node` a wake-up (a retry of a tracked node keeps its track)."""
        if node not in self.tracks:
            self.tracks[node] = start_wake(node, now_s, self.policy, reason)[0]

    def check(self, states: Mapping[str, NodeState], now_s: float) -> list[WakeEvent]:
        """Each track advanced to `now_s` by what the body reports: `send` (a retry to send now), `timeout`,
        `failed` (alert; the track ends), `up` (the track ends). A node the body no longer lists is done."""
        events: list[WakeEvent] = []
        for node, track in list(self.tracks.items()):
            state = states.get(node)
            up = state is None or state.power is PowerState.AWAKE
            track, happened = advance(track, now_s, up, self.policy)
            events.extend(happened)
            if track.stage in (WakeStage.UP, WakeStage.FAILED):
                del self.tracks[node]
            else:
                self.tracks[node] = track
        return events
