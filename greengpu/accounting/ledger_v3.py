"""Reading what schema 3 added to a ledger (docs/LEDGER.md): the cloud rows, how much of a month's node
energy was measured, and what the queue and chargeback rows need of each job. A ledger of version 1 or 2 has
none of it: no cloud rows, every node-hour modelled, no submit times or outcomes."""

from __future__ import annotations

import math
from dataclasses import dataclass

from greengpu.accounting.chargeback import ChargeSegment
from greengpu.accounting.cloud_rows import CloudHour
from greengpu.accounting.ledger import _checked_rows, _query, _version
from greengpu.accounting.ledger_url import Ledger
from greengpu.errors import BadInput


@dataclass(frozen=True)
class JobFacts:
    """A job's facts for queue and chargeback rows, from its run segments."""

    job_id: str
    tenant: str
    submit_s: float | None
    first_start_s: float
    last_end_s: float
    outcome: str
    checkpoint_s: float | None


_CLOUD = ("pool", "region", "tenant", "hour_start_s", "node_hours", "energy_kwh", "cost", "co2_kg")


def cloud_hours(path: Ledger, run_id: int, start_s: float, end_s: float) -> list[CloudHour]:
    """The run's cloud rows of [start_s, end_s) (none before schema 3)."""
    if _version(path) < 3:
        return []
    rows = _query(path, f"SELECT {', '.join(_CLOUD)} FROM cloud_hours WHERE run_id = ? AND hour_start_s >= ? AND "
                        "hour_start_s < ? ORDER BY hour_start_s, pool, tenant", (run_id, start_s, end_s))
    checked = _checked_rows(path, run_id, "cloud_hours", _CLOUD, 3, rows)
    return [CloudHour(float(r[3]), str(r[0]), str(r[1]), str(r[2]),  # type: ignore[arg-type]
                      *(float(v) for v in r[4:])) for r in checked]  # type: ignore[arg-type]


def measured_share(path: Ledger, run_id: int, start_s: float, end_s: float) -> float | None:
    """The share of the month's metered node energy whose node-hour is measured (None: nothing metered);
    0 before schema 3, whose rows were never checked against counters."""
    if _version(path) < 3:
        rows = _query(path, "SELECT SUM(energy_kwh), 0 FROM node_hours WHERE run_id = ? AND hour_start_s >= ? AND "
                            "hour_start_s < ?", (run_id, start_s, end_s))
    else:
        rows = _query(path, "SELECT SUM(energy_kwh), SUM(CASE WHEN basis = 'measured' THEN energy_kwh ELSE 0 END) "
                            "FROM node_hours WHERE run_id = ? AND hour_start_s >= ? AND hour_start_s < ?",
                      (run_id, start_s, end_s))
    total, measured = rows[0] if rows else (None, None)
    if not isinstance(total, int | float) or not total > 0:
        return None
    return float(measured or 0.0) / float(total)


def node_bases(path: Ledger, run_id: int, start_s: float, end_s: float) -> dict[str, str]:
    """Each node's own basis label over [start_s, end_s), by the same rule as a run's."""
    if _version(path) < 3:
        return {}
    rows = _query(path, "SELECT node, SUM(energy_kwh), SUM(CASE WHEN basis = 'measured' THEN energy_kwh ELSE 0 "
                        "END) FROM node_hours WHERE run_id = ? AND hour_start_s >= ? AND hour_start_s < ? GROUP BY "
                        "node", (run_id, start_s, end_s))
    out = {}
    for node, total, measured in rows:
        part = float(measured) if isinstance(measured, int | float) else 0.0
        share = part / total if isinstance(total, int | float) and total > 0 else None
        out[str(node)] = basis_label(share)
    return out


def basis_label(share: float | None) -> str:
    """`measured` only when every row is; `modelled` when none is; `partly measured (N%)` between."""
    if share is not None and share >= 1.0:
        return "measured"
    if share is None or share <= 0.0:
        return "modelled"
    percent = min(99, max(1, math.floor(share * 100)))
    return f"partly measured ({percent}%)"


_JOB = ("job_id", "tenant", "outcome", "start_s", "end_s")


def job_facts(path: Ledger, run_id: int, start_s: float, end_s: float) -> list[JobFacts]:
    """Every job that started in [start_s, end_s): its submit time, first start, and how its last segment
    ended (none before schema 3: the queue rows need submit times)."""
    if _version(path) < 3:
        return []
    rows = _query(path, "SELECT job_id, tenant, outcome, start_s, end_s, submit_s, checkpoint_s FROM job_runs "
                        "WHERE run_id = ? ORDER BY job_id, start_s, end_s", (run_id,))
    checked = _checked_rows(path, run_id, "job_runs", _JOB, 3, [r[:5] for r in rows])
    out: list[JobFacts] = []
    current: list[tuple[object, ...]] = []
    for row, full in zip(checked, rows, strict=True):
        for column, value in zip(("submit_s", "checkpoint_s"), full[5:], strict=True):
            if value is not None and (isinstance(value, bool) or not isinstance(value, int | float)
                                      or not math.isfinite(value) or value < 0):
                raise BadInput(f"{path}: run {run_id}: not a time in the ledger: job_runs.{column} "
                               f"{str(value)[:40]!r}")
        if current and current[0][0] != row[0]:
            out.append(_facts(current))
            current = []
        current.append((*row, *full[5:]))
    if current:
        out.append(_facts(current))
    return [f for f in out if start_s <= f.first_start_s < end_s]


def _facts(segments: list[tuple[object, ...]]) -> JobFacts:
    first, last = segments[0], segments[-1]
    submits = [float(s[5]) for s in segments if s[5] is not None]  # type: ignore[arg-type]
    checkpoints = [float(s[6]) for s in segments if s[6] is not None]  # type: ignore[arg-type]
    return JobFacts(str(first[0]), str(first[1]), min(submits) if submits else None,
                    float(first[3]), float(last[4]), str(last[2]),  # type: ignore[arg-type]
                    max(checkpoints) if checkpoints else None)


_CHARGE = ("tenant", "job_class", "job_id", "nodes", "gpu_model", "gpu_profile", "start_s", "end_s", "gpus")


def charge_segments(path: Ledger, run_id: int, start_s: float, end_s: float, aggregate: str
                    ) -> list[ChargeSegment]:
    """The run's job segments in [start_s, end_s) keyed by the bill's row (`tenant`, `class`, `job`; `node`:
    one per node, its GPUs split evenly). Before schema 3 no GPU model is recorded: every segment is billed at
    the default rate."""
    version = _version(path)
    extra = "gpu_model, gpu_profile" if version >= 3 else "'', ''"
    here = " AND pool = ''" if version >= 3 else ""  # cloud GPU-hours are billed as cloud spend, not charged back
    rows = _query(path, f"SELECT tenant, job_class, job_id, nodes, {extra}, start_s, end_s, gpus FROM job_runs "
                        f"WHERE run_id = ?{here} AND end_s > ? AND start_s < ? ORDER BY start_s, job_id",
                  (run_id, start_s, end_s))
    checked = _checked_rows(path, run_id, "job_runs", _CHARGE, 6, rows)
    out = []
    for r in checked:
        numbers = [float(v) for v in r[6:]]  # type: ignore[arg-type]
        if aggregate == "node":
            nodes = [n for n in str(r[3]).split(",") if n] or [""]
            out += [ChargeSegment(n, numbers[0], numbers[1], numbers[2] / len(nodes), str(r[4]), str(r[5]))
                    for n in nodes]
            continue
        key = {"tenant": r[0], "class": r[1], "job": r[2]}.get(aggregate, r[0])
        out.append(ChargeSegment(str(key), numbers[0], numbers[1], numbers[2], str(r[4]), str(r[5])))
    return out
