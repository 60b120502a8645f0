"""SQLite state files of the live control code (the sleep state store, the daemon's journal): created with
their schema, then every change one short `BEGIN IMMEDIATE` transaction in WAL mode with a busy timeout,
so that processes that write at the same time (Slurm's hooks, two commands) wait for each other."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

BUSY_TIMEOUT_S = 30.0


def create(path: Path, schema: str, schema_version: int) -> None:
    """Create the tables of `schema` (if missing) and record the schema version."""
    db = sqlite3.connect(path, timeout=BUSY_TIMEOUT_S)
    try:
        db.executescript(schema)  # executescript commits on its own: outside `transaction`
    finally:
        db.close()
    with transaction(path) as tx:
        tx.execute("INSERT OR IGNORE INTO meta VALUES ('schema_version', ?)", (str(schema_version),))


@contextmanager
def transaction(path: Path, synchronous: str = "FULL") -> Iterator[sqlite3.Connection]:
    """One immediate transaction on `path`: committed when the block ends, rolled back when it raises."""
    db = sqlite3.connect(path, timeout=BUSY_TIMEOUT_S, isolation_level=None)
    try:
        db.execute("PRAGMA journal_mode=WAL")
        db.execute(f"PRAGMA synchronous={synchronous}")
        db.execute("BEGIN IMMEDIATE")
        try:
            yield db
        except BaseException:
            db.execute("ROLLBACK")
            raise
        db.execute("COMMIT")
    finally:
        db.close()


class Connections:
    """One open connection to `path` per thread, each change one immediate transaction on it.

    For a process that writes every few seconds for months (the daemon): opening and closing a
    connection per transaction costs a WAL checkpoint at each close, milliseconds a time. A thread
    keeps its own connection because sqlite3 connections are not shared between threads (the HTTP
    server's threads read the same store)."""

    def __init__(self, path: Path, synchronous: str = "FULL") -> None:
        self.path = path
        self.synchronous = synchronous
        self._local = threading.local()

    def _connection(self) -> sqlite3.Connection:
        db: sqlite3.Connection | None = getattr(self._local, "db", None)
        if db is None:
            db = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_S, isolation_level=None)
            db.execute("PRAGMA journal_mode=WAL")
            db.execute(f"PRAGMA synchronous={self.synchronous}")
            self._local.db = db
        return db

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """One immediate transaction: committed when the block ends, rolled back when it raises."""
        db = self._connection()
        db.execute("BEGIN IMMEDIATE")
        try:
            yield db
        except BaseException:
            db.execute("ROLLBACK")
            raise
        db.execute("COMMIT")
