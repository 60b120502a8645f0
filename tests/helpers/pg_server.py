"""A throwaway PostgreSQL server for the fleet ledger's tests: `initdb` into a temporary folder and `pg_ctl
start` listening on a unix socket only (no port to collide with), as the `postgres` user when the tests run as
root (the server refuses root). Debian's `postgresql` package provides the binaries (.ci/run installs it).
Without them the tests skip with the reason, except in CI, where they fail."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


def missing(what: str) -> None:
    """Skip (outside CI) or fail (in CI) for a missing component."""
    if IN_CI:
        pytest.fail(f"{what}: CI must provide it (.ci/run installs it)")
    pytest.skip(f"{what} (.ci/run installs it; CI fails instead of skipping)")


def bin_dir() -> Path | None:
    """The newest /usr/lib/postgresql/N/bin with initdb and pg_ctl, or the folder of pg_ctl on PATH."""
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"), key=lambda p: int(p.parts[-3]) if
                   p.parts[-3].isdigit() else 0)
    if found:
        return found[-1].parent
    on_path = shutil.which("pg_ctl")
    return Path(on_path).parent if on_path and shutil.which("initdb") else None


class PgServer:
    """A running server; `url(db)` names a database on it (create it first with `create_database`)."""

    def __init__(self, root: Path, binaries: Path) -> None:
        self.root = root
        self.binaries = binaries
        self.data = root / "data"
        self.socket_dir = root / "socket"
        self.as_postgres = os.geteuid() == 0

    def _run(self, *argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        command = [str(self.binaries / argv[0]), *argv[1:]]
        if self.as_postgres:
            command = ["runuser", "-u", "postgres", "--", *command]
        return subprocess.run(command, capture_output=True, text=True, timeout=120, check=check)

    def start(self) -> None:
        self.socket_dir.mkdir(parents=True)
        if self.as_postgres:
            shutil.chown(self.root, "postgres")
            shutil.chown(self.socket_dir, "postgres")
        self._run("initdb", "-D", str(self.data), "-A", "trust", "-U", "greengpu", "--no-sync", "-E", "UTF8")
        options = (f"-k {self.socket_dir} -c listen_addresses='' -c fsync=off -c max_connections=60 "
                   "-c shared_buffers=16MB")
        started = self._run("pg_ctl", "-D", str(self.data), "-o", options, "-l", str(self.root / "server.log"),
                            "-w", "-t", "60", "start", check=False)
        if started.returncode != 0:
            log = (self.root / "server.log").read_text(errors="replace")[-2000:]
            raise RuntimeError(f"pg_ctl start failed: {started.stderr}\n{log}")

    def stop(self) -> None:
        self._run("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop", check=False)

    def url(self, database: str) -> str:
        return f"postgresql://greengpu@/{database}?host={self.socket_dir}"

    def create_database(self, name: str | None = None) -> str:
        """A new empty database; its URI."""
        import psycopg

        name = name or f"ledger_{uuid.uuid4().hex[:10]}"
        with psycopg.connect(self.url("postgres"), autocommit=True) as connection:
            connection.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)


@contextmanager
def pg_server() -> Iterator[PgServer]:
    """A started server, stopped and removed afterwards; skips (fails in CI) without PostgreSQL or psycopg."""
    binaries = bin_dir()
    if binaries is None:
        missing("PostgreSQL server binaries (initdb, pg_ctl) not found")
    try:
        import psycopg  # noqa: F401
    except ImportError:
        missing("psycopg is not installed (the 'fleet' extra)")
    assert binaries is not None
    root = Path(tempfile.mkdtemp(prefix="greengpu-pg-"))
    server = PgServer(root, binaries)
    try:
        server.start()
        yield server
    finally:
        server.stop()
        shutil.rmtree(root, ignore_errors=True)
