"""The fence around every Kubernetes action of the daemon: it acts only while it leads, and stops on SIGTERM.

`check` runs before each action and between the steps of a long one (each poll of a drain). It raises
`ActionAborted` when this replica can no longer be sure it holds the Lease (`LeaseElection.keep`, which
also renews it when due) or when the daemon was asked to stop. What the aborted action does then differs:

- leadership lost: nothing more is written, at once (another replica may be acting on the same node now);
- stopping (SIGTERM): the node being drained is uncordoned and left awake, then the daemon exits and
  releases the Lease, well within `terminationGracePeriodSeconds`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Protocol


class ActionAborted(Exception):
    """An action stopped part-way; `undo`: whether the node it touched is to be put back (uncordoned)."""

    def __init__(self, why: str, undo: bool) -> None:
        super().__init__(why)
        self.undo = undo


class Keeper(Protocol):
    def keep(self, now_s: float) -> bool: ...


class KubeFence:
    """Leadership (a Lease keeper, or None for a single replica) and the stop request, checked together."""

    def __init__(self, keeper: Keeper | None, clock: Callable[[], float] = time.time) -> None:
        self.keeper = keeper
        self.clock = clock
        self.stopping = threading.Event()
        """Set by the SIGTERM handler; every action in flight aborts at its next check."""

    def check(self) -> None:
        """Raise `ActionAborted` unless this replica may act now."""
        if self.stopping.is_set():
            raise ActionAborted("the daemon is stopping (SIGTERM)", undo=True)
        if self.keeper is not None and not self.keeper.keep(self.clock()):
            raise ActionAborted("this replica no longer holds the Lease", undo=False)
