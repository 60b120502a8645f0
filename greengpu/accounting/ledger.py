"""Reading the ledger: energy, cost and CO2 per job, tenant and node (docs/LEDGER.md), from an SQLite file or
a PostgreSQL database (greengpu.accounting.ledger_url).

One ledger holds any number of runs (a simulated policy, or a daemon's metering). Each run keeps
hourly rows per tenant and per node, and one row per job run segment, so a month (or any period
of whole hours) can be reported without the replay. Layout in docs/LEDGER.md.
"""

from __future__ import annotations

import datetime as dt
import math
import re
from collections.abc import Iterable

from greengpu.accounting import ledger_sqlite
from greengpu.accounting.bill import HourFigures, JobSegment, MonthInput
from greengpu.accounting.ledger_schema import SqlRow, SqlValue
from greengpu.accounting.ledger_url import Ledger, PostgresLedger
from greengpu.config.limits import MAX_NUMBER, MAX_YEAR, MIN_YEAR
from greengpu.errors import BadInput

_MONTH = re.compile(r"[0-9]{4}-[0-9]{2}")


def _query(ledger: Ledger, sql: str, parameters: tuple[SqlValue, ...]) -> list[SqlRow]:
    """One read-only query on either kind of ledger (SQL written with ? placeholders)."""
    if isinstance(ledger, PostgresLedger):
        from greengpu.accounting import ledger_pg

        return ledger_pg.query(ledger, sql, parameters)
    return ledger_sqlite.query(ledger, sql, parameters)


def _version(ledger: Ledger) -> int:
    if isinstance(ledger, PostgresLedger):
        from greengpu.accounting import ledger_pg

        return ledger_pg.schema_version(ledger)
    return ledger_sqlite.schema_version(ledger)


RUN_KEYS = ("run_id", "kind", "policy", "source", "created_utc", "currency", "pue", "cluster")


def runs(path: Ledger) -> list[dict[str, object]]:
    """The runs stored in the ledger (opened read-only); `cluster` is '' for runs written before schema 2."""
    cluster = "cluster" if _version(path) >= 2 else "''"
    rows = _query(path, f"SELECT run_id, kind, policy, source, created_utc, currency, pue, {cluster} FROM runs "
                        "ORDER BY run_id", ())
    return [dict(zip(RUN_KEYS, row, strict=True)) for row in rows]


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


def month_report(path: Ledger, month: str, run_id: int | None = None) -> dict[str, object]:
    """Totals, idle and per-tenant usage for a UTC month (docs/LEDGER.md, JSON shape)."""
    run = choose_run(path, run_id)
    run_id = int(str(run["run_id"]))
    start_s, end_s = month_bounds_s(month)
    tenant_rows = _query(
        path, "SELECT tenant, SUM(gpu_hours), SUM(energy_kwh), SUM(cost), SUM(co2_kg) FROM tenant_hours "
        "WHERE run_id = ? AND hour_start_s >= ? AND hour_start_s < ? GROUP BY tenant ORDER BY tenant",
        (run_id, start_s, end_s))
    site = _query(path, "SELECT SUM(gpu_hours), SUM(energy_kwh), SUM(cost), SUM(co2_kg), SUM(asleep_h) FROM node_hours "
                        "WHERE run_id = ? AND hour_start_s >= ? AND hour_start_s < ?", (run_id, start_s, end_s))[0]
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

def _checked_rows(path: Ledger, run_id: int, table: str, columns: tuple[str, ...], text_columns: int,
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


_FIGURES = ("gpu_hours", "gpu_energy_kwh", "energy_kwh", "cost", "co2_kg")


def site_hours(path: Ledger, run_id: int, start_s: float, end_s: float) -> list[HourFigures]:
    """The whole site per UTC hour in [start_s, end_s): every node's metering added up."""
    sums = ", ".join(f"SUM({c})" for c in _FIGURES)
    rows = _query(path, f"SELECT hour_start_s, {sums} FROM node_hours WHERE run_id = ? AND hour_start_s >= ? "
                        "AND hour_start_s < ? GROUP BY hour_start_s ORDER BY hour_start_s", (run_id, start_s, end_s))
    checked = _checked_rows(path, run_id, "node_hours", ("hour_start_s", *_FIGURES), 0, rows)
    return [HourFigures(float(r[0]), "", *(float(v) for v in r[1:])) for r in checked]  # type: ignore[arg-type]


def hours_span_s(path: Ledger, run_id: int) -> tuple[float, float] | None:
    """The first and last metered hour's start of a run: None when it has none, or when they are not times
    a date can be written for (a damaged ledger; the bill itself refuses such rows)."""
    numbers_only = "" if isinstance(path, PostgresLedger) else " AND typeof(hour_start_s) IN ('integer', 'real')"
    rows = _query(path, f"SELECT MIN(hour_start_s), MAX(hour_start_s) FROM node_hours WHERE run_id = ?{numbers_only}",
                  (run_id,))
    first, last = rows[0] if rows else (None, None)
    low_s = dt.datetime(MIN_YEAR, 1, 1, tzinfo=dt.UTC).timestamp()
    high_s = dt.datetime(MAX_YEAR, 12, 31, tzinfo=dt.UTC).timestamp()
    if all(isinstance(v, int | float) and math.isfinite(v) and low_s <= v <= high_s for v in (first, last)):
        return float(first), float(last)  # type: ignore[arg-type]
    return None


def _keyed_hours(path: Ledger, run_id: int, table: str, key: str, start_s: float, end_s: float) -> list[HourFigures]:
    columns = ", ".join(_FIGURES)
    rows = _query(path, f"SELECT {key}, hour_start_s, {columns} FROM {table} WHERE run_id = ? AND hour_start_s >= ? "
                        f"AND hour_start_s < ? ORDER BY hour_start_s, {key}", (run_id, start_s, end_s))
    checked = _checked_rows(path, run_id, table, (key, "hour_start_s", *_FIGURES), 1, rows)
    return [HourFigures(float(r[1]), str(r[0]), *(float(v) for v in r[2:]))  # type: ignore[arg-type]
            for r in checked]


_SEGMENT_TEXT = ("job_id", "tenant", "job_class")
_SEGMENT_NUMBERS = ("start_s", "end_s", "gpus")


def month_input(path: Ledger, run_id: int, start_s: float, end_s: float) -> MonthInput:
    """Everything a bill of [start_s, end_s) needs from one run: site, tenant and node hours, and the run
    segments of every job that ran in the period (with its segments outside it, to tell a preemption
    from an end)."""
    columns = (*_SEGMENT_TEXT, "nodes", *_SEGMENT_NUMBERS, "gpu_energy_kwh", "energy_kwh", "cost", "co2_kg")
    # Schema 3 also keeps the segments a job ran in the cloud (for queue rows): their energy and spend are the
    # cloud rows', so the bill's segments are the on-premises ones.
    here = " AND pool = ''" if _version(path) >= 3 else ""
    rows = _query(path, f"SELECT {', '.join(columns)} FROM job_runs WHERE run_id = ?{here} AND job_id IN (SELECT "
                        f"job_id FROM job_runs WHERE run_id = ?{here} AND end_s > ? AND start_s < ?) ORDER BY "
                        "start_s, job_id", (run_id, run_id, start_s, end_s))
    checked = _checked_rows(path, run_id, "job_runs", columns, 4, rows)
    segments = [JobSegment(str(r[0]), str(r[1]), str(r[2]), float(r[4]), float(r[5]),  # type: ignore[arg-type]
                           float(r[6]), tuple(n for n in str(r[3]).split(",") if n),  # type: ignore[arg-type]
                           *(float(v) for v in r[7:]))  # type: ignore[arg-type]
                for r in checked]
    return MonthInput(start_s=start_s, end_s=end_s, site_hours=site_hours(path, run_id, start_s, end_s),
                      tenant_hours=_keyed_hours(path, run_id, "tenant_hours", "tenant", start_s, end_s),
                      node_hours=_keyed_hours(path, run_id, "node_hours", "node", start_s, end_s),
                      segments=segments)


def sleep_hours(path: Ledger, run_id: int, start_s: float, end_s: float) -> float:
    """Node-hours asleep in [start_s, end_s)."""
    rows = _query(path, "SELECT SUM(asleep_h) FROM node_hours WHERE run_id = ? AND hour_start_s >= ? "
                        "AND hour_start_s < ?", (run_id, start_s, end_s))
    try:
        return _numbers(rows[0][:1])[0]
    except ValueError as error:
        raise BadInput(f"{path}: run {run_id}: node_hours.asleep_h: {error}") from None


def choose_run(path: Ledger, run_id: int | None, flag: str = "--run") -> dict[str, object]:
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
summed as 0 or compared as greater than every number, so a hand-edited hour would quietly leave a bill. No
figure of a real ledger comes near MAX_NUMBER (a quadrillion kWh, dollars or seconds)."""


def _check_numbers(path: Ledger, run_id: int) -> None:
    """One located BadInput when a row of run `run_id` holds, in a number column, text, NULL, NaN, an infinity or
    a magnitude above MAX_NUMBER (a hand-edited 1.8e305 overflowed the bill's sums into a traceback)."""
    postgres = isinstance(path, PostgresLedger)
    row_id = "ctid::text" if postgres else "rowid"
    for table, columns in _NUMERIC.items():
        # PostgreSQL's typed columns hold numbers only, NaN and infinities included; NaN sorts above every
        # number there, so the one comparison catches it. SQLite also needs the type of each value checked.
        bad = " OR ".join(f"abs({c}) > {MAX_NUMBER:.0e}" if postgres else
                          f"typeof({c}) NOT IN ('integer', 'real') OR abs({c}) > {MAX_NUMBER:.0e}" for c in columns)
        rows = _query(path, f"SELECT {row_id}, {', '.join(columns)} FROM {table} WHERE run_id = ? AND ({bad}) "
                            "LIMIT 1", (run_id,))
        for row in rows:
            for column, value in zip(columns, row[1:], strict=True):
                if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
                        or abs(value) > MAX_NUMBER:
                    raise BadInput(f"{path}: run {run_id}: not a finite number in the ledger: {table}.{column} "
                                   f"(row {row[0]!s}) {str(value)[:40]!r}")


def shared_hour(path: Ledger, run_a: int, run_b: int, start_s: float, end_s: float) -> str | None:
    """An hour in [start_s, end_s) in which runs `run_a` and `run_b` both metered one node (written
    'YYYY-MM-DD HH:00 UTC, node N'), or None: runs of one cluster that overlap are alternatives (two policies of
    one replay), not parts of one bill."""
    rows = _query(path, "SELECT a.hour_start_s, a.node FROM node_hours a JOIN node_hours b ON b.run_id = ? AND "
                        "b.hour_start_s = a.hour_start_s AND b.node = a.node WHERE a.run_id = ? AND "
                        "a.hour_start_s >= ? AND a.hour_start_s < ? ORDER BY a.hour_start_s LIMIT 1",
                  (run_b, run_a, start_s, end_s))
    if not rows:
        return None
    when = dt.datetime.fromtimestamp(float(rows[0][0]), dt.UTC)  # type: ignore[arg-type]
    return f"{when:%Y-%m-%d %H:00} UTC, node {str(rows[0][1])[:40]}"
