"""The ledger's schema and its versioned migrations, one text for SQLite and PostgreSQL (docs/LEDGER.md).

A new ledger is made by running every migration from version 1; an older one is brought up to date by the
ones it lacks, in one transaction, the first time a writer opens it (a reader never migrates: it reads
versions 1 to 3 as they are). Version 2 adds the cluster a run belongs to (so several clusters share one
ledger) and the metering periods a daemon has charged (so a period sent twice is charged once). Version 3 says
whether each node-hour's energy was measured or modelled, adds the cloud's node-hours, spend and CO2 per hour,
pool and tenant, and what chargeback and queue rows need of a job (submit time, outcome, checkpoint time, MIG
instance profile).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeAlias

from greengpu.errors import BadInput

SqlValue: TypeAlias = str | int | float | bytes | None
"""A value SQLite and PostgreSQL store in the ledger's columns (a query parameter or a cell)."""
SqlRow: TypeAlias = tuple[SqlValue, ...]
"""One row of a ledger query."""

SCHEMA_VERSION = 3
READABLE_VERSIONS = (1, 2, 3)

_V1 = (
    "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
    """CREATE TABLE IF NOT EXISTS runs (
    run_id {run_id_key},
    kind TEXT NOT NULL,              -- 'simulate' or 'daemon'
    policy TEXT NOT NULL,
    source TEXT NOT NULL,            -- trace or cluster the figures come from
    created_utc TEXT NOT NULL,
    currency TEXT NOT NULL,
    pue {real} NOT NULL
)""",
    """CREATE TABLE IF NOT EXISTS tenant_hours (
    run_id BIGINT NOT NULL REFERENCES runs(run_id),
    hour_start_s {real} NOT NULL,    -- Unix time of the UTC hour
    tenant TEXT NOT NULL,
    gpu_hours {real} NOT NULL,
    gpu_energy_kwh {real} NOT NULL,  -- GPUs alone, before PUE
    energy_kwh {real} NOT NULL,      -- facility: (GPU + host share) x PUE
    cost {real} NOT NULL,
    co2_kg {real} NOT NULL,
    PRIMARY KEY (run_id, hour_start_s, tenant)
)""",
    """CREATE TABLE IF NOT EXISTS node_hours (
    run_id BIGINT NOT NULL REFERENCES runs(run_id),
    hour_start_s {real} NOT NULL,
    node TEXT NOT NULL,
    gpu_hours {real} NOT NULL,       -- installed GPU-hours metered in this row
    gpu_energy_kwh {real} NOT NULL,
    energy_kwh {real} NOT NULL,
    cost {real} NOT NULL,
    co2_kg {real} NOT NULL,
    asleep_h {real} NOT NULL,
    PRIMARY KEY (run_id, hour_start_s, node)
)""",
    """CREATE TABLE IF NOT EXISTS job_runs (
    run_id BIGINT NOT NULL REFERENCES runs(run_id),
    job_id TEXT NOT NULL,
    tenant TEXT NOT NULL,
    job_class TEXT NOT NULL,
    start_s {real} NOT NULL,
    end_s {real} NOT NULL,
    gpus {real} NOT NULL,
    nodes TEXT NOT NULL,             -- comma-separated node names
    gpu_energy_kwh {real} NOT NULL,
    energy_kwh {real} NOT NULL,
    cost {real} NOT NULL,
    co2_kg {real} NOT NULL
)""",
    "CREATE INDEX IF NOT EXISTS job_runs_by_tenant ON job_runs (run_id, tenant, start_s)",
)

_V2 = (
    # A default, so that the runs written before the fleet ledger read as one unnamed cluster.
    "ALTER TABLE runs ADD COLUMN cluster TEXT NOT NULL DEFAULT ''",
    """CREATE TABLE IF NOT EXISTS metered_periods (
    run_id BIGINT NOT NULL REFERENCES runs(run_id),
    start_s {real} NOT NULL,
    end_s {real} NOT NULL,          -- the natural key of a daemon's metering period, with run_id
    energy_kwh {real} NOT NULL,
    cost {real} NOT NULL,
    co2_kg {real} NOT NULL,
    PRIMARY KEY (run_id, end_s)
)""",
)

_V3 = (
    # Rows written before version 3 were never checked against counters: modelled.
    "ALTER TABLE node_hours ADD COLUMN basis TEXT NOT NULL DEFAULT 'modelled'",
    "ALTER TABLE job_runs ADD COLUMN submit_s {real}",            # NULL: not known
    "ALTER TABLE job_runs ADD COLUMN outcome TEXT NOT NULL DEFAULT ''",  # completed|failed|killed|preempted|''
    "ALTER TABLE job_runs ADD COLUMN checkpoint_s {real}",        # NULL: not known or none written
    "ALTER TABLE job_runs ADD COLUMN gpu_profile TEXT NOT NULL DEFAULT ''",  # MIG instance profile, '' whole GPUs
    "ALTER TABLE job_runs ADD COLUMN gpu_model TEXT NOT NULL DEFAULT ''",  # its nodes' GPU model, '' not known
    "ALTER TABLE job_runs ADD COLUMN pool TEXT NOT NULL DEFAULT ''",  # '' on-premises, else the cloud pool it ran in
    """CREATE TABLE IF NOT EXISTS cloud_hours (
    run_id BIGINT NOT NULL REFERENCES runs(run_id),
    hour_start_s {real} NOT NULL,
    pool TEXT NOT NULL,
    region TEXT NOT NULL,            -- '' when the pool names none
    tenant TEXT NOT NULL,            -- '' for paid node time no job used (boots, idle keep, empty GPUs)
    node_hours {real} NOT NULL,
    energy_kwh {real} NOT NULL,      -- modelled from the pool's node type
    cost {real} NOT NULL,
    co2_kg {real} NOT NULL,
    PRIMARY KEY (run_id, hour_start_s, pool, tenant)
)""",
)

MIGRATIONS: dict[int, tuple[str, ...]] = {1: _V1, 2: _V2, 3: _V3}
"""The statements that bring a ledger from version N-1 to N."""

_V1_COLUMNS = {
    "meta": ("key", "value"),
    "runs": ("run_id", "kind", "policy", "source", "created_utc", "currency", "pue"),
    "tenant_hours": ("run_id", "hour_start_s", "tenant", "gpu_hours", "gpu_energy_kwh", "energy_kwh", "cost",
                     "co2_kg"),
    "node_hours": ("run_id", "hour_start_s", "node", "gpu_hours", "gpu_energy_kwh", "energy_kwh", "cost", "co2_kg",
                   "asleep_h"),
    "job_runs": ("run_id", "job_id", "tenant", "job_class", "start_s", "end_s", "gpus", "nodes", "gpu_energy_kwh",
                 "energy_kwh", "cost", "co2_kg"),
}
COLUMNS: dict[int, dict[str, tuple[str, ...]]] = {
    1: _V1_COLUMNS,
    2: {**_V1_COLUMNS, "runs": (*_V1_COLUMNS["runs"], "cluster"),
        "metered_periods": ("run_id", "start_s", "end_s", "energy_kwh", "cost", "co2_kg")},
}
COLUMNS[3] = {
    **COLUMNS[2], "node_hours": (*_V1_COLUMNS["node_hours"], "basis"),
    "job_runs": (*_V1_COLUMNS["job_runs"], "submit_s", "outcome", "checkpoint_s", "gpu_profile", "gpu_model",
                 "pool"),
    "cloud_hours": ("run_id", "hour_start_s", "pool", "region", "tenant", "node_hours", "energy_kwh", "cost", "co2_kg"),
}
"""The tables and columns of each version: a database without exactly these is not read as a ledger."""


def statements(version: int, dialect: str) -> list[str]:
    """The migration to `version` written for 'sqlite' or 'postgresql'."""
    if dialect == "sqlite":
        words = {"run_id_key": "INTEGER PRIMARY KEY", "real": "REAL"}
    else:  # an identity column: run ids from several writers at once never collide
        words = {"run_id_key": "BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY", "real": "DOUBLE PRECISION"}
    return [statement.format(**words) for statement in MIGRATIONS[version]]


def checked_version(where: str, version: object | None, columns_of: Callable[[str], tuple[str, ...]]) -> int:
    """The ledger's schema version from its meta row (`version`; None: no such row), checked against what this
    greengpu reads: a readable version, and exactly that version's tables and columns (`columns_of(table)`, empty
    when the table is missing). BadInput naming `where` otherwise; one rule for SQLite and PostgreSQL."""
    text = str(version) if version is not None else "none"
    if not text.isdigit() or int(text) not in READABLE_VERSIONS:
        raise BadInput(f"{where}: ledger schema version {text[:40]!r}, this greengpu reads "
                       f"{READABLE_VERSIONS[0]} to {READABLE_VERSIONS[-1]}")
    number = int(text)
    for table, columns in COLUMNS[number].items():
        found = columns_of(table)
        if not found:
            raise BadInput(f"{where}: not a greengpu ledger (no table {table})")
        if found != columns:
            raise BadInput(f"{where}: not a greengpu ledger of schema {number} (table {table} has columns "
                           f"{', '.join(map(str, found))[:120]})")
    return number
