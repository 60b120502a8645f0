"""Where a ledger lives: an SQLite file (the default, nothing to install) or a PostgreSQL database named by a
URI (`--ledger postgresql://USER@/DB?host=SOCKET_DIR`, the `fleet` extra), shared by every cluster of a fleet.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import parse_qsl, urlsplit, urlunsplit

from greengpu.errors import BadInput

SCHEMES = ("postgresql", "postgres")
_DB_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_$.-]{0,62}")


@dataclass(frozen=True)
class PostgresLedger:
    """A ledger in a PostgreSQL database; `url` is the libpq URI as given (a password in it stays out of str())."""

    url: str

    def __str__(self) -> str:
        parts = urlsplit(self.url)
        if parts.password is None:
            return self.url
        netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
        return urlunsplit(parts._replace(netloc=netloc))


Ledger = Path | PostgresLedger
"""A ledger's location: reading and writing functions take either."""


def is_postgres(name: str) -> bool:
    """Whether `name` is a PostgreSQL URI rather than a file name."""
    return name.split(":", 1)[0].lower() in SCHEMES and "://" in name


def parse_ledger(name: str, flag: str = "--ledger") -> Ledger:
    """A `--ledger` value: a PostgresLedger for a postgresql:// URI (checked here, before any connection), else
    the path of an SQLite file."""
    if not is_postgres(name):
        return Path(name)
    try:
        parts = urlsplit(name)
        port = parts.port  # ValueError for a port that is not a number or out of range
        query = parse_qsl(parts.query, keep_blank_values=True, strict_parsing=bool(parts.query))
    except ValueError as error:
        raise BadInput(f"{flag}: not a PostgreSQL URI ({error}): {_shown(name)}") from None
    database = parts.path.lstrip("/")
    if not database:
        raise BadInput(f"{flag}: {_shown(name)} names no database (postgresql://USER@HOST/DB or "
                       "postgresql://USER@/DB?host=SOCKET_DIR)")
    if not _DB_NAME.fullmatch(database):
        raise BadInput(f"{flag}: {database[:40]!r} is not a database name (letters, digits, _ $ . -)")
    if not parts.hostname and not any(key == "host" for key, _ in query):
        raise BadInput(f"{flag}: {_shown(name)} names no server: give a host (postgresql://USER@HOST/DB) or a "
                       "socket folder (?host=/run/postgresql)")
    if port == 0:
        raise BadInput(f"{flag}: port 0 in {_shown(name)}")
    if parts.fragment:
        raise BadInput(f"{flag}: a PostgreSQL URI takes no #fragment: {_shown(name)}")
    return PostgresLedger(name)


def _shown(name: str) -> str:
    try:
        return str(PostgresLedger(name))[:120]
    except ValueError:
        return name.split("@")[-1][:120]


def cluster_name(cluster_file: str, given: str | None = None) -> str:
    """The name a run records for its cluster in a shared ledger: `given`, else the inventory file's name
    without .yaml and .cluster (examples/lab-a100.cluster.yaml: lab-a100)."""
    if given is not None:
        if not given.strip() or len(given) > 100 or not given.isprintable():
            raise BadInput(f"--cluster-name: {given[:40]!r} is not a name (1 to 100 printable characters)")
        return given
    name = Path(cluster_file).name
    for suffix in (".yaml", ".yml", ".cluster"):
        name = name.removesuffix(suffix)
    return name
