"""`greengpu report`: a month of a ledger's run as a bill (docs/REPORT.md).

Reads the run's hours (greengpu.accounting.ledger), prices them (greengpu.accounting.bill with the
report's settings), adds the savings against a baseline run and the trend over earlier months, and
hands the payload to a renderer (text, JSON, CSV, HTML).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from pathlib import Path

from greengpu.accounting.bill import IDLE, Bill, Pricing, make_bill, month_site_totals
from greengpu.accounting.carbon import market_parts
from greengpu.accounting.ledger import choose_run, month_bounds_s, month_input, site_hours, sleep_hours
from greengpu.accounting.ledger_url import Ledger, PostgresLedger, parse_ledger
from greengpu.accounting.ledger_v3 import basis_label, measured_share, node_bases
from greengpu.accounting.tariffs import FlatRate, HourlyRate, TimeOfUse
from greengpu.errors import BadInput
from greengpu.report.month_extra import add_month_extras, cloud_carbon_payload, queue_rows
from greengpu.report.month_types import (
    CarbonSource,
    Embodied,
    Figures,
    MarketCarbon,
    MonthReport,
    PricingShown,
    PueShown,
    ReportRequest,
    Savings,
    Tariff,
)
from greengpu.report.settings import ReportSettings

TREND_MONTHS = 12
SAVED_KEYS = ("energy_kwh", "cost", "cloud_cost", "total_cost", "co2_kg", "cloud_co2_kg", "co2_market_kg")
RECORDED = "as recorded in the ledger (the inventory's site figures when the run was written)"


def resolve_month(month: str, now: dt.datetime | None = None) -> str:
    """`last` is the previous UTC calendar month (for a scheduled report on the first); else YYYY-MM as given."""
    if month != "last":
        return month
    today = (now or dt.datetime.now(dt.UTC)).astimezone(dt.UTC)
    previous = today.replace(day=1) - dt.timedelta(days=1)
    return f"{previous.year:04d}-{previous.month:02d}"


def _earlier_months(month: str, count: int) -> list[tuple[str, float, float]]:
    """(label, start, end) of `count` months ending with `month`, oldest first, within supported years."""
    start_s, _ = month_bounds_s(month)
    out = []
    cursor = dt.datetime.fromtimestamp(start_s, dt.UTC)
    for _ in range(count):
        label = f"{cursor.year:04d}-{cursor.month:02d}"
        try:
            bounds = month_bounds_s(label)
        except BadInput:
            break
        out.append((label, *bounds))
        cursor = (cursor - dt.timedelta(days=1)).replace(day=1)
    return out[::-1]


def _run_pue(run: dict[str, object]) -> float:
    """The run's PUE as the ledger recorded it (a REAL column)."""
    value = run["pue"]
    if not isinstance(value, (int, float)):
        raise BadInput(f"ledger run {run['run_id']}: pue is not a number: {value!r}")
    return value


def _pricing(run: dict[str, object], settings: ReportSettings) -> Pricing:
    return Pricing(run_pue=float(_run_pue(run)), price=settings.price, carbon=settings.carbon,
                   pue=settings.pue, market=settings.market, embodied=settings.embodied)


def _uncovered(settings: ReportSettings, hours: list[float]) -> str | None:
    """Why an hourly series cannot price these hours (None: it can)."""
    for name, series in settings.series:
        first, last = series.times_s[0], series.times_s[-1] + 3600.0
        outside = [h for h in hours if not first <= h < last]
        if outside:
            def stamp(t: float) -> str:
                return dt.datetime.fromtimestamp(t, dt.UTC).strftime("%Y-%m-%dT%H:%MZ")
            return (f"{name}: covers {stamp(first)} to {stamp(last)}, not the hours from {stamp(min(outside))} to "
                    f"{stamp(max(outside) + 3600.0)} that the ledger has energy for")
    return None


def _pricing_payload(run: dict[str, object], settings: ReportSettings, bill: Bill, energy_kwh: float
                     ) -> PricingShown:
    price = settings.price
    tariff: Tariff
    if price is None:
        tariff = {"kind": "ledger", "source": RECORDED}
    else:
        kind = {FlatRate: "flat", HourlyRate: "hourly", TimeOfUse: "time-of-use"}.get(type(price), "other")
        tariff = {"kind": kind, "source": price.source}
        if isinstance(price, TimeOfUse):
            tariff.update({"timezone": price.timezone, "period_rates_per_kwh": list(price.period_rates),
                           "holidays": sorted(d.isoformat() for d in price.holidays)})
    tariff["fixed_charge_per_month"] = settings.fixed_charge_per_month
    location: CarbonSource = {"method": "location-based",
                              "source": settings.carbon.source if settings.carbon else RECORDED}
    market: MarketCarbon | None = None
    if settings.market is not None:
        market = {"method": "market-based", "source": settings.market.source,
                  "factor_g_per_kwh": bill.market_factor_g_per_kwh,
                  "parts": [{"instrument": p.instrument, "energy_kwh": round(p.energy_kwh, 3), "g_per_kwh": p.g_per_kwh,
                             "co2_kg": round(p.co2_kg, 3)} for p in market_parts(energy_kwh, settings.market)]}
    pue: PueShown = {"value": settings.pue if settings.pue is not None else _run_pue(run),
           "source": settings.pue_source if settings.pue is not None else f"ledger run {run['run_id']} (the "
           "inventory's site.pue)"}
    embodied: Embodied | None = None
    if settings.embodied is not None:
        e = settings.embodied
        embodied = {"method": "SCI amortisation: kg per GPU x GPU-hours / (lifetime years x 8760)",
                    "kg_per_gpu": e.kg_per_gpu, "lifetime_years": e.lifetime_years, "source": e.source}
    return {"tariff": tariff, "carbon_location": location, "carbon_market": market, "pue": pue, "embodied": embodied}


def _figures(bill: Bill, figures: dict[str, float]) -> Figures:
    out: Figures = dict(figures)
    # Total cost: the energy's and the cloud's, both conserved to the cent, so the sums add up too.
    out["total_cost"] = round(figures.get("cost", 0.0) + figures.get("cloud_cost", 0.0), 2)
    out.setdefault("chargeback", None)
    if "co2_market_kg" not in out:
        out["co2_market_kg"] = None
    if "embodied_kg" not in out:
        out["embodied_kg"] = None
    return out


def _rows(bill: Bill, basis: str, name_key: str, own: dict[str, str] | None = None) -> list[Figures]:
    """The bill's rows; `own`: a row's own basis where it has one (a node's), else the run's."""
    return [{name_key: row.name, **_figures(bill, row.figures), "efficiency": row.efficiency,
             "idle_share": row.idle_share, "jobs": row.jobs, "basis": (own or {}).get(row.name, basis)}
            for row in bill.rows]


_MONEY = ("cost", "cloud_cost", "total_cost")


def _with_total(figures: dict[str, float]) -> dict[str, float]:
    return {**figures, "total_cost": figures.get("cost", 0.0) + figures.get("cloud_cost", 0.0)}


def total_headline(saved: dict[str, float], currency: str) -> str:
    """The money line of a comparison: the total (energy plus cloud) first, and never a saving while it rose."""
    total, energy = saved.get("total_cost", 0.0), saved.get("cost", 0.0)
    if total > 0:
        return f"total cost (energy plus cloud) {total:,.2f} {currency} lower than the baseline"
    if total == 0:
        return "total cost (energy plus cloud) the same as the baseline"
    also = f", although the energy cost fell by {energy:,.2f} {currency}" if energy > 0 else ""
    return f"total cost (energy plus cloud) ROSE by {-total:,.2f} {currency} against the baseline{also}"


def _savings(this: Bill, base: Bill, base_run: dict[str, object], share_idle: str, currency: str) -> Savings:
    """Baseline less this run, per row (matched by name; a row missing on one side counts as zero) and in
    total. Both bills are rounded to their units first, so the savings add up exactly too."""
    keys = [k for k in SAVED_KEYS if k in this.keys or k == "total_cost"]
    mine = {r.name: _with_total(r.figures) for r in this.rows}
    theirs = {r.name: _with_total(r.figures) for r in base.rows}
    mine[IDLE], theirs[IDLE] = _with_total(this.idle), _with_total(base.idle)
    rows: list[dict[str, float | str]] = []
    for name in sorted(set(mine) | set(theirs)):
        saved = {k: round(theirs.get(name, {}).get(k, 0.0) - mine.get(name, {}).get(k, 0.0), 2 if k in _MONEY else 3)
                 for k in keys}
        if name == IDLE and not any(saved.values()):
            continue
        rows.append({"name": name, **saved})
    base_totals, this_totals = _with_total(base.totals), _with_total(this.totals)
    totals = {k: round(base_totals[k] - this_totals[k], 2 if k in _MONEY else 3) for k in keys}
    method = (f"counterfactual: run {base_run['run_id']} (policy {base_run['policy']}) of the same ledger, the same "
              f"month, priced with the same tariff, carbon and PUE; saving = baseline less this run, per "
              f"{this.aggregate} after idle sharing ({share_idle}); money counts energy and cloud together")
    return {"run_id": base_run["run_id"], "policy": base_run["policy"], "method": method,
            "headline": total_headline(totals, currency),
            "totals": totals, "baseline_totals": {k: round(base_totals[k], 2 if k in _MONEY else 3) for k in keys},
            "rows": rows}


def build_report(request: ReportRequest) -> MonthReport:
    """The report's JSON payload (keys in docs/REPORT.md)."""
    run = choose_run(request.ledger, request.run_id)
    run_id = int(str(run["run_id"]))
    month = request.month
    start_s, end_s = month_bounds_s(month)
    settings = request.settings
    pricing = _pricing(run, settings)
    data = add_month_extras(month_input(request.ledger, run_id, start_s, end_s), request.ledger, run_id, settings,
                            request.aggregate)
    problem = _uncovered(settings, [h.hour_start_s for h in data.site_hours if h.energy_kwh > 0])
    if problem:
        raise BadInput(problem)
    bill = make_bill(data, pricing, request.aggregate, request.share_idle)
    tenant_bill = bill if request.aggregate == "tenant" else make_bill(
        add_month_extras(month_input(request.ledger, run_id, start_s, end_s), request.ledger, run_id, settings,
                         "tenant"), pricing, "tenant", request.share_idle)
    # A run is measured only where every node-hour's energy was read from counters (ledger schema 3).
    share = measured_share(request.ledger, run_id, start_s, end_s)
    basis = basis_label(share)
    totals = _figures(bill, bill.totals)
    installed = bill.totals["gpu_hours"]
    totals["efficiency"] = round(bill.totals["gpu_hours_allocated"] / installed, 4) if installed > 0 else None
    totals["idle_share"] = round(bill.totals["idle_energy_kwh"] / bill.totals["energy_kwh"], 4) \
        if bill.totals["energy_kwh"] > 0 else None
    jobs = {state: sum(r.jobs.get(state, 0) for r in tenant_bill.rows) for state in ("ran", "ended", "preempted",
                                                                                       "running")}
    payload: MonthReport = {
        "period": month, "run_id": run_id, "policy": str(run["policy"]), "kind": str(run["kind"]),
        "source": str(run["source"]),
        "basis": basis, "measured_share": None if share is None else round(share, 4),
        "currency": settings.currency or str(run["currency"]), "aggregate": request.aggregate,
        "share_idle": bill.share_idle, "country_iso_code": settings.country_iso_code, "region": settings.region,
        "totals": totals, "idle": _figures(bill, bill.idle), "tenants": _rows(tenant_bill, basis, "tenant"),
        "rows": _rows(bill, basis, "name", node_bases(request.ledger, run_id, start_s, end_s)
                      if request.aggregate == "node" else None), "jobs": jobs,
        "node_sleep_hours": round(sleep_hours(request.ledger, run_id, start_s, end_s), 3),
        "pricing": _pricing_payload(run, settings, bill, bill.totals["energy_kwh"]),
        "days": [{"day": dt.datetime.fromtimestamp(d["day_start_s"], dt.UTC).date().isoformat(),
                  **{k: v for k, v in d.items() if k != "day_start_s"}} for d in bill.days],
        "baseline": None, "queue": queue_rows(request.ledger, run_id, start_s, end_s),
    }
    payload["pricing"]["carbon_cloud"] = cloud_carbon_payload(request.ledger, run_id, start_s, end_s, settings)
    if request.baseline_run is not None:
        base_run = choose_run(request.ledger, request.baseline_run, "--baseline")
        if base_run["run_id"] == run_id:
            raise BadInput(f"--baseline: run {run_id} is the run reported; name another run of {request.ledger}")
        base_pricing = _pricing(base_run, settings)
        base_data = add_month_extras(month_input(request.ledger, int(str(base_run["run_id"])), start_s, end_s),
                                     request.ledger, int(str(base_run["run_id"])), settings, request.aggregate)
        problem = _uncovered(settings, [h.hour_start_s for h in base_data.site_hours if h.energy_kwh > 0])
        if problem:
            raise BadInput(problem)
        base_bill = make_bill(base_data, base_pricing, request.aggregate, request.share_idle)
        payload["baseline"] = _savings(bill, base_bill, base_run, bill.share_idle, payload["currency"])
    months = _earlier_months(month, TREND_MONTHS)
    history = site_hours(request.ledger, run_id, months[0][1], end_s)
    priced_months = [m for m in months if _uncovered(settings, [h.hour_start_s for h in history
                                                                if m[1] <= h.hour_start_s < m[2]
                                                                and h.energy_kwh > 0]) is None]
    payload["trend"] = month_site_totals(history, pricing, priced_months)
    return payload


def report_main(ledger_file: str, month: str, run_id: int | None | tuple[int, ...], output_format: str,
                out_file: str | None, aggregate: str, share_idle: str, baseline_run: int | None,
                settings_file: str | None, note: Callable[[str], None] = lambda message: None,
                cluster: str | None = None, fleet: bool = False) -> None:
    """`greengpu report`: check the flags, build the payload, write it to stdout or `out_file`; `note`: a remark
    for the person at the terminal (a month the run has no hours in). Several runs (`--run` repeated,
    `--cluster-name`, `--fleet`, `--aggregate cluster`) are billed together (greengpu.report.fleet)."""
    import click

    from greengpu.report.fleet import build_fleet_report, select_runs
    from greengpu.report.monthly import render
    from greengpu.report.settings import read_settings

    ledger = parse_ledger(ledger_file)
    run_ids = run_id if isinstance(run_id, tuple) else (() if run_id is None else (run_id,))
    month = resolve_month(month)
    if out_file is not None:
        # `{month}` in --out: one file per month from the same command line (a cron line, a systemd timer).
        out_file = out_file.replace("{month}", month)
        target = Path(out_file)
        if not isinstance(ledger, PostgresLedger) and target.resolve() == ledger.resolve():
            raise BadInput(f"--out: {out_file} is the ledger itself; a report never writes to its input")
        if settings_file and target.resolve() == Path(settings_file).resolve():
            raise BadInput(f"--out: {out_file} is the settings file; a report never writes to its input")
        if target.is_dir():
            raise BadInput(f"--out: {out_file} is a directory")
        if not target.parent.is_dir():
            raise BadInput(f"--out: folder {target.parent} does not exist")
    settings = read_settings(settings_file) if settings_file else ReportSettings()
    request = ReportRequest(ledger=ledger, month=month, run_id=run_ids[0] if run_ids else None,
                            aggregate=aggregate, share_idle=share_idle, baseline_run=baseline_run, settings=settings)
    if baseline_run is not None and (len(run_ids) > 1 or cluster is not None or fleet or aggregate == "cluster"):
        raise BadInput("--baseline compares two runs: give one --run with it, not a fleet")
    chosen = select_runs(ledger, run_ids, cluster, fleet, aggregate, month)
    payload = build_report(request) if chosen is None else build_fleet_report(request, chosen, build_report)
    if not payload["totals"]["gpu_hours"] and chosen is None:
        note(_empty_month(ledger, int(str(payload["run_id"])), month))
    elif not payload["totals"]["gpu_hours"]:
        note(f"runs {', '.join(map(str, payload['runs']))} of {ledger} have no hours in {month}: the bill is empty")
    text = render(payload, output_format)
    if out_file is None:
        click.echo(text, nl=not text.endswith("\n"))
        return
    try:
        Path(out_file).write_text(text, encoding="utf-8")
    except OSError as error:
        raise BadInput(f"--out: cannot write {out_file}: {error.strerror}") from None


def _empty_month(ledger: Ledger, run_id: int, month: str) -> str:
    """What to say of a month the run has no hours in (it bills nothing): the hours it has, so that a mistyped
    month is not taken for an idle one."""
    from greengpu.accounting.ledger import hours_span_s

    span = hours_span_s(ledger, run_id)
    if span is None:
        return f"run {run_id} of {ledger} has no metered hours: the bill for {month} is empty"
    first, last = (dt.datetime.fromtimestamp(s, dt.UTC).strftime("%Y-%m-%d %H:00") for s in span)
    return (f"run {run_id} of {ledger} has no hours in {month} (its hours run from {first} to {last} UTC): "
            "the bill is empty")


SCHEDULED_FORMATS = ("html", "csv", "json")


def write_scheduled_reports(ledger: Ledger, run_id: int | None, folder: Path, now: dt.datetime,
                            settings: ReportSettings | None = None,
                            formats: tuple[str, ...] = SCHEDULED_FORMATS) -> list[Path]:
    """Last month's report in each of `formats`, written to `folder` as greengpu-YYYY-MM.FORMAT: what the
    systemd timer runs on the first of each month, and what a daemon that meters into the ledger calls then.
    Each file is written whole to a temporary name first, so a reader never sees half a report."""
    from greengpu.report.monthly import render

    month = resolve_month("last", now)
    payload = build_report(ReportRequest(ledger=ledger, month=month, run_id=run_id,
                                         settings=settings or ReportSettings()))
    written = []
    for output_format in formats:
        target = folder / f"greengpu-{month}.{output_format}"
        partial = target.with_name(f".{target.name}.partial")
        try:
            partial.write_text(render(payload, output_format), encoding="utf-8")
            partial.replace(target)
        except OSError as error:
            raise BadInput(f"{target}: cannot write the report: {error.strerror}") from None
        written.append(target)
    return written
