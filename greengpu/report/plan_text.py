"""`greengpu plan`'s terminal report (rich tables) from the plan's JSON payload.

The sentences a planner reads first are built by the functions below (`headline`, `growth_line`,
`bands_line`, `gate_line`), which the HTML report shares: every rate carries its unit, every GPU figure
one format (`gpus`), a clamped trend and a passed order-by date are said as such.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, TypedDict

from greengpu.forecast.plan_types import (
    GateSummary,
    InputsSummary,
    ModelPoolRow,
    PlanPayload,
    Savings,
    ScenarioRow,
)

if TYPE_CHECKING:  # rich is imported where a report is printed
    from rich.console import Console
    from rich.table import Table

SCALE_WORDS = {"additive": "demand itself", "sqrt": "the square root of demand", "log1p": "the log of demand"}


def gpus(value: float | None) -> str:
    """A GPU figure in the report's one format: thousands grouped, one decimal at most, none when whole."""
    if value is None:
        return "n/a"
    text = f"{float(value):,.1f}"
    return text[:-2] if text.endswith(".0") else text


def signed(value: float) -> str:
    """A change in GPUs with its sign, in the same format: +64, -284, +0."""
    return ("-" if value < 0 else "+") + gpus(abs(value))


def headline(payload: PlanPayload) -> str:
    """Installed against needed, run-out and when to order, in one or two sentences."""
    capacity = payload["capacity"]
    installed, required, horizon = capacity["installed_gpus"], capacity["required_gpus"], capacity["horizon_days"]
    lead = capacity["lead_time_days"]
    if installed is None:
        return (f"Capacity: {gpus(required)} GPUs needed within {horizon} days; installed unknown (give --cluster to "
                "get a run-out and an order-by date).")
    if capacity["run_out_date"] is None:
        return (f"Capacity: the {gpus(installed)} GPUs installed cover the next {horizon} days (at most "
                f"{gpus(required)} needed).")
    if capacity.get("already_short"):
        text = (f"Capacity: already short. {gpus(installed)} GPUs installed; {gpus(capacity['required_now_gpus'])} "
                f"needed from the plan's first day ({capacity['plan_start_date']}) and {gpus(required)} within "
                f"{horizon} days.")
    else:
        text = (f"Capacity: runs out {capacity['run_out_date']}: {gpus(installed)} GPUs installed, {gpus(required)} "
                f"needed within {horizon} days.")
    if capacity.get("late_days"):
        late = capacity["late_days"]
        return (f"{text} Order now: with a lead time of {lead} days they arrive {capacity['arrival_date']}, "
                f"{late} day{'s' if late != 1 else ''} after they are needed.")
    return f"{text} Order by {capacity['order_by_date']} (a lead time of {lead} days)."


def growth_line(payload: PlanPayload) -> str:
    """Where daily peaks stand and which growth the plan uses, with units and what was clamped."""
    growth, inputs = payload["growth"], payload["inputs"]
    window = f"{growth['window_days']:g}"
    per_day, measured_day = growth["peak_growth_gpus_per_day"], growth["measured_growth_gpus_per_day"]
    text = f"Daily peak demand: {gpus(growth['peak_level_gpus'])} GPUs now (median of the last 7 days); "
    if inputs["growth_gpus_per_month"] is not None:
        text += (f"growth as given, {signed(inputs['used_growth_gpus_per_month'])} GPUs/month "
                 f"({per_day:+.2f} GPUs/day; measured {signed(inputs['measured_growth_gpus_per_month'])} GPUs/month "
                 f"over the last {window} days)")
    elif per_day != measured_day:
        text += (f"planned flat: peaks fell {-measured_day:.2f} GPUs/day "
                 f"({gpus(-inputs['measured_growth_gpus_per_month'])} GPUs/month, Theil-Sen over the last {window} "
                 "days) and the plan does not count on a fall")
    else:
        text += (f"growing {per_day:+.2f} GPUs/day ({signed(inputs['used_growth_gpus_per_month'])} GPUs/month, "
                 f"Theil-Sen over the last {window} days)")
    daily = payload["forecast"].get("daily") or {}
    if daily.get("shipped_candidate"):
        text += f"; the long-horizon model {daily['model']} plans the peaks instead (below)"
    return f"{text}; the 95% upper peak adds {gpus(growth['upper_offset_gpus'])} GPUs."


def bands_line(payload: PlanPayload) -> str:
    """The next 24 hours: the forecast and the range of its calibrated bands over the day."""
    ahead, forecast = payload["day_ahead"], payload["forecast"]
    if not ahead:
        return "Next 24 hours: no forecast."
    bands = forecast.get("bands") or {}
    scale = SCALE_WORDS.get(bands.get("scale", "additive"), "demand itself")
    low = {80: min(row["lower_80"] for row in ahead), 95: min(row["lower_95"] for row in ahead)}
    high = {80: max(row["upper_80"] for row in ahead), 95: max(row["upper_95"] for row in ahead)}
    coverage = ("n/a" if forecast["coverage_80"] is None else f"{forecast['coverage_80']:.0%}",
                "n/a" if forecast["coverage_95"] is None else f"{forecast['coverage_95']:.0%}")
    return (f"Next 24 hours ({forecast['model']}): {gpus(ahead[0]['gpus'])} GPUs in the first hour; over the day "
            f"the 80% band spans {gpus(low[80])}-{gpus(high[80])} GPUs and the 95% band "
            f"{gpus(low[95])}-{gpus(high[95])} (calibrated on {scale}; they covered {coverage[0]} and "
            f"{coverage[1]} of backtest hours).")


def gate_line(gate: GateSummary | None) -> str:
    """The gate's power over the origins it judged: what it takes to ship, what it would catch."""
    if not gate or "power" not in gate:
        return ""
    text = gate["power"]["text"]
    return f"Gate power: {text[0].lower()}{text[1:]}."


def render_text(payload: PlanPayload, console: Console | None = None) -> None:
    """The terminal report (rich tables)."""
    from rich.console import Console
    from rich.table import Table

    console = console or Console()
    forecast, capacity = payload["forecast"], payload["capacity"]
    history = payload["history"]
    console.print(f"[bold]greengpu plan[/bold]: {history['hours']:,} hours of demand ({history['demand']}) from "
                  f"{history['source']} ({history['first'][:10]} to {history['last'][:10]})", markup=True)
    console.print(f"[bold]{headline(payload)}[/bold]")
    models = Table(title=f"Day-ahead backtest, {forecast['origins']:,} origins (MASE, lower is better)")
    models.add_column("model")
    models.add_column("MASE", justify="right")
    for name, mase in forecast["models"].items():
        mark = " (shipped)" if name == forecast["model"] else ""
        models.add_row(name + mark, f"{mase:.3f}" if mase is not None else "n/a")
    console.print(models)
    console.print(forecast["reason"])
    gate = forecast.get("gate")
    if gate and gate.get("to_change"):
        console.print(f"What would change it: {gate['to_change']}.")
    if gate_line(gate):
        console.print(gate_line(gate))
    console.print(bands_line(payload))
    console.print(growth_line(payload))
    console.print(f"Long horizon: {forecast['daily']['note']}.")
    console.print(_inputs_table(payload["inputs"], payload["growth"]))
    months = Table(title=f"GPUs needed (target utilisation {capacity['target_utilisation']:.0%}, "
                         f"+{gpus(capacity['redundancy_gpus'])} spare, "
                         f"P(wait) <= {capacity['max_wait_probability']:.0%})")
    for column in ("month", "peak", "upper peak", "required"):
        months.add_column(column, justify="right")
    for month in payload["months"]:
        months.add_row(month["month"], gpus(month["peak_gpus"]), gpus(month["upper_peak_gpus"]),
                       gpus(month["required_gpus"]))
    console.print(months)
    console.print(_scenario_table(payload["scenarios"], capacity["horizon_days"]))
    if payload.get("gpu_models"):
        console.print(_model_table(payload["gpu_models"]))
    if "savings" in payload:
        saved = payload["savings"]["saved"]
        console.print(savings_line(saved))
        console.print(_tenant_table(payload["savings"]))
    for flag in payload["flags"]:
        console.print(f"[yellow]note:[/yellow] {flag}")
    if history.get("credit"):
        console.print(f"Data: {history['credit']}", markup=False)


def _inputs_table(inputs: InputsSummary, growth: dict[str, float]) -> Table:
    from rich.table import Table

    table = Table(title="Planning inputs beyond history")
    table.add_column("input")
    table.add_column("value")
    table.add_row("growth of daily peaks", growth_text(inputs, growth))
    for gain in inputs["efficiency"]:
        table.add_row(f"efficiency: {gain['name']}", f"{gain['change']:+.0%} GPU-hours from {gain['start']}")
    for project in inputs["projects"]:
        until = f" to {project['end']}" if project["end"] else ""
        table.add_row(f"project: {project['name']}", f"{signed(project['gpus'])} GPUs from {project['start']}{until}")
    table.add_row("buffer factor", f"x {inputs['buffer_factor']:g} on the upper peak")
    return table


def _scenario_table(scenarios: list[ScenarioRow], horizon_days: int) -> Table:
    from rich.table import Table

    utilisations = sorted({row["target_utilisation"] for row in scenarios})
    table = Table(title=f"Scenarios: GPUs required within {horizon_days} days (run-out date)")
    table.add_column("peak quantile")
    for utilisation in utilisations:
        table.add_column(f"{utilisation:.0%} utilisation", justify="right")
    for quantile in sorted({row["quantile"] for row in scenarios}):
        cells = []
        for utilisation in utilisations:
            row = next(r for r in scenarios if r["quantile"] == quantile and r["target_utilisation"] == utilisation)
            cells.append(f"{gpus(row['required_gpus'])} ({row['run_out_date'] or 'ok'})")
        table.add_row(f"{quantile:.0%}", *cells)
    return table


def growth_text(inputs: InputsSummary, growth: dict[str, float]) -> str:
    """What growth the plan used, and where it came from (a rate, per month, with the window it was measured on)."""
    used, measured = inputs["used_growth_gpus_per_month"], inputs["measured_growth_gpus_per_month"]
    window = f"the last {growth['window_days']:g} days"
    if inputs["growth_gpus_per_month"] is not None:
        return f"{signed(used)} GPUs/month, as given (measured: {signed(measured)} GPUs/month over {window})"
    if used != measured:
        return (f"{signed(used)} GPUs/month: planned flat (measured: {signed(measured)} GPUs/month over {window}; "
                "a fall is not planned)")
    return f"{signed(used)} GPUs/month (measured over {window})"


def _less(amount: float, unit: str) -> str:
    """'12 kWh less' or '3 kWh MORE': a figure that rose is never shown as a saving."""
    if round(amount) == 0:
        return f"the same {unit or 'cost'} (within 1)"
    return f"{abs(amount):,.0f} {unit} {'less' if amount > 0 else 'MORE'}".replace("  ", " ")


def savings_line(saved: dict[str, float]) -> str:
    """The savings headline of `plan`: total cost (energy plus cloud, as the replay counts it) first."""
    return (f"greengpu default vs always-on on this trace: total cost (energy plus cloud) {_less(saved['cost'], '')}"
            f", {_less(saved['energy_kwh'], 'kWh')}, {_less(saved['co2_kg'], 'kg CO2')}.")


class TenantSavings(TypedDict):
    """One tenant's (or idle's) cost and CO2 under always-on and default, and what default saves."""
    tenant: str
    gpu_hours: float
    always_on_cost: float
    default_cost: float
    saved_cost: float
    saved_co2_kg: float


def tenant_rows(savings: Savings) -> list[TenantSavings]:
    """Per tenant (and idle): cost and CO2 under always-on and default, and what default saves."""
    base, ours = savings["always-on"]["tenants"], savings["default"]["tenants"]
    rows: list[TenantSavings] = []
    for tenant in sorted(set(base) | set(ours), key=lambda t: (t == "(idle)", t)):
        zero = {"energy_kwh": 0.0, "cost": 0.0, "co2_kg": 0.0, "gpu_hours": 0.0}
        a, b = base.get(tenant, zero), ours.get(tenant, zero)
        rows.append({"tenant": tenant, "gpu_hours": b["gpu_hours"], "always_on_cost": a["cost"],
                     "default_cost": b["cost"], "saved_cost": a["cost"] - b["cost"],
                     "saved_co2_kg": a["co2_kg"] - b["co2_kg"]})
    return rows


def _tenant_table(savings: Savings) -> Table:
    from rich.table import Table

    table = Table(title="Cost per tenant (jobs' own draw and host share; idle: what no job used)")
    for column in ("tenant", "GPU-hours", "always-on cost", "default cost", "saved", "CO2 saved kg"):
        table.add_column(column, justify="left" if column == "tenant" else "right")
    for row in tenant_rows(savings):
        table.add_row(row["tenant"], f"{row['gpu_hours']:,.0f}", f"{row['always_on_cost']:,.0f}",
                      f"{row['default_cost']:,.0f}", f"{row['saved_cost']:,.0f}", f"{row['saved_co2_kg']:,.0f}")
    return table


def _model_table(rows: list[ModelPoolRow]) -> Table:
    from rich.table import Table

    table = Table(title="Per GPU model (jobs pinned to one model; the cluster's planning inputs not split)")
    for column in ("GPU model", "installed", "peak", "upper rise", "required", "run out"):
        table.add_column(column, justify="left" if column == "GPU model" else "right")
    for row in rows:
        required = "shares every pool" if row["required_gpus"] is None else gpus(row["required_gpus"])
        installed = "-" if row["installed_gpus"] is None else gpus(row["installed_gpus"])
        table.add_row(row["gpu_model"], installed, gpus(row["peak_gpus"]), signed(row["upper_offset_gpus"]),
                      required, row["run_out_date"] or "-")
    return table
