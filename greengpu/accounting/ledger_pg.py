"""The ledger in PostgreSQL, for a fleet: several daemons and replays, on several clusters, write one database
at once (docs/FLEET.md). Same tables and columns as the SQLite file (greengpu.accounting.ledger_schema), typed.

psycopg 3 (the `fleet` extra, its binary wheel: about 13 MB, no compiler, no libpq on the machine) rather than
SQLAlchemy Core: the ledger's SQL is a dozen plain statements that run unchanged on SQLite and PostgreSQL, so
an abstraction layer would add a large dependency and buy nothing.

Concurrency: run ids come from an identity column; every write is one transaction; hour rows are upserted on
their natural key (run, hour, tenant or node); a daemon's metering period is recorded under its own key
(run, period end) in the same transaction, so a period sent again after a restart or a lost reply is charged
once. Schema migrations take a transaction-scoped advisory lock, so two writers starting at once migrate once.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from greengpu.accounting.ledger_schema import COLUMNS, SCHEMA_VERSION, SqlRow, SqlValue, checked_version, statements
from greengpu.accounting.ledger_url import PostgresLedger
from greengpu.errors import BadInput

_MIGRATION_LOCK = 0x67_72_65_65_6E  # 'green': one advisory lock key for every greengpu ledger migration
CONNECT_TIMEOUT_S = 10


if TYPE_CHECKING:
    from psycopg import Connection
    from psycopg.rows import TupleRow

# psycopg is imported where it is used: not installed, the ModuleNotFoundError reaches the command line, which
# names the 'fleet' extra in one line (greengpu.cli.EXTRA_OF_MODULE), as for every other extra.


def reason(error: BaseException) -> str:
    """The server's or libpq's message, on one short line."""
    text = " ".join(str(error).split()) or type(error).__name__
    return text if len(text) <= 160 else text[:157] + "..."


def connect(ledger: PostgresLedger, *, read_only: bool) -> Connection[TupleRow]:
    """An autocommit connection (each write says its own transaction); BadInput when the server cannot be
    reached or refuses."""
    import psycopg

    try:
        connection = psycopg.connect(ledger.url, autocommit=True, connect_timeout=CONNECT_TIMEOUT_S,
                                     application_name="greengpu")
    except psycopg.Error as error:
        raise BadInput(f"{ledger}: cannot connect to the ledger database ({reason(error)})") from None
    except ValueError as error:  # libpq rejected the URI's options
        raise BadInput(f"--ledger: {ledger}: {reason(error)}") from None
    if read_only:
        # A report never writes to its input: here the server itself refuses any write on this session (psycopg's
        # own read_only attribute does nothing in autocommit mode).
        try:
            connection.execute("SET default_transaction_read_only = on")
        except psycopg.Error as error:
            connection.close()
            raise BadInput(f"{ledger}: cannot read the ledger database ({reason(error)})") from None
    return connection


def _tables(connection: Connection[TupleRow]) -> dict[str, tuple[str, ...]]:
    rows = connection.execute(
        "SELECT table_name, column_name FROM information_schema.columns WHERE table_schema = current_schema() "
        "AND table_name = ANY(%s) ORDER BY table_name, ordinal_position",
        (sorted({t for columns in COLUMNS.values() for t in columns}),)).fetchall()
    found: dict[str, tuple[str, ...]] = {}
    for table, column in rows:
        found[table] = (*found.get(table, ()), column)
    return found


def version_of(ledger: PostgresLedger, connection: Connection[TupleRow]) -> int:
    """The schema version of the database; BadInput unless it holds a greengpu ledger this greengpu reads."""
    tables = _tables(connection)
    if "meta" not in tables:
        raise BadInput(f"{ledger}: not a greengpu ledger (no table meta)")
    row = connection.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone() \
        if tables["meta"] == ("key", "value") else None
    return checked_version(str(ledger), row[0] if row is not None else None, lambda table: tables.get(table, ()))


def schema_version(ledger: PostgresLedger) -> int:
    """The checked schema version of the ledger database."""
    import psycopg

    connection = connect(ledger, read_only=True)
    try:
        return version_of(ledger, connection)
    except psycopg.Error as error:
        raise BadInput(f"{ledger}: unreadable ledger ({reason(error)})") from None
    finally:
        connection.close()


def query(ledger: PostgresLedger, sql: str, parameters: tuple[SqlValue, ...]) -> list[SqlRow]:
    """The rows of one read-only query (SQL written with ? placeholders, as for SQLite)."""
    import psycopg

    connection = connect(ledger, read_only=True)
    try:
        version_of(ledger, connection)
        return list(connection.execute(sql.replace("?", "%s"), parameters).fetchall())
    except psycopg.Error as error:
        raise BadInput(f"{ledger}: unreadable ledger ({reason(error)})") from None
    finally:
        connection.close()


def open_for_writing(ledger: PostgresLedger) -> Connection[TupleRow]:
    """A connection to the ledger database, migrated to SCHEMA_VERSION (created when the database is empty)."""
    import psycopg

    connection = connect(ledger, read_only=False)
    try:
        with connection.transaction():
            connection.execute("SELECT pg_advisory_xact_lock(%s)", (_MIGRATION_LOCK,))
            version = version_of(ledger, connection) if "meta" in _tables(connection) else 0
            for number in range(version + 1, SCHEMA_VERSION + 1):
                for statement in statements(number, "postgresql"):
                    connection.execute(statement)
            if version < SCHEMA_VERSION:
                connection.execute("INSERT INTO meta VALUES ('schema_version', %s) ON CONFLICT (key) DO UPDATE "
                                   "SET value = excluded.value", (str(SCHEMA_VERSION),))
    except psycopg.Error as error:
        connection.close()
        raise BadInput(f"{ledger}: cannot write the ledger ({reason(error)})") from None
    except BadInput:
        connection.close()
        raise
    return connection


def database_error() -> type[BaseException]:
    """psycopg's base error class (for the writers' except clauses)."""
    import psycopg

    return psycopg.Error
