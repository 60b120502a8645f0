"""The controller's persisted sleep state (SQLite): which nodes greengpu put to sleep and why, and every
wake-up under verification, so that nothing is lost across a restart of the controller or a hook.

Slurm may run SuspendProgram and ResumeProgram at the same time, so every change is one short
`BEGIN IMMEDIATE` transaction in WAL mode with a busy timeout.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path

from greengpu.control.hooks.sqlite_state import create, transaction
from greengpu.sleep.wake_verify import WakeStage, WakeTrack

SCHEMA_VERSION = 1
_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS sleep_nodes (
    node TEXT PRIMARY KEY,
    state TEXT NOT NULL,            -- asleep (greengpu put it to sleep), waking, backoff, up, failed,
                                    -- suspend_failed (its suspend command failed: awake)
    since_s REAL NOT NULL,
    reason TEXT NOT NULL,
    attempts INTEGER NOT NULL DEFAULT 0,
    first_sent_s REAL, sent_s REAL, deadline_s REAL, next_try_s REAL,
    wake_reason TEXT NOT NULL DEFAULT ''
);
CREATE TABLE IF NOT EXISTS idle_nodes (   -- awake nodes without work, and since when (the idle timeout)
    node TEXT PRIMARY KEY,
    since_s REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS sleep_events (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    time_s REAL NOT NULL, node TEXT NOT NULL, kind TEXT NOT NULL, message TEXT NOT NULL
);
"""


@dataclass(frozen=True)
class SleepRecord:
    node: str
    state: str
    since_s: float
    reason: str


class StateStore:
    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        create(self.path, _SCHEMA, SCHEMA_VERSION)

    def _tx(self) -> AbstractContextManager[sqlite3.Connection]:
        return transaction(self.path)

    def record_suspend(self, node: str, now_s: float, reason: str) -> None:
        with self._tx() as db:
            db.execute("INSERT OR REPLACE INTO sleep_nodes (node, state, since_s, reason) VALUES (?, 'asleep', ?, ?)",
                       (node, now_s, reason))
            db.execute("INSERT INTO sleep_events (time_s, node, kind, message) VALUES (?, ?, 'suspend', ?)",
                       (now_s, node, reason))

    def record_suspend_failed(self, node: str, now_s: float, message: str) -> None:
        """The suspend command of `node` failed: it is awake, not asleep (its reason says why)."""
        with self._tx() as db:
            db.execute("INSERT OR REPLACE INTO sleep_nodes (node, state, since_s, reason) "
                       "VALUES (?, 'suspend_failed', ?, ?)", (node, now_s, message))
            db.execute("INSERT INTO sleep_events (time_s, node, kind, message) VALUES (?, ?, 'suspend_failed', ?)",
                       (now_s, node, message))

    def save_track(self, track: WakeTrack, now_s: float) -> None:
        with self._tx() as db:
            reason = db.execute("SELECT reason FROM sleep_nodes WHERE node = ?", (track.node,)).fetchone()
            db.execute(
                "INSERT OR REPLACE INTO sleep_nodes (node, state, since_s, reason, attempts, first_sent_s, sent_s, "
                "deadline_s, next_try_s, wake_reason) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (track.node, track.stage.value, now_s, reason[0] if reason else "not put to sleep by greengpu",
                 track.attempts, track.first_sent_s, track.sent_s, track.deadline_s, track.next_try_s,
                 track.reason))

    def add_event(self, now_s: float, node: str, kind: str, message: str) -> None:
        with self._tx() as db:
            db.execute("INSERT INTO sleep_events (time_s, node, kind, message) VALUES (?, ?, ?, ?)",
                       (now_s, node, kind, message))

    def open_tracks(self) -> list[WakeTrack]:
        """Wake-ups still under verification (waking or backing off), oldest first."""
        with self._tx() as db:
            rows = db.execute(
                "SELECT node, state, attempts, first_sent_s, sent_s, deadline_s, next_try_s, wake_reason "
                "FROM sleep_nodes WHERE state IN ('waking', 'backoff') ORDER BY first_sent_s, node").fetchall()
        return [WakeTrack(node, WakeStage(state), attempts, first, sent, deadline, next_try, reason)
                for node, state, attempts, first, sent, deadline, next_try, reason in rows]

    def track(self, node: str) -> WakeTrack | None:
        return next((t for t in self.open_tracks() if t.node == node), None)

    def records(self) -> list[SleepRecord]:
        with self._tx() as db:
            rows = db.execute("SELECT node, state, since_s, reason FROM sleep_nodes ORDER BY node").fetchall()
        return [SleepRecord(*row) for row in rows]

    def note_idle(self, idle: Iterable[str], now_s: float) -> dict[str, float]:
        """Remember when each node in `idle` (awake, without work) was first seen so, for as long as it
        stays so; every other node is forgotten (busy, asleep or waking: its idle time starts afresh).
        Returns each idle node's since-time."""
        idle = list(idle)
        with self._tx() as db:
            kept = {row[0] for row in db.execute("SELECT node FROM idle_nodes").fetchall()}
            db.executemany("DELETE FROM idle_nodes WHERE node = ?", [(n,) for n in kept - set(idle)])
            db.executemany("INSERT OR IGNORE INTO idle_nodes (node, since_s) VALUES (?, ?)", [(n, now_s) for n in idle])
            rows = db.execute("SELECT node, since_s FROM idle_nodes").fetchall()
        wanted = set(idle)
        return {node: since for node, since in rows if node in wanted}

    def count_events(self, kind: str, since_s: float) -> int:
        """Events of `kind` (`suspend`, `send`: a wake-up sent) at or after `since_s` (the rate limits)."""
        with self._tx() as db:
            row = db.execute("SELECT COUNT(*) FROM sleep_events WHERE kind = ? AND time_s > ?", (kind, since_s))
            return int(row.fetchone()[0])

    def events(self, node: str | None = None) -> list[tuple[float, str, str, str]]:
        with self._tx() as db:
            query = "SELECT time_s, node, kind, message FROM sleep_events"
            rows = (db.execute(query + " WHERE node = ? ORDER BY id", (node,)) if node
                    else db.execute(query + " ORDER BY id")).fetchall()
        return [tuple(row) for row in rows]


def wall_clock() -> float:
    return time.time()
