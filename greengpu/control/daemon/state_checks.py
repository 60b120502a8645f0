"""The daemon's state files, checked at start before anything is written or changed.

A `--state` that is a file, not writable, or under /proc; a `daemon.db` that is damaged or another
program's SQLite file; a directory where `daemon.lock` goes; a token file that never ends
(`/dev/zero`) or that others can read: each is one line naming the file (exit 2), never a traceback
half-way through the start, and a foreign database never gets the daemon's tables written into it.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import stat
from pathlib import Path

from greengpu.errors import BadInput

log = logging.getLogger("greengpu.daemon")

DAEMON_TABLES = frozenset({"meta", "journal", "settings", "exempt_nodes"})
"""The tables a daemon's own `daemon.db` holds (sqlite_sequence comes with AUTOINCREMENT)."""
TOKEN_MAX_BYTES = 4096
"""Longest token file read: a token is a line; `/dev/zero` or a log given by mistake is refused, not read whole."""
VIRTUAL_ROOTS = ("/proc", "/sys", "/dev")


def check_state_dir(directory: Path) -> None:
    """`--state`: a directory this process can write (made when missing), not on a virtual file system."""
    resolved = directory.resolve()
    for root in map(Path, VIRTUAL_ROOTS):
        if resolved == root or root in resolved.parents:
            raise BadInput(f"--state {directory}: under {root}, a virtual file system; give a directory on a disk, "
                           "e.g. /var/lib/greengpu/daemon")
    if directory.exists() and not directory.is_dir():
        raise BadInput(f"--state {directory}: is a file, expected a directory (the daemon's state)")
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise BadInput(f"--state {directory}: cannot create it: {error.strerror or error}") from None
    if not os.access(directory, os.W_OK | os.X_OK):
        raise BadInput(f"--state {directory}: not writable by this user (uid {os.getuid()})")
    lock = directory / "daemon.lock"
    if lock.exists() and not lock.is_file():
        raise BadInput(f"--state {directory}: {lock} is not a regular file (expected the daemon's lock file); "
                       "move it away")


def check_daemon_db(path: Path, schema_version: int) -> None:
    """An existing `daemon.db` must be this daemon's own SQLite file, readable and of a schema it knows."""
    if not path.exists() and not path.is_symlink():
        return
    if not path.is_file():
        raise BadInput(f"--state: {path} is not a regular file (expected the daemon's SQLite state)")
    # No open() of the file here: closing any descriptor of a database drops every POSIX lock this process
    # holds on it, those of an open SQLite connection too (SQLite's "how to corrupt" 2.2); SQLite reads it.
    if path.stat().st_size == 0:
        return  # an empty file: SQLite makes it a new database
    try:
        # A plain connection that only reads: it writes nothing into a database (not a table, not a journal).
        db = sqlite3.connect(path, timeout=5.0)
        try:
            tables = {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            version = (db.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
                       if "meta" in tables else None)
            # Every page, not only the ones read above: a page damaged further in (a settings row the start
            # reads next) would otherwise end the start in a traceback. Once per start, read-only.
            damage = [row[0] for row in db.execute("PRAGMA quick_check(1)")]
        finally:
            db.close()
    except sqlite3.DatabaseError as error:
        raise BadInput(f"--state: {path} is not a readable SQLite database ({error}): damaged, or another file; "
                       "move it away to start with an empty state") from None
    if damage != ["ok"]:
        raise BadInput(f"--state: {path} is a damaged SQLite database ({_one_line(damage)}): move it away to start "
                       "with an empty state")
    tables.discard("sqlite_sequence")
    if tables and not tables & {"journal", "settings"}:
        shown = ", ".join(sorted(tables)[:5])
        raise BadInput(f"--state: {path} is another program's SQLite database (tables: {shown}); greengpu writes "
                       "nothing into it: give the daemon a directory of its own")
    if tables and version is None:
        raise BadInput(f"--state: {path} has no schema_version in its meta table: not a greengpu daemon state")
    if version is not None and (not str(version[0]).isdigit() or int(version[0]) > schema_version):
        raise BadInput(f"--state: {path}: meta.schema_version {version[0]!r} is not one this greengpu knows "
                       f"(up to {schema_version})")


def read_token(path: str | Path) -> str:
    """The bearer token in `path` (surrounding whitespace dropped), read bounded: BadInput when the file is
    not a regular file, longer than a token, not text, or shorter than 16 characters. A file that others
    can read is a warning (the token changes the cluster)."""
    path = Path(path)
    try:
        with path.open("rb") as handle:
            mode = os.fstat(handle.fileno()).st_mode
            if not stat.S_ISREG(mode):
                raise BadInput(f"--token-file {path}: not a regular file (a device, a pipe or a directory)")
            raw = handle.read(TOKEN_MAX_BYTES + 1)
    except IsADirectoryError:
        raise BadInput(f"--token-file {path}: is a directory, expected a file holding the token") from None
    except OSError as error:
        raise BadInput(f"--token-file {path}: cannot read it: {error.strerror or error}") from None
    if len(raw) > TOKEN_MAX_BYTES:
        raise BadInput(f"--token-file {path}: longer than {TOKEN_MAX_BYTES} bytes; expected one line, the token")
    try:
        token = raw.decode("utf-8").strip()
    except UnicodeDecodeError:
        raise BadInput(f"--token-file {path}: not UTF-8 text") from None
    if len(token) < 16 or any(c.isspace() or not c.isprintable() for c in token):
        raise BadInput(f"--token-file {path}: the token must be at least 16 printable characters on one line, "
                       "without spaces")
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        log.warning("--token-file %s is readable by others (mode %04o): chmod 600 %s", path, stat.S_IMODE(mode),
                    path)
    return token


def _one_line(messages: list[str]) -> str:
    return " ".join(" ".join(messages).split())[:200]
