"""Writing the SQLite ledger: a whole replay's run at once (`greengpu simulate --ledger`), or a daemon's run
opened once and appended to at every metering period (docs/LEDGER.md). Reading it is greengpu.accounting.ledger.
"""

from __future__ import annotations

import datetime as dt
import sqlite3
from pathlib import Path

from greengpu.accounting.attribution import Attribution, Usage
from greengpu.accounting.ledger import _SCHEMA, SCHEMA_VERSION, _open_read_only, _reason
from greengpu.accounting.meter import J_PER_KWH
from greengpu.errors import BadInput
from greengpu.model import Site


def _open_for_writing(path: Path) -> sqlite3.Connection:
    """The ledger at `path` for a new run: created when missing (or an empty file), else checked first,
    read-only, so another application's database is refused before anything is written to it."""
    existing = path.is_file() and path.stat().st_size > 0
    if existing:
        _open_read_only(path).close()
    try:
        connection = sqlite3.connect(path)
        if not existing:
            connection.executescript(_SCHEMA)
            connection.execute("INSERT INTO meta VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))
            connection.commit()
        return connection
    except sqlite3.DatabaseError as error:
        raise BadInput(f"{path}: cannot write the ledger ({_reason(error)})") from None


def _usage_row(usage: Usage) -> tuple[float, float, float, float]:
    return (usage.gpu_energy_j / J_PER_KWH, usage.facility_energy_j / J_PER_KWH, usage.cost, usage.co2_g / 1000.0)


def _insert_job_runs(connection: sqlite3.Connection, run_id: int, attribution: Attribution) -> None:
    connection.executemany(
        "INSERT INTO job_runs VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        ((run_id, c.job_id, c.tenant, c.job_class, c.start_s, c.end_s, c.gpus, ",".join(c.nodes),
          c.gpu_energy_j / J_PER_KWH, c.facility_energy_j / J_PER_KWH, c.cost, c.co2_g / 1000.0)
         for c in attribution.jobs))


def write_run(path: Path, attribution: Attribution, *, kind: str, policy: str, source: str) -> int:
    """Store one run's attribution in the ledger at `path` (created if missing); its run_id."""
    site = attribution.meter.site
    connection = _open_for_writing(path)
    try:
        with connection:
            cursor = connection.execute(
                "INSERT INTO runs (kind, policy, source, created_utc, currency, pue) VALUES (?, ?, ?, ?, ?, ?)",
                (kind, policy, source, dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
                 site.currency, site.pue))
            run_id = int(cursor.lastrowid or 0)
            connection.executemany(
                "INSERT INTO tenant_hours VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                ((run_id, hour, tenant, usage.gpu_hours, *_usage_row(usage))
                 for (hour, tenant), usage in sorted(attribution.tenant_hours.items())))
            connection.executemany(
                "INSERT INTO node_hours VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                ((run_id, hour, node, usage.gpu_hours, *_usage_row(usage), usage.asleep_s / 3600.0)
                 for (hour, node), usage in sorted(attribution.node_hours.items())))
            _insert_job_runs(connection, run_id, attribution)
        return run_id
    finally:
        connection.close()


def open_metered_run(path: Path, site: Site, *, policy: str, source: str) -> int:
    """A new, empty `daemon` run in the ledger at `path` (created if missing) for metering to append to."""
    connection = _open_for_writing(path)
    try:
        with connection:
            cursor = connection.execute(
                "INSERT INTO runs (kind, policy, source, created_utc, currency, pue) VALUES ('daemon', ?, ?, ?, ?, ?)",
                (policy, source, dt.datetime.now(dt.UTC).isoformat(timespec="seconds"), site.currency, site.pue))
            return int(cursor.lastrowid or 0)
    finally:
        connection.close()


def append_usage(path: Path, run_id: int, attribution: Attribution) -> None:
    """Add a metering period to run `run_id`: hourly rows summed into the hours already there (a period may
    end mid-hour), job segments appended. One transaction: a crash leaves the period wholly in or out."""
    connection = _open_for_writing(path)
    try:
        with connection:
            connection.executemany(
                "INSERT INTO tenant_hours VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (run_id, hour_start_s, tenant) "
                "DO UPDATE SET gpu_hours = gpu_hours + excluded.gpu_hours, "
                "gpu_energy_kwh = gpu_energy_kwh + excluded.gpu_energy_kwh, "
                "energy_kwh = energy_kwh + excluded.energy_kwh, cost = cost + excluded.cost, "
                "co2_kg = co2_kg + excluded.co2_kg",
                ((run_id, hour, tenant, usage.gpu_hours, *_usage_row(usage))
                 for (hour, tenant), usage in sorted(attribution.tenant_hours.items())))
            connection.executemany(
                "INSERT INTO node_hours VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (run_id, hour_start_s, node) "
                "DO UPDATE SET gpu_hours = gpu_hours + excluded.gpu_hours, "
                "gpu_energy_kwh = gpu_energy_kwh + excluded.gpu_energy_kwh, "
                "energy_kwh = energy_kwh + excluded.energy_kwh, cost = cost + excluded.cost, "
                "co2_kg = co2_kg + excluded.co2_kg, asleep_h = asleep_h + excluded.asleep_h",
                ((run_id, hour, node, usage.gpu_hours, *_usage_row(usage), usage.asleep_s / 3600.0)
                 for (hour, node), usage in sorted(attribution.node_hours.items())))
            _insert_job_runs(connection, run_id, attribution)
    finally:
        connection.close()
