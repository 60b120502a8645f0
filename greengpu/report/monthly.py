"""Render a monthly report (greengpu.report.monthly_main.build_report's payload) as text, JSON or CSV.

The CSV keeps the billing columns first (period, the row's name, gpu_hours, energy_kwh, cost, co2_kg,
currency) and adds the columns a CodeCarbon user knows (duration, energy_consumed, emissions,
emissions_rate, country_iso_code, region, pue) next to them. Numbers are written exactly as in the JSON,
so the CSV reads back to the same figures.
"""

from __future__ import annotations

import csv
import io
import json

from greengpu.json_types import JsonValue
from greengpu.report.month_rows import all_rows, month_seconds
from greengpu.report.month_types import CloudCarbon, FigureValue, MonthReport, QueueFigures, maybe_number, number

FORMATS = ("text", "json", "csv", "html")
CODECARBON = ("duration", "energy_consumed", "gpu_energy", "emissions", "emissions_rate", "country_iso_code",
              "region", "pue")
EXTRA = ("kind", "basis", "gpu_hours_allocated", "efficiency", "gpu_energy_kwh", "idle_energy_kwh", "idle_share",
         "co2_market_kg", "embodied_kg", "jobs_ran", "jobs_ended", "jobs_preempted", "jobs_running",
         "saved_energy_kwh", "saved_cost", "saved_co2_kg", "saved_co2_market_kg", "cloud_node_hours", "cloud_cost",
         "cloud_co2_kg", "total_cost", "chargeback", "saved_cloud_cost", "saved_total_cost")
QUEUE = ("jobs_started", "wait_p50_s", "wait_p95_s", "failure_rate", "checkpoint_mean_s")


def _cell(value: FigureValue | JsonValue) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return repr(value)
    return str(value)


def _saved(payload: MonthReport) -> dict[str, dict[str, float | str]]:
    baseline = payload.get("baseline")
    if not baseline:
        return {}
    out = {str(r["name"]): r for r in baseline["rows"]}
    out["TOTAL"] = dict(baseline["totals"])
    return out


def _queue_by_name(payload: MonthReport) -> dict[str, QueueFigures]:
    """The queue figures for the CSV: on each tenant's row (rows by tenant) and on TOTAL."""
    queue = payload.get("queue")
    if not queue:
        return {}
    out: dict[str, QueueFigures] = {"TOTAL": queue["total"]}
    if payload["aggregate"] == "tenant":
        out.update({q["tenant"]: q for q in queue["tenants"]})
    return out


def render_csv(payload: MonthReport) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(["period", payload["aggregate"], "gpu_hours", "energy_kwh", "cost", "co2_kg", "currency",
                     *CODECARBON, *EXTRA, *QUEUE])
    duration = month_seconds(payload["period"])
    saved = _saved(payload)
    pue = payload["pricing"]["pue"]["value"]
    queue = _queue_by_name(payload)
    for kind, name, figures in all_rows(payload):
        jobs = figures.get("jobs")
        jobs = jobs if isinstance(jobs, dict) else {}
        savings = saved.get(name, {})
        emissions = number(figures, "co2_kg")
        writer.writerow([payload["period"], name, *(_cell(figures[k]) for k in ("gpu_hours", "energy_kwh", "cost",
                                                                                   "co2_kg")),
                         payload["currency"], duration, _cell(figures["energy_kwh"]), _cell(figures["gpu_energy_kwh"]),
                         _cell(emissions), _cell(emissions / duration), payload["country_iso_code"], payload["region"],
                         _cell(pue), kind, figures.get("basis") or payload["basis"],
                         _cell(figures["gpu_hours_allocated"]), _cell(figures.get("efficiency")),
                         _cell(figures["gpu_energy_kwh"]), _cell(figures["idle_energy_kwh"]),
                         _cell(figures.get("idle_share")), _cell(figures["co2_market_kg"]),
                         _cell(figures["embodied_kg"]),
                         *(_cell(jobs.get(s)) for s in ("ran", "ended", "preempted", "running")),
                         *(_cell(savings.get(k)) for k in ("energy_kwh", "cost", "co2_kg", "co2_market_kg")),
                         *(_cell(figures.get(k)) for k in ("cloud_node_hours", "cloud_cost", "cloud_co2_kg",
                                                           "total_cost", "chargeback")),
                         *(_cell(savings.get(k)) for k in ("cloud_cost", "total_cost")),
                         *_queue_cells(queue.get(name))])
    return buffer.getvalue()


def _queue_cells(row: QueueFigures | None) -> list[str]:
    """The QUEUE columns of a row (empty without queue figures)."""
    if row is None:
        return [""] * len(QUEUE)
    return [_cell(v) for v in (row["jobs_started"], row["wait_p50_s"], row["wait_p95_s"], row["failure_rate"],
                               row["checkpoint_mean_s"])]


def _num(value: float | None, digits: int) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.0%}"


def _cloud_source(cloud: CloudCarbon | None) -> str:
    if not cloud:
        return "as recorded in the ledger"
    parts = [f"{cloud['source']} ({', '.join(cloud['g_per_kwh_by_region'])})"] if cloud["source"] else []
    if cloud["at_site_intensity"]:
        parts.append(f"at the site's intensity (no series): {', '.join(cloud['at_site_intensity'])}")
    return "; ".join(parts) or "no cloud rows"


def render_text(payload: MonthReport) -> str:
    currency = payload["currency"]
    pricing = payload["pricing"]
    market = pricing["carbon_market"]
    runs = f"runs {', '.join(map(str, payload['runs']))}" if payload.get("runs") else f"run {payload['run_id']}"
    pue = pricing["pue"]["value"]
    lines = [f"greengpu report {payload['period']}  ({runs}, policy {payload['policy']}, "
             f"{payload['basis']}; rows by {payload['aggregate']}, idle shared: {payload['share_idle']})",
             f"tariff: {pricing['tariff']['kind']}, {pricing['tariff']['source']}",
             f"carbon, location-based: {pricing['carbon_location']['source']}",
             f"carbon, market-based: {market['source'] if market else 'not configured'}",
             f"carbon, cloud: {_cloud_source(pricing.get('carbon_cloud'))}",
             f"PUE {pue if pue is not None else 'of each run'}: {pricing['pue']['source']}"]
    if pricing["embodied"]:
        lines.append(f"embodied: {pricing['embodied']['method']}; {pricing['embodied']['source']}")
    head = (f"{payload['aggregate']:<20} {'GPU-h':>11} {'eff':>5} {'kWh':>11} {'cost ' + currency:>12} "
            f"{'CO2 loc kg':>11} {'CO2 mkt kg':>11} {'idle':>5} {'cloud ' + currency:>12} {'cloud CO2 kg':>12} "
            f"{'total ' + currency:>12} {'chargeback':>11}")
    lines += [head]
    for kind, name, figures in all_rows(payload):
        if kind == "total":
            lines.append("-" * len(head))
        lines.append(f"{name[:20]:<20} {figures['gpu_hours']:>11,.1f} {_pct(maybe_number(figures, 'efficiency')):>5} "
                     f"{figures['energy_kwh']:>11,.1f} {figures['cost']:>12,.2f} {figures['co2_kg']:>11,.3f} "
                     f"{_num(maybe_number(figures, 'co2_market_kg'), 3):>11} "
                     f"{_pct(maybe_number(figures, 'idle_share')):>5} "
                     f"{figures['cloud_cost']:>12,.2f} {figures['cloud_co2_kg']:>12,.3f} "
                     f"{figures['total_cost']:>12,.2f} "
                     f"{_num(maybe_number(figures, 'chargeback'), 2):>11}")
    jobs = payload["jobs"]
    lines.append(f"jobs: {jobs['ran']} ran, {jobs['ended']} ended, {jobs['preempted']} preempted, "
                 f"{jobs['running']} running at the month's end; node sleep: {payload['node_sleep_hours']:,.1f} "
                 "node-hours")
    if pricing["tariff"]["fixed_charge_per_month"]:
        lines.append(f"fixed charge (not in the rows): {pricing['tariff']['fixed_charge_per_month']:,.2f} {currency}")
    if payload["totals"]["embodied_kg"] is not None:
        lines.append(f"embodied: {payload['totals']['embodied_kg']:,.3f} kg CO2e")
    baseline = payload.get("baseline")
    if baseline:
        lines.append(f"savings against run {baseline['run_id']} ({baseline['policy']}): {baseline['method']}")
        lines.append(f"  {baseline['headline']}")
        total: dict[str, float | str] = {"name": "TOTAL", **baseline["totals"]}
        for saved in [*baseline["rows"], total]:
            lines.append(f"  {str(saved['name'])[:20]:<20} {saved['energy_kwh']:>11,.1f} kWh "
                         f"{saved['cost']:>12,.2f} {currency} energy {saved['cloud_cost']:>12,.2f} {currency} cloud "
                         f"{saved['total_cost']:>12,.2f} {currency} total {saved['co2_kg']:>11,.3f} kg")
    queue = payload.get("queue")
    if queue and queue["total"]["jobs_started"]:
        lines.append("queue (jobs that first started this month): wait P50 / P95, failure rate, mean checkpoint")
        queue_rows: list[tuple[str, QueueFigures]] = [*((q["tenant"], q) for q in queue["tenants"]),
                                                      ("TOTAL", queue["total"])]
        for name, counts in queue_rows:
            lines.append(f"  {name[:20]:<20} {counts['jobs_started']:>6} jobs {_num(counts['wait_p50_s'], 0):>9} s "
                         f"{_num(counts['wait_p95_s'], 0):>9} s {_pct(counts['failure_rate']):>5} "
                         f"{_num(counts['checkpoint_mean_s'], 0):>7} s")
    if len(payload["trend"]) > 1:
        lines.append("trend: " + "; ".join(f"{t['period']} {t['energy_kwh']:,.0f} kWh {t['cost']:,.2f} {currency} "
                                           f"{t['co2_kg']:,.0f} kg" for t in payload["trend"]))
    return "\n".join(lines) + "\n"


def render(payload: MonthReport, output_format: str) -> str:
    """The report as `text` (a table), `json` (docs/REPORT.md), `csv` or `html` (a self-contained page)."""
    if output_format == "json":
        return json.dumps(payload, allow_nan=False) + "\n"
    if output_format == "csv":
        return render_csv(payload)
    if output_format == "html":
        from greengpu.report.monthly_html import render_month_html

        return render_month_html(payload)
    return render_text(payload)
