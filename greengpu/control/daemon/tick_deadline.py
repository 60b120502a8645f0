"""A deadline on the daemon's control tick: a tick that hangs (an observation that never returns, a
command stuck on a dead NFS mount) is a failed tick, counted and alerted, and fails safe.

A thread cannot be killed, so the tick runs in a thread of its own and the loop waits for it at most
`deadline_s`. Past it, the GPUs go back to their defaults and a `tick_stalled` alert is raised; while
that tick still has not returned no other starts (two ticks must never act on one cluster at once),
and every turn of the loop in between is another failed tick. The systemd watchdog is fed only while
ticks succeed (`fresh`), so a daemon whose every tick fails or hangs gets restarted by systemd.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from greengpu.control.daemon.service import Daemon, TickReport

log = logging.getLogger("greengpu.daemon")


def default_deadline_s(interval_s: float, source: str) -> float:
    """Two intervals, at least two minutes; on Kubernetes ten more minutes, since a tick drains nodes (up to
    five minutes each) before it suspends them."""
    return max(120.0, 2 * interval_s) + (600.0 if source == "kubernetes" else 0.0)


class DeadlineTicks:
    """Runs `daemon.tick` with a deadline (see the module's docstring) on one long-lived thread of its own
    (a thread per tick would open a new connection to the state store each time)."""

    def __init__(self, daemon: Daemon, deadline_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.daemon = daemon
        self.deadline_s = deadline_s
        self._clock = clock
        self._asked = threading.Semaphore(0)
        self._done = threading.Event()
        self._busy = False
        self._started_s = 0.0
        self._report: TickReport | None = None
        self._thread: threading.Thread | None = None

    def _work(self) -> None:
        while True:
            self._asked.acquire()
            report = None
            try:
                report = self.daemon.tick()
            finally:  # a BaseException past the tick's own guard still ends this turn (reported as a failure)
                self._report = report
                self._busy = False
                self._done.set()

    @property
    def busy(self) -> bool:
        """Whether a tick is running now (the metering job waits its turn: it must not see the body mid-tick)."""
        return self._busy

    def settle(self, timeout_s: float) -> bool:
        """Wait at most `timeout_s` for a tick in flight (at stop: the release must not race it); True when
        none runs."""
        return not self._busy or self._done.wait(timeout_s)

    def tick(self) -> TickReport:
        """One turn of the loop: the tick's report, or a failed one when it stalls or the last still hangs."""
        if self._busy:
            stuck_s = self._clock() - self._started_s
            return self.daemon.stalled(f"the tick started {stuck_s:.0f} s ago has still not returned "
                                       "(no new tick starts until it does)", alert=False)
        if self._thread is None or not self._thread.is_alive():
            self._thread = threading.Thread(target=self._work, name="greengpu-tick", daemon=True)
            self._thread.start()
        self._busy = True
        self._report = None
        self._done.clear()
        self._started_s = self._clock()
        self._asked.release()
        if not self._done.wait(self.deadline_s):
            return self.daemon.stalled(f"the tick has not returned within its deadline of {self.deadline_s:g} s "
                                       "(an observation or an action hangs)", alert=True)
        if self._report is None:
            return self.daemon.stalled("the tick ended without a report", alert=True)
        return self._report
