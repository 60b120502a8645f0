"""Writing the ledger, an SQLite file or a PostgreSQL database: a whole replay's run at once (`greengpu simulate
--ledger`), or a daemon's run opened once and appended to at every metering period (docs/LEDGER.md). Reading
it is greengpu.accounting.ledger.
"""

from __future__ import annotations

import datetime as dt
import sqlite3
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING

from greengpu.accounting import ledger_sqlite
from greengpu.accounting.attribution import Attribution, Usage
from greengpu.accounting.cloud_rows import CloudUsage
from greengpu.accounting.ledger_schema import SqlRow, SqlValue
from greengpu.accounting.ledger_url import Ledger, PostgresLedger
from greengpu.accounting.meter import J_PER_KWH
from greengpu.errors import BadInput
from greengpu.model import Site

if TYPE_CHECKING:
    from psycopg import Connection
    from psycopg.rows import TupleRow


class _Writer:
    """One writing connection to either kind of ledger, migrated; SQL is written once, with ? placeholders."""

    def __init__(self, ledger: Ledger) -> None:
        self.ledger = ledger
        self.postgres = isinstance(ledger, PostgresLedger)
        self.connection: Connection[TupleRow] | sqlite3.Connection
        if isinstance(ledger, PostgresLedger):
            from greengpu.accounting import ledger_pg

            self.connection = ledger_pg.open_for_writing(ledger)
            self.errors: tuple[type[BaseException], ...] = (ledger_pg.database_error(),)
        else:
            self.connection = ledger_sqlite.open_for_writing(ledger)
            self.errors = (sqlite3.Error,)

    def _sql(self, sql: str) -> str:
        return sql.replace("?", "%s") if self.postgres else sql

    def fetch_one(self, sql: str, parameters: tuple[SqlValue, ...]) -> SqlRow | None:
        """The first row the statement returns (its RETURNING clause), None when it returns none."""
        row: SqlRow | None = self.connection.execute(self._sql(sql), parameters).fetchone()
        return row

    def executemany(self, sql: str, rows: Iterable[tuple[SqlValue, ...]]) -> None:
        if isinstance(self.connection, sqlite3.Connection):
            self.connection.executemany(sql, rows)
        else:
            with self.connection.cursor() as cursor:
                cursor.executemany(self._sql(sql), list(rows))

    @contextmanager
    def transaction(self) -> Iterator[None]:
        """One transaction: committed whole, or rolled back whole (a kill in the middle leaves nothing of it)."""
        try:
            if isinstance(self.connection, sqlite3.Connection):
                with self.connection:
                    yield
            else:
                with self.connection.transaction():
                    yield
        except self.errors as error:
            from greengpu.accounting import ledger_pg

            shown = ledger_pg.reason(error) if self.postgres else ledger_sqlite.reason(error)  # type: ignore[arg-type]
            raise BadInput(f"{self.ledger}: cannot write the ledger ({shown})") from None

    def close(self) -> None:
        self.connection.close()


def _usage_row(usage: Usage) -> tuple[float, float, float, float]:
    return (usage.gpu_energy_j / J_PER_KWH, usage.facility_energy_j / J_PER_KWH, usage.cost, usage.co2_g / 1000.0)


OUTCOMES = ("completed", "failed", "killed", "preempted", "")
"""How a job's run segment ended ('': still running, or not known)."""


def _insert_job_runs(writer: _Writer, run_id: int, attribution: Attribution) -> None:
    for charge in attribution.jobs:
        if charge.outcome not in OUTCOMES:
            raise BadInput(f"job {charge.job_id}: outcome {charge.outcome[:40]!r} is not one of "
                           f"{', '.join(o for o in OUTCOMES if o)}")
    writer.executemany(
        "INSERT INTO job_runs (run_id, job_id, tenant, job_class, start_s, end_s, gpus, nodes, gpu_energy_kwh, "
        "energy_kwh, cost, co2_kg, submit_s, outcome, checkpoint_s, gpu_profile, gpu_model, pool) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        ((run_id, c.job_id, c.tenant, c.job_class, c.start_s, c.end_s, c.gpus, ",".join(c.nodes),
          c.gpu_energy_j / J_PER_KWH, c.facility_energy_j / J_PER_KWH, c.cost, c.co2_g / 1000.0, c.submit_s,
          c.outcome, c.checkpoint_s, c.gpu_profile, c.gpu_model, c.pool)
         for c in attribution.jobs))


def _write_cloud(writer: _Writer, run_id: int, cloud: Mapping[tuple[float, str, str], CloudUsage]) -> None:
    writer.executemany(
        "INSERT INTO cloud_hours VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (run_id, hour_start_s, pool, tenant) "
        "DO UPDATE SET node_hours = cloud_hours.node_hours + excluded.node_hours, energy_kwh = "
        "cloud_hours.energy_kwh + excluded.energy_kwh, cost = cloud_hours.cost + excluded.cost, co2_kg = "
        "cloud_hours.co2_kg + excluded.co2_kg",
        ((run_id, hour, pool, row.region, tenant, row.node_hours, row.energy_kwh, row.cost, row.co2_kg)
         for (hour, pool, tenant), row in sorted(cloud.items())))


def _settle(writer: _Writer, run_id: int, outcomes: Mapping[str, str]) -> None:
    """Each job's outcome on its last segment of the run (the one with the latest end)."""
    for job_id, outcome in outcomes.items():
        if outcome not in OUTCOMES:
            raise BadInput(f"job {job_id}: outcome {outcome[:40]!r} is not one of "
                           f"{', '.join(o for o in OUTCOMES if o)}")
    writer.executemany(
        "UPDATE job_runs SET outcome = ? WHERE run_id = ? AND job_id = ? AND end_s = (SELECT MAX(end_s) FROM "
        "job_runs AS j WHERE j.run_id = ? AND j.job_id = ?)",
        ((outcome, run_id, job_id, run_id, job_id) for job_id, outcome in sorted(outcomes.items()) if outcome))


def _new_run(writer: _Writer, kind: str, policy: str, source: str, site: Site, cluster: str) -> int:
    row = writer.fetch_one(
        "INSERT INTO runs (kind, policy, source, created_utc, currency, pue, cluster) VALUES (?, ?, ?, ?, ?, ?, ?) "
        "RETURNING run_id",
        (kind, policy, source, dt.datetime.now(dt.UTC).isoformat(timespec="seconds"), site.currency, site.pue,
         cluster))
    assert row is not None and isinstance(row[0], int), "INSERT ... RETURNING run_id returns the new id"
    return row[0]


# Hour rows are upserted on their natural key: a metering period that ends mid-hour adds to the hour already
# there. Qualified column names: PostgreSQL and SQLite read the same statement the same way.
_ADD = "{t}.{c} + excluded.{c}"
_FIGURES = ("gpu_hours", "gpu_energy_kwh", "energy_kwh", "cost", "co2_kg")


def _upsert(table: str, key: str, columns: tuple[str, ...], extra: str = "") -> str:
    marks = ", ".join("?" * (3 + len(columns) + (1 if extra else 0)))
    sums = ", ".join(f"{c} = " + _ADD.format(t=table, c=c) for c in columns)
    return f"INSERT INTO {table} VALUES ({marks}) ON CONFLICT (run_id, hour_start_s, {key}) DO UPDATE SET {sums}{extra}"


# An hour is measured only if every period added to it was: one modelled period makes the whole hour modelled.
_BASIS = ", basis = CASE WHEN node_hours.basis = 'measured' AND excluded.basis = 'measured' THEN 'measured' " \
         "ELSE 'modelled' END"


def _basis(usage: Usage) -> str:
    return "modelled" if usage.modelled_s > 0 else "measured"


def _write_hours(writer: _Writer, run_id: int, attribution: Attribution) -> None:
    writer.executemany(_upsert("tenant_hours", "tenant", _FIGURES),
                       ((run_id, hour, tenant, usage.gpu_hours, *_usage_row(usage))
                        for (hour, tenant), usage in sorted(attribution.tenant_hours.items())))
    writer.executemany(_upsert("node_hours", "node", (*_FIGURES, "asleep_h"), _BASIS),
                       ((run_id, hour, node, usage.gpu_hours, *_usage_row(usage), usage.asleep_s / 3600.0,
                         _basis(usage))
                        for (hour, node), usage in sorted(attribution.node_hours.items())))


def write_run(ledger: Ledger, attribution: Attribution, *, kind: str, policy: str, source: str,
              cluster: str = "", cloud: Mapping[tuple[float, str, str], CloudUsage] | None = None) -> int:
    """Store one run's attribution in the ledger (created if missing) in one transaction; its run_id. `cloud`:
    the run's cloud rows keyed (hour, pool, tenant) (greengpu.accounting.cloud_rows)."""
    writer = _Writer(ledger)
    try:
        with writer.transaction():
            run_id = _new_run(writer, kind, policy, source, attribution.meter.site, cluster)
            _write_hours(writer, run_id, attribution)
            _insert_job_runs(writer, run_id, attribution)
            _write_cloud(writer, run_id, cloud or {})
        return run_id
    finally:
        writer.close()


def open_metered_run(ledger: Ledger, site: Site, *, policy: str, source: str, cluster: str = "") -> int:
    """A new, empty `daemon` run in the ledger (created if missing) for metering to append to."""
    writer = _Writer(ledger)
    try:
        with writer.transaction():
            return _new_run(writer, "daemon", policy, source, site, cluster)
    finally:
        writer.close()


def append_usage(ledger: Ledger, run_id: int, attribution: Attribution, *, start_s: float | None = None,
                 end_s: float | None = None, cloud: Mapping[tuple[float, str, str], CloudUsage] | None = None,
                 outcomes: Mapping[str, str] | None = None) -> bool:
    """Add a metering period to run `run_id`: hourly rows summed into the hours already there (a period may end
    mid-hour), job segments appended, the period's cloud rows (`cloud`, keyed (hour, pool, tenant)) summed into
    theirs, and the jobs that ended (`outcomes`: job id -> how) settled on their last segment so far. One
    transaction: a crash leaves the period wholly in or out. With its bounds, the period is recorded under
    (run, end) first, and one already recorded is not added again: False."""
    writer = _Writer(ledger)
    try:
        with writer.transaction():
            if end_s is not None:
                node_rows = attribution.node_hours.values()
                added = writer.fetch_one(
                    "INSERT INTO metered_periods VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (run_id, end_s) DO NOTHING "
                    "RETURNING run_id",
                    (run_id, end_s if start_s is None else start_s, end_s,
                     sum(u.facility_energy_j for u in node_rows) / J_PER_KWH, sum(u.cost for u in node_rows),
                     sum(u.co2_g for u in node_rows) / 1000.0))
                if added is None:
                    return False
            _write_hours(writer, run_id, attribution)
            _insert_job_runs(writer, run_id, attribution)
            _write_cloud(writer, run_id, cloud or {})
            _settle(writer, run_id, outcomes or {})
        return True
    finally:
        writer.close()
