"""The SQLite ledger file: opened read-only and checked before anything reads it, or opened for writing and
migrated to the current schema (greengpu.accounting.ledger_schema). Nothing is needed beyond Python.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from greengpu.accounting.ledger_schema import SCHEMA_VERSION, SqlRow, SqlValue, checked_version, statements
from greengpu.errors import BadInput

_SQLITE_MAGIC = b"SQLite format 3\x00"
_SIDECARS = ("-wal", "-shm", "-journal")


def reason(error: sqlite3.Error) -> str:
    """SQLite's message, first line and short (it may quote a whole damaged table definition)."""
    text = " ".join(str(error).split())
    return text if len(text) <= 120 else text[:117] + "..."


def version_of(path: Path, connection: sqlite3.Connection) -> int:
    """The schema version of the open database; BadInput unless it is a greengpu ledger of a version this
    greengpu reads, with exactly that version's tables and columns."""
    meta = tuple(row[1] for row in connection.execute("PRAGMA table_info(meta)"))
    if not meta:
        raise BadInput(f"{path}: not a greengpu ledger (no table meta)")
    version = connection.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone() \
        if meta == ("key", "value") else None

    def columns_of(table: str) -> tuple[str, ...]:
        return tuple(row[1] for row in connection.execute(f"PRAGMA table_info({table})"))

    return checked_version(str(path), version[0] if version is not None else None, columns_of)


def _check_file(path: Path) -> None:
    """BadInput unless `path` is a non-empty SQLite file (checked before SQLite opens it)."""
    if not path.is_file():
        raise BadInput(f"{path}: no such ledger file")
    try:
        with path.open("rb") as handle:
            head = handle.read(len(_SQLITE_MAGIC))
    except OSError as error:
        raise BadInput(f"{path}: cannot read: {error.strerror}") from None
    if not head:
        raise BadInput(f"{path}: empty file, not a greengpu ledger")
    if head != _SQLITE_MAGIC:
        raise BadInput(f"{path}: not a greengpu ledger (file is not a database)")


def _remove_new_sidecars(path: Path, existed: set[str]) -> None:
    """Remove the sidecar files that opening a refused database created: a read-only open of a database in WAL
    mode makes its -wal and -shm, and a report must leave a file it refused as it found it. Files that were
    there before (another program's live WAL) are left alone, and so is a -wal that has content."""
    for suffix in _SIDECARS:
        if suffix in existed:
            continue
        sidecar = path.with_name(path.name + suffix)
        try:
            if sidecar.is_file() and (suffix == "-shm" or sidecar.stat().st_size == 0):
                sidecar.unlink()
        except OSError:
            pass  # best effort: the refusal itself is what the person needs to read


def open_read_only(path: Path) -> tuple[sqlite3.Connection, int]:
    """The ledger at `path` opened read-only (SQLite URI mode=ro), its schema checked, and its version:
    reading never writes."""
    _check_file(path)
    existed = {suffix for suffix in _SIDECARS if path.with_name(path.name + suffix).exists()}
    try:
        return _open_checked(path)
    except BadInput:
        _remove_new_sidecars(path, existed)
        raise


def _open_checked(path: Path) -> tuple[sqlite3.Connection, int]:
    try:
        connection = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
        # Text that is not UTF-8 (a damaged file) is read with replacement characters, not a traceback.
        connection.text_factory = lambda raw: raw.decode("utf-8", errors="replace")
    except sqlite3.Error as error:
        raise BadInput(f"{path}: cannot open the ledger ({reason(error)})") from None
    try:
        return connection, version_of(path, connection)
    except sqlite3.DatabaseError as error:
        connection.close()
        raise BadInput(f"{path}: not a greengpu ledger ({reason(error)})") from None
    except UnicodeDecodeError:  # SQLite's own message quoted bytes of a damaged schema
        connection.close()
        raise BadInput(f"{path}: not a greengpu ledger (damaged: its schema is not UTF-8 text)") from None
    except BadInput:
        connection.close()
        raise


def query(path: Path, sql: str, parameters: tuple[SqlValue, ...]) -> list[SqlRow]:
    """The rows of one read-only query; a damaged file is one BadInput line."""
    connection, _ = open_read_only(path)
    try:
        return list(connection.execute(sql, parameters).fetchall())
    except sqlite3.DatabaseError as error:
        raise BadInput(f"{path}: unreadable ledger ({reason(error)})") from None
    except UnicodeDecodeError:
        raise BadInput(f"{path}: unreadable ledger (damaged: text that is not UTF-8)") from None
    finally:
        connection.close()


def schema_version(path: Path) -> int:
    """The schema version of the ledger file at `path` (checked)."""
    connection, version = open_read_only(path)
    connection.close()
    return version


def open_for_writing(path: Path) -> sqlite3.Connection:
    """The ledger at `path` for writing: created when missing (or an empty file), else checked first, read-only,
    so another application's database is refused before anything is written to it; then migrated."""
    existing = path.is_file() and path.stat().st_size > 0
    if existing:
        schema_version(path)
    try:
        # 30 s: a replay and a daemon writing the same file wait for each other's transaction, not fail.
        connection = sqlite3.connect(path, timeout=30.0, isolation_level=None)
        migrate(path, connection)
        connection.isolation_level = "DEFERRED"  # back to Python's implicit transactions for the writers
        return connection
    except sqlite3.DatabaseError as error:
        raise BadInput(f"{path}: cannot write the ledger ({reason(error)})") from None


def migrate(path: Path, connection: sqlite3.Connection) -> None:
    """Bring the open ledger to SCHEMA_VERSION in one IMMEDIATE transaction (a second writer that opens it at
    the same moment waits, then finds it done)."""
    connection.execute("BEGIN IMMEDIATE")
    try:
        has_meta = bool(connection.execute("PRAGMA table_info(meta)").fetchall())
        version = version_of(path, connection) if has_meta else 0
        for number in range(version + 1, SCHEMA_VERSION + 1):
            for statement in statements(number, "sqlite"):
                connection.execute(statement)
        if version < SCHEMA_VERSION:
            connection.execute("INSERT INTO meta VALUES ('schema_version', ?) ON CONFLICT (key) DO UPDATE "
                               "SET value = excluded.value", (str(SCHEMA_VERSION),))
        connection.execute("COMMIT")
    except BaseException:
        connection.execute("ROLLBACK")
        raise
