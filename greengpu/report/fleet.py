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
from typing import Any

from greengpu.accounting.bill import UNITS
from greengpu.accounting.ledger import choose_run, month_bounds_s, runs, shared_hour
from greengpu.accounting.ledger_url import Ledger
from greengpu.accounting.ledger_v3 import basis_label
from greengpu.errors import BadInput

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


def _add_figures(parts: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """Figures added in whole units; efficiency and idle share recomputed from the sums."""
    parts = list(parts)
    out: dict[str, Any] = {}
    for key in UNITS:
        values = [p.get(key) for p in parts if key in p]
        if not values:
            continue
        out[key] = None if all(v is None for v in values) else _from_units(sum(_units(v, key) for v in values), key)
    if "gpu_hours" in out and "gpu_hours_allocated" in out:
        out["efficiency"] = round(out["gpu_hours_allocated"] / out["gpu_hours"], 4) if out["gpu_hours"] else None
    if "energy_kwh" in out and "idle_energy_kwh" in out:
        out["idle_share"] = round(out["idle_energy_kwh"] / out["energy_kwh"], 4) if out["energy_kwh"] else None
    jobs = [p["jobs"] for p in parts if isinstance(p.get("jobs"), dict)]
    if jobs:
        out["jobs"] = {state: sum(j.get(state, 0) for j in jobs) for state in jobs[0]}
    return out


def _merged_rows(named: list[tuple[str, str, dict[str, Any]]], name_key: str) -> list[dict[str, Any]]:
    """Rows (cluster, name, row) of several runs merged by name, each saying its clusters and basis."""
    groups: dict[str, list[tuple[str, dict[str, Any]]]] = {}
    for cluster, name, row in named:
        groups.setdefault(name, []).append((cluster, row))
    out = []
    for name in sorted(groups):
        members = groups[name]
        clusters = sorted({c for c, _ in members})
        bases = {str(r.get("basis")) for _, r in members}
        # A merged row is measured only if every run's is; otherwise it says it is not (partly or modelled).
        out.append({name_key: name, **_add_figures(r for _, r in members),
                    "basis": bases.pop() if len(bases) == 1 else "partly measured",
                    "cluster": clusters[0] if len(clusters) == 1 else None, "clusters": clusters})
    return out


def _rows(payloads: list[tuple[dict[str, object], dict[str, Any]]], aggregate: str, key: str,
          name_key: str) -> list[dict[str, Any]]:
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


def _days(payloads: list[dict[str, Any]]) -> list[dict[str, Any]]:
    by_day: dict[str, list[dict[str, Any]]] = {}
    for payload in payloads:
        for day in payload["days"]:
            by_day.setdefault(day["day"], []).append(day)
    out = []
    for day in sorted(by_day):
        parts = by_day[day]
        energy = sum(p["energy_kwh"] for p in parts)
        idle = sum(p["energy_kwh"] * p["idle_share"] for p in parts)
        out.append({"day": day, "energy_kwh": round(energy, 3), "cost": round(sum(p["cost"] for p in parts), 2),
                    "co2_kg": round(sum(p["co2_kg"] for p in parts), 3),
                    "idle_share": round(idle / energy, 4) if energy > 0 else 0.0})
    return out


def _trend(payloads: list[dict[str, Any]]) -> list[dict[str, Any]]:
    by_period: dict[str, list[dict[str, Any]]] = {}
    for payload in payloads:
        for month in payload["trend"]:
            by_period.setdefault(str(month["period"]), []).append(month)
    return [{"period": period, **{k: v for k, v in _add_figures(by_period[period]).items()
                                  if k in ("gpu_hours", "energy_kwh", "cost", "co2_kg", "co2_market_kg")}}
            for period in sorted(by_period)]


def build_fleet_report(request: Any, chosen: list[dict[str, object]],
                       build_report: Callable[[Any], dict[str, Any]]) -> dict[str, Any]:
    """The report of several runs added up (`request` a monthly_main.ReportRequest; `build_report` bills one)."""
    if request.baseline_run is not None:
        raise BadInput("--baseline compares two runs: give one --run with it, not a fleet")
    per_run = "tenant" if request.aggregate == "cluster" else request.aggregate
    payloads = [(run, build_report(replace(request, run_id=int(str(run["run_id"])), aggregate=per_run)))
                for run in chosen]
    first = payloads[0][1]
    bare = [p for _, p in payloads]
    # Measured share of the fleet: each run's share weighted by its energy (a run with none metered adds nothing).
    weighted = [(p["measured_share"], p["totals"]["energy_kwh"]) for p in bare if p.get("measured_share") is not None]
    energy = sum(e for _, e in weighted)
    share = sum(s * e for s, e in weighted) / energy if energy > 0 else None
    pricing = dict(first["pricing"])
    if len({float(str(run["pue"])) for run in chosen}) > 1 and request.settings.pue is None:
        pricing["pue"] = {"value": None, "source": "the inventory's site.pue of each run when it was written"}
    payload: dict[str, Any] = {
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
    for key in ("totals", "idle"):  # the shape of a one-run report's
        payload[key] = {k: v for k, v in payload[key].items() if k in first[key]}
    return payload
