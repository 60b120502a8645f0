"""The daemon's state (SQLite, WAL): a journal written before each action and closed after it, the pause
switch and exempt nodes, and the lock that keeps two daemons from acting on one cluster at once.

A journal entry left open (the daemon died between the two writes) is what a restart reconciles: the
action is re-verified or undone, never assumed done (docs/DAEMON.md).
"""

from __future__ import annotations

import fcntl
import json
import os
import sqlite3
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from greengpu.control.daemon.state_checks import check_daemon_db, check_state_dir
from greengpu.control.hooks.sqlite_state import Connections, create
from greengpu.errors import BadInput
from greengpu.json_types import JsonObject

SCHEMA_VERSION = 1
TICK_BUSY_TIMEOUT_S = 5.0
"""How long a tick waits for a `daemon.db` another process holds before the tick fails (and fails safe):
well inside the tick deadline, so a held store is a failed tick, alerted, not a stalled one."""
STATUS_BUSY_TIMEOUT_S = 0.5
"""How long `/v1/status` waits for the store before answering from what the last tick read."""
_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS journal (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    time_s REAL NOT NULL,
    kind TEXT NOT NULL,            -- sleep, wake, set_power_limit, lock_clocks, place, preempt, kill
    node TEXT NOT NULL DEFAULT '',
    gpu INTEGER,
    job TEXT NOT NULL DEFAULT '',
    detail TEXT NOT NULL,          -- JSON: the action's fields and the rule that chose it
    state TEXT NOT NULL,           -- open, done, failed, reconciled
    closed_s REAL,
    outcome TEXT NOT NULL DEFAULT ''
);
CREATE INDEX IF NOT EXISTS journal_open ON journal (state);
-- The rate limits count the last minute's sleeps and wakes every tick: without this, a count scans a
-- journal that grows for as long as the daemon runs.
CREATE INDEX IF NOT EXISTS journal_kind_time ON journal (kind, time_s);
CREATE TABLE IF NOT EXISTS settings (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS exempt_nodes (node TEXT PRIMARY KEY, since_s REAL NOT NULL);
"""


class DaemonLocked(RuntimeError):
    """Another daemon holds the state directory's lock."""


@dataclass(frozen=True)
class JournalEntry:
    id: int
    time_s: float
    kind: str
    node: str
    gpu: int | None
    job: str
    detail: JsonObject
    state: str


@dataclass(frozen=True)
class TickFacts:
    """What one tick reads of the store."""

    paused: bool
    exempt: set[str]
    sleeps_since: int
    wakes_since: int


class DaemonStore:
    """`DIR/daemon.db` and `DIR/daemon.lock`."""

    def __init__(self, directory: str | Path) -> None:
        """Checks the directory and an existing `daemon.db` first (BadInput, nothing written)."""
        self.directory = Path(directory)
        check_state_dir(self.directory)
        self.path = self.directory / "daemon.db"
        check_daemon_db(self.path, SCHEMA_VERSION)
        self._lock_file: TextIO | None = None
        try:
            create(self.path, _SCHEMA, SCHEMA_VERSION)
        except sqlite3.Error as error:  # a file that changed under us, a full disk: one line, not a traceback
            raise BadInput(f"--state: cannot write {self.path}: {error}") from None
        # WAL with NORMAL: a committed entry survives the daemon's death (SIGKILL, a crash); only a power
        # loss can take the last ones, and a node that lost power has lost what they describe too.
        self._connections = Connections(self.path, synchronous="NORMAL", busy_timeout_s=TICK_BUSY_TIMEOUT_S)
        self._status = Connections(self.path, synchronous="NORMAL", busy_timeout_s=STATUS_BUSY_TIMEOUT_S)

    def _tx(self) -> AbstractContextManager[sqlite3.Connection]:
        return self._connections.transaction()

    # --- one daemon at a time ----------------------------------------------------------------

    def acquire(self) -> None:
        """Take the lock for as long as this process lives (the kernel drops it when the process dies)."""
        handle = open(self.directory / "daemon.lock", "a+")  # noqa: SIM115 - held for the process's life
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip() or "another process"
            handle.close()
            raise DaemonLocked(f"{self.directory}: another greengpu daemon ({holder}) holds the lock") from None
        handle.truncate(0)
        handle.write(f"pid {os.getpid()}\n")
        handle.flush()
        self._lock_file = handle

    def release(self) -> None:
        if self._lock_file is not None:
            fcntl.flock(self._lock_file, fcntl.LOCK_UN)
            self._lock_file.close()
            self._lock_file = None

    # --- the journal -------------------------------------------------------------------------

    def begin(self, now_s: float, kind: str, detail: JsonObject, node: str = "", gpu: int | None = None,
              job: str = "") -> int:
        """Write an open entry before the action is carried out; returns its id."""
        with self._tx() as db:
            cursor = db.execute("INSERT INTO journal (time_s, kind, node, gpu, job, detail, state) "
                                "VALUES (?, ?, ?, ?, ?, ?, 'open')",
                                (now_s, kind, node, gpu, job, json.dumps(detail, sort_keys=True)))
            return int(cursor.lastrowid or 0)

    def begin_many(self, now_s: float, planned: list[tuple[str, JsonObject, str, int | None, str]]) -> list[int]:
        """Open entries for a tick's actions at once, (kind, detail, node, gpu, job) each, before any is done."""
        with self._tx() as db:
            ids = []
            for kind, detail, node, gpu, job in planned:
                cursor = db.execute("INSERT INTO journal (time_s, kind, node, gpu, job, detail, state) "
                                    "VALUES (?, ?, ?, ?, ?, ?, 'open')",
                                    (now_s, kind, node, gpu, job, json.dumps(detail, sort_keys=True)))
                ids.append(int(cursor.lastrowid or 0))
            return ids

    def close_many(self, now_s: float, outcomes: list[tuple[int, str, str]]) -> None:
        """Close entries (id, state, outcome) at once."""
        with self._tx() as db:
            db.executemany("UPDATE journal SET state = ?, closed_s = ?, outcome = ? WHERE id = ?",
                           [(state, now_s, outcome, entry_id) for entry_id, state, outcome in outcomes])

    def close(self, entry_id: int, now_s: float, state: str, outcome: str) -> None:
        """Close an entry: `done`, `failed` or `reconciled` (a restart settled it)."""
        with self._tx() as db:
            db.execute("UPDATE journal SET state = ?, closed_s = ?, outcome = ? WHERE id = ?",
                       (state, now_s, outcome, entry_id))

    def open_entries(self) -> list[JournalEntry]:
        """Entries begun and never closed, oldest first."""
        return self._entries("WHERE state = 'open' ORDER BY id")

    def entries(self, limit: int = 1000) -> list[JournalEntry]:
        return self._entries(f"ORDER BY id DESC LIMIT {int(limit)}")

    def _entries(self, clause: str) -> list[JournalEntry]:
        with self._tx() as db:
            query = f"SELECT id, time_s, kind, node, gpu, job, detail, state FROM journal {clause}"
            rows = db.execute(query).fetchall()
        return [JournalEntry(i, t, k, n, g, j, json.loads(d), s) for i, t, k, n, g, j, d, s in rows]

    def tick_facts(self, since_s: float) -> TickFacts:
        """What a tick reads of the store, in one transaction: paused, exempt nodes, and the sleeps and
        wakes begun after `since_s` (the rate limits' last minute)."""
        with self._tx() as db:
            counts = dict(db.execute("SELECT kind, COUNT(*) FROM journal WHERE kind IN ('sleep', 'wake') "
                                     "AND time_s > ? AND state != 'failed' GROUP BY kind", (since_s,)).fetchall())
            return TickFacts(_paused(db), _exempt(db), int(counts.get("sleep", 0)), int(counts.get("wake", 0)))

    def status_facts(self) -> tuple[bool, set[str], int]:
        """(paused, exempt nodes, open entries) for `/v1/status`, waiting at most STATUS_BUSY_TIMEOUT_S for
        the store (sqlite3.OperationalError when another process holds it longer)."""
        with self._status.transaction() as db:
            open_count = db.execute("SELECT COUNT(*) FROM journal WHERE state = 'open'").fetchone()[0]
            return _paused(db), _exempt(db), int(open_count)

    def bind_cluster(self, cluster_file: str) -> None:
        """Record the inventory this state belongs to at the first start; a later start with another one is
        BadInput (its journal, sleep state and fake cluster describe other nodes)."""
        wanted = str(Path(cluster_file).resolve())
        known = self.setting("cluster_file")
        if known is None:
            self.set_setting("cluster_file", wanted)
        elif known != wanted:
            raise BadInput(f"--state {self.directory} holds the state of --cluster {known}, not {wanted}: start "
                           "with that --cluster, or give this cluster a --state of its own")

    # --- switches -----------------------------------------------------------------------------

    def paused(self) -> bool:
        with self._tx() as db:
            return _paused(db)

    def set_paused(self, paused: bool) -> None:
        with self._tx() as db:
            db.execute("INSERT OR REPLACE INTO settings VALUES ('paused', ?)", ("1" if paused else "0",))

    def setting(self, key: str) -> str | None:
        with self._tx() as db:
            row = db.execute("SELECT value FROM settings WHERE key = ?", (key,)).fetchone()
        return str(row[0]) if row else None

    def set_setting(self, key: str, value: str) -> None:
        with self._tx() as db:
            db.execute("INSERT OR REPLACE INTO settings VALUES (?, ?)", (key, value))

    def exempt(self) -> set[str]:
        with self._tx() as db:
            return _exempt(db)

    def set_exempt(self, node: str, exempt: bool, now_s: float) -> None:
        with self._tx() as db:
            if exempt:
                db.execute("INSERT OR IGNORE INTO exempt_nodes VALUES (?, ?)", (node, now_s))
            else:
                db.execute("DELETE FROM exempt_nodes WHERE node = ?", (node,))


def _paused(db: sqlite3.Connection) -> bool:
    row = db.execute("SELECT value FROM settings WHERE key = 'paused'").fetchone()
    return bool(row and row[0] == "1")


def _exempt(db: sqlite3.Connection) -> set[str]:
    return {row[0] for row in db.execute("SELECT node FROM exempt_nodes").fetchall()}
