"""The SQLite ledger: energy, cost and CO2 per job, tenant and node (docs/LEDGER.md).

One file holds any number of runs (a simulated policy, or a daemon's metering). Each run keeps
hourly rows per tenant and per node, and one row per job run segment, so a month (or any period
of whole hours) can be reported without the replay. Layout in docs/LEDGER.md.
"""

from __future__ import annotations

import datetime as dt
import math
import re
import sqlite3
from collections.abc import Iterable
from pathlib import Path

from greengpu.accounting.bill import HourFigures, JobSegment, MonthInput
from greengpu.config.limits import MAX_YEAR, MIN_YEAR
from greengpu.errors import BadInput

SCHEMA_VERSION = 1
_MONTH = re.compile(r"[0-9]{4}-[0-9]{2}")

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


_COLUMNS = {
    "meta": ("key", "value"),
    "runs": ("run_id", "kind", "policy", "source", "created_utc", "currency", "pue"),
    "tenant_hours": ("run_id", "hour_start_s", "tenant", "gpu_hours", "gpu_energy_kwh", "energy_kwh", "cost",
                     "co2_kg"),
    "node_hours": ("run_id", "hour_start_s", "node", "gpu_hours", "gpu_energy_kwh", "energy_kwh", "cost", "co2_kg",
                   "asleep_h"),
    "job_runs": ("run_id", "job_id", "tenant", "job_class", "start_s", "end_s", "gpus", "nodes", "gpu_energy_kwh",
                 "energy_kwh", "cost", "co2_kg"),
}
"""The tables and columns of this schema version: a file without exactly these is not read as a ledger."""
_SQLITE_MAGIC = b"SQLite format 3\x00"


def _reason(error: sqlite3.Error) -> str:
    """SQLite's message, first line and short (it may quote a whole damaged table definition)."""
    text = " ".join(str(error).split())
    return text if len(text) <= 120 else text[:117] + "..."


def _check_schema(path: Path, connection: sqlite3.Connection) -> None:
    """BadInput unless the open database is a greengpu ledger of SCHEMA_VERSION (tables, columns, version)."""
    for table, columns in _COLUMNS.items():
        found = tuple(row[1] for row in connection.execute(f"PRAGMA table_info({table})"))
        if not found:
            raise BadInput(f"{path}: not a greengpu ledger (no table {table})")
        if found != columns:
            raise BadInput(f"{path}: not a greengpu ledger of schema {SCHEMA_VERSION} (table {table} has columns "
                           f"{', '.join(map(str, found))[:120]})")
    version = connection.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    text = str(version[0]) if version is not None else "none"
    if not text.isdigit() or int(text) != SCHEMA_VERSION:
        raise BadInput(f"{path}: ledger schema version {text[:40]!r}, this greengpu reads {SCHEMA_VERSION}")


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


_SIDECARS = ("-wal", "-shm", "-journal")


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


def _open_read_only(path: Path) -> sqlite3.Connection:
    """The ledger at `path` opened read-only (SQLite URI mode=ro), its schema checked: reading never writes."""
    _check_file(path)
    existed = {suffix for suffix in _SIDECARS if path.with_name(path.name + suffix).exists()}
    try:
        return _open_checked(path)
    except BadInput:
        _remove_new_sidecars(path, existed)
        raise


def _open_checked(path: Path) -> sqlite3.Connection:
    try:
        connection = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
        # Text that is not UTF-8 (a damaged file) is read with replacement characters, not a traceback.
        connection.text_factory = lambda raw: raw.decode("utf-8", errors="replace")
    except sqlite3.Error as error:
        raise BadInput(f"{path}: cannot open the ledger ({_reason(error)})") from None
    try:
        _check_schema(path, connection)
    except sqlite3.DatabaseError as error:
        connection.close()
        raise BadInput(f"{path}: not a greengpu ledger ({_reason(error)})") from None
    except UnicodeDecodeError:  # SQLite's own message quoted bytes of a damaged schema
        connection.close()
        raise BadInput(f"{path}: not a greengpu ledger (damaged: its schema is not UTF-8 text)") from None
    except BadInput:
        connection.close()
        raise
    return connection


def runs(path: Path) -> list[dict[str, object]]:
    """The runs stored in the ledger at `path` (opened read-only)."""
    connection = _open_read_only(path)
    try:
        rows = connection.execute("SELECT run_id, kind, policy, source, created_utc, currency, pue FROM runs "
                                  "ORDER BY run_id").fetchall()
    except sqlite3.DatabaseError as error:
        raise BadInput(f"{path}: unreadable ledger ({_reason(error)})") from None
    except UnicodeDecodeError:
        raise BadInput(f"{path}: unreadable ledger (damaged: text that is not UTF-8)") from None
    finally:
        connection.close()
    keys = ("run_id", "kind", "policy", "source", "created_utc", "currency", "pue")
    return [dict(zip(keys, row, strict=True)) for row in rows]


def month_bounds_s(month: str) -> tuple[float, float]:
    """[start, end) of a UTC calendar month 'YYYY-MM' (years 1900 to 2199) as Unix seconds."""
    # ASCII digits only: strptime's %Y also takes Arabic-Indic and other Unicode digits, so '٢٠٢٤-01' billed
    # January 2024 without a word; a month is written one way.
    if not _MONTH.fullmatch(month):
        raise BadInput(f"--month: {month[:40]!r} is not a month like 2017-10 (YYYY-MM in ASCII digits)")
    year, number = int(month[:4]), int(month[5:])
    if not 1 <= number <= 12:
        raise BadInput(f"--month: {month!r} is not a month like 2017-10 (months run 01 to 12)")
    if not MIN_YEAR <= year <= MAX_YEAR:
        raise BadInput(f"--month: {month!r} is outside the supported years {MIN_YEAR} to {MAX_YEAR}")
    first = dt.datetime(year, number, 1, tzinfo=dt.UTC)
    following = (first.replace(day=28) + dt.timedelta(days=4)).replace(day=1)
    return first.timestamp(), following.timestamp()


_KEYS = ("gpu_hours", "energy_kwh", "cost", "co2_kg")


def _rounded(values: Iterable[float]) -> dict[str, float]:
    gpu_hours, energy_kwh, cost, co2_kg = values
    # Cents and grams: the contract's precision. Tenant rows plus idle must add up to the totals at it.
    return {"gpu_hours": round(gpu_hours, 3), "energy_kwh": round(energy_kwh, 3), "cost": round(cost, 2),
            "co2_kg": round(co2_kg, 3)}


def month_report(path: Path, month: str, run_id: int | None = None) -> dict[str, object]:
    """Totals, idle and per-tenant usage for a UTC month (docs/LEDGER.md, JSON shape)."""
    run = choose_run(path, run_id)
    run_id = int(str(run["run_id"]))
    start_s, end_s = month_bounds_s(month)
    connection = _open_read_only(path)
    try:
        tenant_rows = connection.execute(
            "SELECT tenant, SUM(gpu_hours), SUM(energy_kwh), SUM(cost), SUM(co2_kg) FROM tenant_hours "
            "WHERE run_id = ? AND hour_start_s >= ? AND hour_start_s < ? GROUP BY tenant ORDER BY tenant",
            (run_id, start_s, end_s)).fetchall()
        site = connection.execute(
            "SELECT SUM(gpu_hours), SUM(energy_kwh), SUM(cost), SUM(co2_kg), SUM(asleep_h) FROM node_hours "
            "WHERE run_id = ? AND hour_start_s >= ? AND hour_start_s < ?", (run_id, start_s, end_s)).fetchone()
    except sqlite3.DatabaseError as error:
        raise BadInput(f"{path}: unreadable ledger ({_reason(error)})") from None
    except UnicodeDecodeError:
        raise BadInput(f"{path}: unreadable ledger (damaged: text that is not UTF-8)") from None
    finally:
        connection.close()
    try:
        tenant_figures = [_rounded(_numbers(row[1:])) for row in tenant_rows]
        totals = _rounded(_numbers(site[:4]))
    except ValueError as error:
        raise BadInput(f"{path}: run {run_id}: {error}") from None
    # Idle is what no tenant is charged for (unallocated GPU-hours; idle GPUs and hosts, sleeping
    # hosts): the totals less the rounded tenant rows, so the rows add up exactly at the precision shown.
    idle = {key: round(totals[key] - sum(figures[key] for figures in tenant_figures), 2 if key == "cost" else 3)
            for key in _KEYS}
    tenants = [{"tenant": str(row[0]), **figures} for row, figures in zip(tenant_rows, tenant_figures, strict=True)]
    return {"period": month, "run_id": run_id, "policy": str(run["policy"]), "currency": str(run["currency"]),
            "totals": totals, "idle": idle, "tenants": tenants,
            "node_sleep_hours": round(_numbers(site[4:5])[0], 3)}


def _numbers(values: Iterable[object]) -> list[float]:
    """Sums read back from SQLite as finite floats (NULL, an empty month, is 0); ValueError otherwise."""
    out = []
    for value in values:
        number = 0.0 if value is None else value
        if not isinstance(number, (int, float)) or not math.isfinite(number):
            raise ValueError(f"not a finite number in the ledger: {str(value)[:40]!r}")
        out.append(float(number))
    return out


# ------------------------------------------------------------------ reading a month for a bill (greengpu report)

def _checked_rows(path: Path, run_id: int, table: str, columns: tuple[str, ...], text_columns: int,
                  rows: Iterable[tuple[object, ...]]) -> list[tuple[object, ...]]:
    """Rows read back with every number finite and every text a string: a damaged or hand-edited ledger
    gives one line naming the file, run, table and column, never a traceback or a NaN in a bill."""
    out = []
    for row in rows:
        for index, value in enumerate(row):
            column = columns[index]
            if index < text_columns:
                if not isinstance(value, str):
                    raise BadInput(f"{path}: run {run_id}: not text in the ledger: {table}.{column} "
                                   f"{str(value)[:40]!r}")
            elif isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise BadInput(f"{path}: run {run_id}: not a finite number in the ledger: {table}.{column} "
                               f"{str(value)[:40]!r}")
        out.append(row)
    return out


def _query(path: Path, sql: str, parameters: tuple[object, ...]) -> list[tuple[object, ...]]:
    connection = _open_read_only(path)
    try:
        return list(connection.execute(sql, parameters).fetchall())
    except sqlite3.DatabaseError as error:
        raise BadInput(f"{path}: unreadable ledger ({_reason(error)})") from None
    except UnicodeDecodeError:
        raise BadInput(f"{path}: unreadable ledger (damaged: text that is not UTF-8)") from None
    finally:
        connection.close()


_FIGURES = ("gpu_hours", "gpu_energy_kwh", "energy_kwh", "cost", "co2_kg")


def site_hours(path: Path, run_id: int, start_s: float, end_s: float) -> list[HourFigures]:
    """The whole site per UTC hour in [start_s, end_s): every node's metering added up."""
    sums = ", ".join(f"SUM({c})" for c in _FIGURES)
    rows = _query(path, f"SELECT hour_start_s, {sums} FROM node_hours WHERE run_id = ? AND hour_start_s >= ? "
                        "AND hour_start_s < ? GROUP BY hour_start_s ORDER BY hour_start_s", (run_id, start_s, end_s))
    checked = _checked_rows(path, run_id, "node_hours", ("hour_start_s", *_FIGURES), 0, rows)
    return [HourFigures(float(r[0]), "", *(float(v) for v in r[1:])) for r in checked]  # type: ignore[arg-type]


def hours_span_s(path: Path, run_id: int) -> tuple[float, float] | None:
    """The first and last metered hour's start of a run: None when it has none, or when they are not times
    a date can be written for (a damaged ledger; the bill itself refuses such rows)."""
    rows = _query(path, "SELECT MIN(hour_start_s), MAX(hour_start_s) FROM node_hours WHERE run_id = ? "
                        "AND typeof(hour_start_s) IN ('integer', 'real')", (run_id,))
    first, last = rows[0] if rows else (None, None)
    low_s = dt.datetime(MIN_YEAR, 1, 1, tzinfo=dt.UTC).timestamp()
    high_s = dt.datetime(MAX_YEAR, 12, 31, tzinfo=dt.UTC).timestamp()
    if all(isinstance(v, int | float) and math.isfinite(v) and low_s <= v <= high_s for v in (first, last)):
        return float(first), float(last)  # type: ignore[arg-type]
    return None


def _keyed_hours(path: Path, run_id: int, table: str, key: str, start_s: float, end_s: float) -> list[HourFigures]:
    columns = ", ".join(_FIGURES)
    rows = _query(path, f"SELECT {key}, hour_start_s, {columns} FROM {table} WHERE run_id = ? AND hour_start_s >= ? "
                        f"AND hour_start_s < ? ORDER BY hour_start_s, {key}", (run_id, start_s, end_s))
    checked = _checked_rows(path, run_id, table, (key, "hour_start_s", *_FIGURES), 1, rows)
    return [HourFigures(float(r[1]), str(r[0]), *(float(v) for v in r[2:]))  # type: ignore[arg-type]
            for r in checked]


_SEGMENT_TEXT = ("job_id", "tenant", "job_class")
_SEGMENT_NUMBERS = ("start_s", "end_s", "gpus")


def month_input(path: Path, run_id: int, start_s: float, end_s: float) -> MonthInput:
    """Everything a bill of [start_s, end_s) needs from one run: site, tenant and node hours, and the run
    segments of every job that ran in the period (with its segments outside it, to tell a preemption
    from an end)."""
    columns = (*_SEGMENT_TEXT, "nodes", *_SEGMENT_NUMBERS, "gpu_energy_kwh", "energy_kwh", "cost", "co2_kg")
    rows = _query(path, f"SELECT {', '.join(columns)} FROM job_runs WHERE run_id = ? AND job_id IN (SELECT job_id "
                        "FROM job_runs WHERE run_id = ? AND end_s > ? AND start_s < ?) ORDER BY start_s, job_id",
                  (run_id, run_id, start_s, end_s))
    checked = _checked_rows(path, run_id, "job_runs", columns, 4, rows)
    segments = [JobSegment(str(r[0]), str(r[1]), str(r[2]), float(r[4]), float(r[5]),  # type: ignore[arg-type]
                           float(r[6]), tuple(n for n in str(r[3]).split(",") if n),  # type: ignore[arg-type]
                           *(float(v) for v in r[7:]))  # type: ignore[arg-type]
                for r in checked]
    return MonthInput(start_s=start_s, end_s=end_s, site_hours=site_hours(path, run_id, start_s, end_s),
                      tenant_hours=_keyed_hours(path, run_id, "tenant_hours", "tenant", start_s, end_s),
                      node_hours=_keyed_hours(path, run_id, "node_hours", "node", start_s, end_s),
                      segments=segments)


def sleep_hours(path: Path, run_id: int, start_s: float, end_s: float) -> float:
    """Node-hours asleep in [start_s, end_s)."""
    rows = _query(path, "SELECT SUM(asleep_h) FROM node_hours WHERE run_id = ? AND hour_start_s >= ? "
                        "AND hour_start_s < ?", (run_id, start_s, end_s))
    try:
        return _numbers(rows[0][:1])[0]
    except ValueError as error:
        raise BadInput(f"{path}: run {run_id}: node_hours.asleep_h: {error}") from None


def choose_run(path: Path, run_id: int | None, flag: str = "--run") -> dict[str, object]:
    """The run `run_id` of the ledger (the only one when None), or a one-line BadInput listing the runs."""
    stored = runs(path)
    if not stored:
        raise BadInput(f"{path}: the ledger holds no runs yet")
    if run_id is None:
        if len(stored) > 1:
            listing = ", ".join(f"{r['run_id']} ({r['kind']} {r['policy']})" for r in stored)
            raise BadInput(f"{path}: holds {len(stored)} runs, choose one with {flag}: {listing}")
        run = stored[0]
    else:
        found = next((r for r in stored if r["run_id"] == run_id), None)
        if found is None:
            listing = ", ".join(f"{r['run_id']} ({r['kind']} {r['policy']})" for r in stored)
            raise BadInput(f"{flag}: no run {run_id} in {path} (runs: {listing[:200]})")
        run = found
    run_id = run["run_id"]  # type: ignore[assignment]
    for key in ("pue",):
        value = run[key]
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 1.0 <= value <= 5.0:
            raise BadInput(f"{path}: run {run_id}: runs.{key}: not a PUE from 1 to 5: {str(value)[:40]!r}")
    for key in ("policy", "currency", "kind", "source"):
        if not isinstance(run[key], str):
            raise BadInput(f"{path}: run {run_id}: runs.{key}: not text: {str(run[key])[:40]!r}")
    _check_numbers(path, int(str(run_id)))
    return run


_NUMERIC = {
    "tenant_hours": ("hour_start_s", "gpu_hours", "gpu_energy_kwh", "energy_kwh", "cost", "co2_kg"),
    "node_hours": ("hour_start_s", "gpu_hours", "gpu_energy_kwh", "energy_kwh", "cost", "co2_kg", "asleep_h"),
    "job_runs": ("start_s", "end_s", "gpus", "gpu_energy_kwh", "energy_kwh", "cost", "co2_kg"),
}
"""The number columns of each table of a run. SQLite keeps any value in any column: text there would be
summed as 0 or compared as greater than every number, so a hand-edited hour would quietly leave a bill."""


def _check_numbers(path: Path, run_id: int) -> None:
    """One located BadInput when a row of run `run_id` holds text, NULL or an infinity in a number column."""
    for table, columns in _NUMERIC.items():
        bad = " OR ".join(f"typeof({c}) NOT IN ('integer', 'real') OR abs({c}) > 1e308" for c in columns)
        rows = _query(path, f"SELECT rowid, {', '.join(columns)} FROM {table} WHERE run_id = ? AND ({bad}) LIMIT 1",
                      (run_id,))
        for row in rows:
            for column, value in zip(columns, row[1:], strict=True):
                if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                    raise BadInput(f"{path}: run {run_id}: not a finite number in the ledger: {table}.{column} "
                                   f"(row {row[0]}) {str(value)[:40]!r}")
