"""The SQLite ledger: energy, cost and CO2 per job, tenant and node (CONTRACTS.md section 6).

One file holds any number of runs (a simulated policy, or a daemon's metering). Each run keeps
hourly rows per tenant and per node, and one row per job run segment, so a month (or any period
of whole hours) can be reported without the replay. Layout in docs/LEDGER.md.
"""

from __future__ import annotations

import datetime as dt
import sqlite3
from collections.abc import Iterable
from pathlib import Path

from greengpu.accounting.attribution import Attribution, Usage
from greengpu.accounting.meter import J_PER_KWH
from greengpu.errors import BadInput

SCHEMA_VERSION = 1

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS runs (
    run_id INTEGER PRIMARY KEY,
    kind TEXT NOT NULL,              -- 'simulate' or 'daemon'
    policy TEXT NOT NULL,
    source TEXT NOT NULL,            -- trace or cluster the figures come from
    created_utc TEXT NOT NULL,
    currency TEXT NOT NULL,
    pue REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS tenant_hours (
    run_id INTEGER NOT NULL REFERENCES runs(run_id),
    hour_start_s REAL NOT NULL,      -- Unix time of the UTC hour
    tenant TEXT NOT NULL,
    gpu_hours REAL NOT NULL,
    gpu_energy_kwh REAL NOT NULL,    -- GPUs alone, before PUE
    energy_kwh REAL NOT NULL,        -- facility: (GPU + host share) x PUE
    cost REAL NOT NULL,
    co2_kg REAL NOT NULL,
    PRIMARY KEY (run_id, hour_start_s, tenant)
);
CREATE TABLE IF NOT EXISTS node_hours (
    run_id INTEGER NOT NULL REFERENCES runs(run_id),
    hour_start_s REAL NOT NULL,
    node TEXT NOT NULL,
    gpu_hours REAL NOT NULL,         -- installed GPU-hours metered in this row
    gpu_energy_kwh REAL NOT NULL,
    energy_kwh REAL NOT NULL,
    cost REAL NOT NULL,
    co2_kg REAL NOT NULL,
    asleep_h REAL NOT NULL,
    PRIMARY KEY (run_id, hour_start_s, node)
);
CREATE TABLE IF NOT EXISTS job_runs (
    run_id INTEGER NOT NULL REFERENCES runs(run_id),
    job_id TEXT NOT NULL,
    tenant TEXT NOT NULL,
    job_class TEXT NOT NULL,
    start_s REAL NOT NULL,
    end_s REAL NOT NULL,
    gpus REAL NOT NULL,
    nodes TEXT NOT NULL,             -- comma-separated node names
    gpu_energy_kwh REAL NOT NULL,
    energy_kwh REAL NOT NULL,
    cost REAL NOT NULL,
    co2_kg REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS job_runs_by_tenant ON job_runs (run_id, tenant, start_s);
"""


def _connect(path: Path) -> sqlite3.Connection:
    try:
        connection = sqlite3.connect(path)
        connection.executescript(_SCHEMA)
        found = connection.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
        if found is None:
            connection.execute("INSERT INTO meta VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))
        elif int(found[0]) != SCHEMA_VERSION:
            raise BadInput(f"{path}: ledger schema version {found[0]}, this greengpu reads {SCHEMA_VERSION}")
        return connection
    except sqlite3.DatabaseError as error:
        raise BadInput(f"{path}: not a greengpu ledger ({error})") from None


def _usage_row(usage: Usage) -> tuple[float, float, float, float]:
    return (usage.gpu_energy_j / J_PER_KWH, usage.facility_energy_j / J_PER_KWH, usage.cost, usage.co2_g / 1000.0)


def write_run(path: Path, attribution: Attribution, *, kind: str, policy: str, source: str) -> int:
    """Store one run's attribution in the ledger at `path` (created if missing); its run_id."""
    site = attribution.meter.site
    connection = _connect(path)
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
            connection.executemany(
                "INSERT INTO job_runs VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                ((run_id, c.job_id, c.tenant, c.job_class, c.start_s, c.end_s, c.gpus, ",".join(c.nodes),
                  c.gpu_energy_j / J_PER_KWH, c.facility_energy_j / J_PER_KWH, c.cost, c.co2_g / 1000.0)
                 for c in attribution.jobs))
        return run_id
    finally:
        connection.close()


def runs(path: Path) -> list[dict[str, object]]:
    """The runs stored in the ledger at `path`."""
    if not path.is_file():
        raise BadInput(f"{path}: no such ledger file")
    connection = _connect(path)
    try:
        rows = connection.execute("SELECT run_id, kind, policy, source, created_utc, currency, pue FROM runs "
                                  "ORDER BY run_id").fetchall()
    finally:
        connection.close()
    keys = ("run_id", "kind", "policy", "source", "created_utc", "currency", "pue")
    return [dict(zip(keys, row, strict=True)) for row in rows]


def month_bounds_s(month: str) -> tuple[float, float]:
    """[start, end) of a UTC calendar month 'YYYY-MM' as Unix seconds."""
    try:
        first = dt.datetime.strptime(month, "%Y-%m").replace(tzinfo=dt.UTC)
    except ValueError:
        raise BadInput(f"--month: '{month}' is not a month like 2017-10") from None
    following = (first.replace(day=28) + dt.timedelta(days=4)).replace(day=1)
    return first.timestamp(), following.timestamp()


_KEYS = ("gpu_hours", "energy_kwh", "cost", "co2_kg")


def _rounded(values: Iterable[float]) -> dict[str, float]:
    gpu_hours, energy_kwh, cost, co2_kg = values
    # Cents and grams: the contract's precision. Tenant rows plus idle must add up to the totals at it.
    return {"gpu_hours": round(gpu_hours, 3), "energy_kwh": round(energy_kwh, 3), "cost": round(cost, 2),
            "co2_kg": round(co2_kg, 3)}


def month_report(path: Path, month: str, run_id: int | None = None) -> dict[str, object]:
    """Totals, idle and per-tenant usage for a UTC month (CONTRACTS.md section 6, JSON shape)."""
    stored = runs(path)
    if not stored:
        raise BadInput(f"{path}: the ledger holds no runs yet")
    if run_id is None:
        if len(stored) > 1:
            listing = ", ".join(f"{r['run_id']} ({r['kind']} {r['policy']})" for r in stored)
            raise BadInput(f"{path}: holds {len(stored)} runs, choose one with --run: {listing}")
        run_id = int(str(stored[0]["run_id"]))
    run = next((r for r in stored if r["run_id"] == run_id), None)
    if run is None:
        raise BadInput(f"--run: no run {run_id} in {path}")
    start_s, end_s = month_bounds_s(month)
    connection = _connect(path)
    try:
        tenant_rows = connection.execute(
            "SELECT tenant, SUM(gpu_hours), SUM(energy_kwh), SUM(cost), SUM(co2_kg) FROM tenant_hours "
            "WHERE run_id = ? AND hour_start_s >= ? AND hour_start_s < ? GROUP BY tenant ORDER BY tenant",
            (run_id, start_s, end_s)).fetchall()
        site = connection.execute(
            "SELECT SUM(gpu_hours), SUM(energy_kwh), SUM(cost), SUM(co2_kg), SUM(asleep_h) FROM node_hours "
            "WHERE run_id = ? AND hour_start_s >= ? AND hour_start_s < ?", (run_id, start_s, end_s)).fetchone()
    finally:
        connection.close()
    tenant_figures = [_rounded(row[1:]) for row in tenant_rows]
    totals = _rounded(value or 0.0 for value in site[:4])
    # Idle is what no tenant is charged for (unallocated GPU-hours; idle GPUs and hosts, sleeping
    # hosts): the totals less the rounded tenant rows, so the rows add up exactly at the precision shown.
    idle = {key: round(totals[key] - sum(figures[key] for figures in tenant_figures), 2 if key == "cost" else 3)
            for key in _KEYS}
    tenants = [{"tenant": row[0], **figures} for row, figures in zip(tenant_rows, tenant_figures, strict=True)]
    return {"period": month, "run_id": run_id, "policy": run["policy"], "currency": run["currency"],
            "totals": totals, "idle": idle, "tenants": tenants, "node_sleep_hours": round(site[4] or 0.0, 3)}
