"""A fleet's bill: several runs of one ledger (clusters written by several daemons and replays) as one month's
report, by cluster, tenant, node, class or job (docs/FLEET.md).

Each run is billed on its own first (its own PUE, its rows and idle conserved at a cent and a gram), then the
bills are added in whole units (cents, grams, thousandths): so the fleet's rows add up to its totals, and its
totals to the sum of the per-cluster reports, exactly at the precision shown.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable
from dataclasses import replace
from typing import Literal

from greengpu.accounting.bill import UNITS
from greengpu.accounting.ledger import choose_run, month_bounds_s, runs, shared_hour
from greengpu.accounting.ledger_url import Ledger
from greengpu.accounting.ledger_v3 import basis_label
from greengpu.errors import BadInput
from greengpu.report.month_types import DayFigures, Figures, MonthFigures, MonthReport, ReportRequest, number

UNNAMED = "(unnamed)"


def select_runs(ledger: Ledger, run_ids: tuple[int, ...], cluster: str | None, fleet: bool, aggregate: str,
                month: str) -> list[dict[str, object]] | None:
    """The runs a fleet report adds up, or None for the one-run report: `--run` given more than once, the runs
    of `--cluster-name`, or every run (`--fleet`, or `--aggregate cluster`). Two runs of one cluster that
    metered the same node in the same hour (two policies of one replay) are refused: they are alternatives,
    not parts of one bill."""
    if len(run_ids) > 1:
        chosen = [choose_run(ledger, run_id) for run_id in dict.fromkeys(run_ids)]
    elif run_ids:
        if cluster is not None or fleet:
            raise BadInput("--run names one run: leave out --cluster-name and --fleet, or give --run again")
        if aggregate == "cluster":
            chosen = [choose_run(ledger, run_ids[0])]
        else:
            return None
    elif cluster is not None or fleet or aggregate == "cluster":
        stored = runs(ledger)
        if cluster is not None:
            stored = [r for r in stored if r["cluster"] == cluster]
            if not stored:
                known = sorted({str(r["cluster"]) for r in runs(ledger)})
                raise BadInput(f"--cluster-name: no run of cluster {cluster[:60]!r} in {ledger} "
                               f"(clusters: {', '.join(repr(k) for k in known)[:200]})")
        if not stored:
            raise BadInput(f"{ledger}: the ledger holds no runs yet")
        chosen = [choose_run(ledger, int(str(r["run_id"]))) for r in stored]
    else:
        return None
    start_s, end_s = month_bounds_s(month)
    for first, second in itertools.combinations(chosen, 2):
        if first["cluster"] != second["cluster"]:
            continue
        hour = shared_hour(ledger, int(str(first["run_id"])), int(str(second["run_id"])), start_s, end_s)
        if hour is not None:
            raise BadInput(f"runs {first['run_id']} ({first['kind']} {first['policy']}) and {second['run_id']} "
                           f"({second['kind']} {second['policy']}) of cluster {str(first['cluster'])!r} both "
                           f"metered {hour} in {month}: alternatives cannot be added up; choose with --run")
    if len({str(r["currency"]) for r in chosen}) > 1:
        raise BadInput(f"the runs are recorded in {', '.join(sorted({str(r['currency']) for r in chosen}))}: "
                       "a fleet bill is in one currency; choose runs with --run")
    return chosen


def _units(value: float | None, key: str) -> int:
    return 0 if value is None else round(value / UNITS[key])


def _from_units(units: int, key: str) -> float:
    digits = 2 if UNITS[key] == 0.01 else 3
    return round(units * UNITS[key], digits)


def _added(parts: list[Figures | MonthFigures], key: str) -> float | None:
    """`key` summed in whole units over the parts that have it; None when every one is null."""
    if all(p[key] is None for p in parts):
        return None
    return _from_units(sum(_units(number(p, key) if p[key] is not None else None, key) for p in parts), key)


def _add_figures(parts: Iterable[Figures | MonthFigures]) -> Figures:
    """Figures added in whole units; efficiency and idle share recomputed from the sums."""
    parts = list(parts)
    out: Figures = {}
    for key in UNITS:
        present = [p for p in parts if key in p]
        if present:
            out[key] = _added(present, key)
    if "gpu_hours" in out and "gpu_hours_allocated" in out:
        hours = number(out, "gpu_hours")
        out["efficiency"] = round(number(out, "gpu_hours_allocated") / hours, 4) if hours else None
    if "energy_kwh" in out and "idle_energy_kwh" in out:
        energy = number(out, "energy_kwh")
        out["idle_share"] = round(number(out, "idle_energy_kwh") / energy, 4) if energy else None
    jobs = [j for j in (p.get("jobs") for p in parts) if isinstance(j, dict)]
    if jobs:
        out["jobs"] = {state: sum(j.get(state, 0) for j in jobs) for state in jobs[0]}
    return out


def _merged_rows(named: list[tuple[str, str, Figures]], name_key: str) -> list[Figures]:
    """Rows (cluster, name, row) of several runs merged by name, each saying its clusters and basis."""
    groups: dict[str, list[tuple[str, Figures]]] = {}
    for cluster, name, row in named:
        groups.setdefault(name, []).append((cluster, row))
    out: list[Figures] = []
    for name in sorted(groups):
        members = groups[name]
        clusters = sorted({c for c, _ in members})
        bases = {str(r.get("basis")) for _, r in members}
        # A merged row is measured only if every run's is; otherwise it says it is not (partly or modelled).
        out.append({name_key: name, **_add_figures(r for _, r in members),
                    "basis": bases.pop() if len(bases) == 1 else "partly measured",
                    "cluster": clusters[0] if len(clusters) == 1 else None, "clusters": clusters})
    return out


def _rows(payloads: list[tuple[dict[str, object], MonthReport]], aggregate: str, key: Literal["tenants", "rows"],
          name_key: str) -> list[Figures]:
    clusters = {str(run["cluster"]) for run, _ in payloads}
    named = []
    for run, payload in payloads:
        cluster = str(run["cluster"])
        for row in payload[key]:
            name = str(row[name_key])
            if aggregate == "cluster" and key == "rows":
                name = cluster or UNNAMED  # runs written before schema 2 belong to no named cluster
            elif aggregate in ("node", "job") and key == "rows" and len(clusters) > 1:
                name = f"{cluster}/{name}"  # node names and job ids are a cluster's own: keep them apart
            named.append((cluster, name, row))
    return _merged_rows(named, name_key)


def _days(payloads: list[MonthReport]) -> list[DayFigures]:
    by_day: dict[str, list[DayFigures]] = {}
    for payload in payloads:
        for day in payload["days"]:
            by_day.setdefault(str(day["day"]), []).append(day)
    out: list[DayFigures] = []
    for label in sorted(by_day):
        parts = by_day[label]
        energy = sum(number(p, "energy_kwh") for p in parts)
        idle = sum(number(p, "energy_kwh") * number(p, "idle_share") for p in parts)
        out.append({"day": label, "energy_kwh": round(energy, 3),
                    "cost": round(sum(number(p, "cost") for p in parts), 2),
                    "co2_kg": round(sum(number(p, "co2_kg") for p in parts), 3),
                    "idle_share": round(idle / energy, 4) if energy > 0 else 0.0})
    return out


def _trend(payloads: list[MonthReport]) -> list[MonthFigures]:
    by_period: dict[str, list[MonthFigures]] = {}
    for payload in payloads:
        for month in payload["trend"]:
            by_period.setdefault(str(month["period"]), []).append(month)
    return [{"period": period, **{k: v for k, v in _add_figures(by_period[period]).items()
                                  if k in ("gpu_hours", "energy_kwh", "cost", "co2_kg", "co2_market_kg")}}
            for period in sorted(by_period)]


def build_fleet_report(request: ReportRequest, chosen: list[dict[str, object]],
                       build_report: Callable[[ReportRequest], MonthReport]) -> MonthReport:
    """The report of several runs added up (`request` a month_types.ReportRequest; `build_report` bills one)."""
    if request.baseline_run is not None:
        raise BadInput("--baseline compares two runs: give one --run with it, not a fleet")
    per_run = "tenant" if request.aggregate == "cluster" else request.aggregate
    payloads = [(run, build_report(replace(request, run_id=int(str(run["run_id"])), aggregate=per_run)))
                for run in chosen]
    first = payloads[0][1]
    bare = [p for _, p in payloads]
    # Measured share of the fleet: each run's share weighted by its energy (a run with none metered adds nothing).
    weighted = [(share, number(p["totals"], "energy_kwh")) for p in bare
                if (share := p.get("measured_share")) is not None]
    energy = sum(e for _, e in weighted)
    share = sum(s * e for s, e in weighted) / energy if energy > 0 else None
    pricing = first["pricing"].copy()
    if len({float(str(run["pue"])) for run in chosen}) > 1 and request.settings.pue is None:
        pricing["pue"] = {"value": None, "source": "the inventory's site.pue of each run when it was written"}
    payload: MonthReport = {
        **first,
        "run_id": None, "runs": [int(str(run["run_id"])) for run in chosen],
        "clusters": sorted({str(run["cluster"]) for run in chosen}),
        "policy": ", ".join(dict.fromkeys(str(run["policy"]) for run in chosen)),
        "kind": ", ".join(dict.fromkeys(str(run["kind"]) for run in chosen)),
        "source": "fleet: " + ", ".join(f"run {run['run_id']} ({run['cluster'] or 'unnamed'})" for run in chosen),
        "basis": basis_label(share), "measured_share": None if share is None else round(share, 4),
        "aggregate": request.aggregate, "queue": None,
        "totals": _add_figures(p["totals"] for p in bare), "idle": _add_figures(p["idle"] for p in bare),
        "tenants": _rows(payloads, "tenant", "tenants", "tenant"),
        "rows": _rows(payloads, request.aggregate, "rows", "name"),
        "jobs": {state: sum(p["jobs"][state] for p in bare) for state in first["jobs"]},
        "node_sleep_hours": round(sum(p["node_sleep_hours"] for p in bare), 3),
        "pricing": pricing, "days": _days(bare), "trend": _trend(bare), "baseline": None,
    }
    # The shape of a one-run report's totals and idle.
    payload["totals"] = {k: v for k, v in payload["totals"].items() if k in first["totals"]}
    payload["idle"] = {k: v for k, v in payload["idle"].items() if k in first["idle"]}
    return payload
