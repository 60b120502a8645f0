"""A sweep's result store: one SQLite file, one row per finished replay keyed by its spec's hash, written as
each replay finishes (one short transaction), so an interrupted sweep keeps everything done and a rerun
skips it. Only the process that drives the sweep writes it; workers return results."""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import sqlite3
from pathlib import Path
from typing import Any

from greengpu.errors import BadInput
from greengpu.sim.sweep import ReplaySpec

KIND = "greengpu-sweep-results"
VERSION = "1"
_SCHEMA = ("CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
           "CREATE TABLE IF NOT EXISTS results (spec_hash TEXT PRIMARY KEY, spec TEXT NOT NULL, "
           "result TEXT NOT NULL, finished_utc TEXT NOT NULL)")


class SweepStore:
    """The results of a sweep's replays, by spec hash."""

    def __init__(self, path: Path) -> None:
        self.path = path
        if path.is_dir() or not path.parent.is_dir():
            raise BadInput(f"--store: cannot keep results at {path}")
        existing = path.is_file() and path.stat().st_size > 0
        try:
            self.connection = sqlite3.connect(path, timeout=30.0)
            if existing:
                self._check()
            else:
                with self.connection:
                    for statement in _SCHEMA:
                        self.connection.execute(statement)
                    self.connection.executemany("INSERT INTO meta VALUES (?, ?)", [("kind", KIND),
                                                                                  ("version", VERSION)])
        except sqlite3.DatabaseError as error:
            raise BadInput(f"--store: {path} is not a sweep result store ({' '.join(str(error).split())[:100]})"
                           ) from None

    def _check(self) -> None:
        tables = {row[0] for row in self.connection.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        meta = dict(self.connection.execute("SELECT key, value FROM meta").fetchall()) if "meta" in tables else {}
        if meta.get("kind") != KIND or "results" not in tables:
            raise BadInput(f"--store: {self.path} is not a sweep result store (another program's database?)")
        if meta.get("version") != VERSION:
            raise BadInput(f"--store: {self.path} is a result store of version {meta.get('version')!r}, this "
                           f"greengpu keeps version {VERSION}")

    def done(self, specs: list[ReplaySpec]) -> dict[str, dict[str, Any]]:
        """The stored results among `specs`, by spec hash."""
        wanted = {spec.key() for spec in specs}
        out = {}
        try:
            for key, text in self.connection.execute("SELECT spec_hash, result FROM results"):
                if key in wanted:
                    out[str(key)] = json.loads(text)
        except (sqlite3.DatabaseError, json.JSONDecodeError, TypeError) as error:
            raise BadInput(f"--store: {self.path}: unreadable result ({' '.join(str(error).split())[:100]})"
                           ) from None
        return out

    def put(self, spec: ReplaySpec, result: dict[str, Any]) -> None:
        """Keep one finished replay (a second copy of the same spec replaces the first: they are identical)."""
        from dataclasses import asdict

        with self.connection:
            self.connection.execute(
                "INSERT INTO results VALUES (?, ?, ?, ?) ON CONFLICT (spec_hash) DO UPDATE SET result = "
                "excluded.result, finished_utc = excluded.finished_utc",
                (spec.key(), json.dumps(asdict(spec), sort_keys=True), json.dumps(result, sort_keys=True),
                 dt.datetime.now(dt.UTC).isoformat(timespec="seconds")))

    def close(self) -> None:
        with contextlib.suppress(sqlite3.Error):
            self.connection.close()
