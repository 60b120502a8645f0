"""The replay's virtual clock: a heap of timed events, taken in time order and, at one time, in the
order they were pushed (a sequence number breaks ties, so replays are deterministic)."""

from __future__ import annotations

import heapq
from enum import IntEnum
from typing import Any


class EventKind(IntEnum):
    ARRIVE = 0
    FINISH = 1
    WAKE_DONE = 2
    SUSPEND_DONE = 3
    IDLE_CHECK = 4
    TICK = 5
    WAKE_CHECK = 6
    HOUR = 7
    GPU_EVENT = 8
    """A GPU health change or failure from the optional failure model (sim/failures.py)."""
    CLOUD = 9
    """A cloud node's or cloud job's event (sim/cloud.py): start, finish, interruption notice, stop, idle, reclaim."""


class EventClock:
    """Events in time order; `now_s` is the time of the events being handled."""

    def __init__(self) -> None:
        self.events: list[tuple[float, int, EventKind, Any]] = []
        self._seq = 0
        self.now_s = 0.0

    def push(self, time_s: float, kind: EventKind, data: Any) -> None:
        self._seq += 1
        heapq.heappush(self.events, (time_s, self._seq, kind, data))

    def pop_at(self, time_s: float) -> tuple[EventKind, Any] | None:
        """The next event at exactly `time_s`, if any is left."""
        if self.events and self.events[0][0] == time_s:
            _, _, kind, data = heapq.heappop(self.events)
            return kind, data
        return None
