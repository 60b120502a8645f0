"""SQLite state files of the live control code (the sleep state store, the daemon's journal): created with
their schema, then every change one short `BEGIN IMMEDIATE` transaction in WAL mode with a busy timeout,
so that processes that write at the same time (Slurm's hooks, two commands) wait for each other."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
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


def _connect(path: Path, synchronous: str, busy_timeout_s: float = BUSY_TIMEOUT_S) -> sqlite3.Connection:
    """A connection in autocommit mode (transactions are begun by hand), WAL, with a busy timeout."""
    db = sqlite3.connect(path, timeout=busy_timeout_s, isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute(f"PRAGMA synchronous={synchronous}")
    return db


@contextmanager
def _immediate(db: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """One immediate transaction on `db`: committed when the block ends, rolled back when it raises."""
    db.execute("BEGIN IMMEDIATE")
    try:
        yield db
    except BaseException:
        db.execute("ROLLBACK")
        raise
    db.execute("COMMIT")


@contextmanager
def transaction(path: Path, synchronous: str = "FULL") -> Iterator[sqlite3.Connection]:
    """One immediate transaction on `path`: committed when the block ends, rolled back when it raises."""
    db = _connect(path, synchronous)
    try:
        with _immediate(db):
            yield db
    finally:
        db.close()


class Connections:
    """One open connection to `path` per thread, each change one immediate transaction on it.

    For a process that writes every few seconds for months (the daemon): opening and closing a
    connection per transaction costs a WAL checkpoint at each close, milliseconds a time. A thread
    keeps its own connection because sqlite3 connections are not shared between threads (the HTTP
    server's threads read the same store)."""

    def __init__(self, path: Path, synchronous: str = "FULL", busy_timeout_s: float = BUSY_TIMEOUT_S) -> None:
        self.path = path
        self.synchronous = synchronous
        self.busy_timeout_s = busy_timeout_s
        self._local = threading.local()

    def _connection(self) -> sqlite3.Connection:
        db: sqlite3.Connection | None = getattr(self._local, "db", None)
        if db is None:
            db = self._local.db = _connect(self.path, self.synchronous, self.busy_timeout_s)
        return db

    def transaction(self) -> AbstractContextManager[sqlite3.Connection]:
        """One immediate transaction: committed when the block ends, rolled back when it raises."""
        return _immediate(self._connection())
