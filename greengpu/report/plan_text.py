"""`greengpu plan`'s terminal report (rich tables) from the plan's JSON payload."""

from __future__ import annotations

from typing import Any


def render_text(payload: dict[str, Any]) -> None:
    """The terminal report (rich tables)."""
    from rich.console import Console
    from rich.table import Table

    console = Console()
    forecast, capacity, growth = payload["forecast"], payload["capacity"], payload["growth"]
    history = payload["history"]
    console.print(f"[bold]greengpu plan[/bold]: {history['hours']:,} hours of demand ({history['demand']}) from "
                  f"{history['source']} "
                  f"({history['first'][:10]} to {history['last'][:10]})")
    models = Table(title=f"Day-ahead backtest, {forecast['origins']} origins (MASE, lower is better)")
    models.add_column("model")
    models.add_column("MASE", justify="right")
    for name, mase in forecast["models"].items():
        mark = " (shipped)" if name == forecast["model"] else ""
        models.add_row(name + mark, f"{mase:.3f}" if mase is not None else "n/a")
    console.print(models)
    console.print(forecast["reason"])
    if forecast.get("gate") and forecast["gate"].get("to_change"):
        console.print(f"What would change it: {forecast['gate']['to_change']}.")
    console.print(f"Calibrated bands cover {forecast['coverage_80']:.0%} (80%) and {forecast['coverage_95']:.0%} "
                  f"(95%) of backtest hours.")
    console.print(f"Daily peak demand now {growth['peak_level_gpus']:g} GPUs, growing "
                  f"{growth['peak_growth_gpus_per_day']:g} GPUs/day (Theil-Sen over {growth['window_days']:g} days); "
                  f"upper band +{growth['upper_offset_gpus']:g} GPUs.")
    console.print(f"Long horizon: {forecast['daily']['note']}.")
    console.print(_inputs_table(payload["inputs"], growth))
    months = Table(title=f"GPUs needed (target utilisation {capacity['target_utilisation']:.0%}, "
                         f"+{capacity['redundancy_gpus']} spare, P(wait) <= {capacity['max_wait_probability']:.0%})")
    for column in ("month", "peak", "upper peak", "required"):
        months.add_column(column, justify="right")
    for month in payload["months"]:
        months.add_row(month["month"], f"{month['peak_gpus']:g}", f"{month['upper_peak_gpus']:g}",
                       str(month["required_gpus"]))
    console.print(months)
    installed = capacity["installed_gpus"]
    console.print(f"Installed: {installed if installed is not None else 'unknown (give --cluster)'}; required "
                  f"within {capacity['horizon_days']} days: {capacity['required_gpus']}; run out: "
                  f"{capacity['run_out_date'] or 'not within the horizon'}; order by: "
                  f"{capacity['order_by_date'] or '-'} (lead time {capacity['lead_time_days']} days).")
    console.print(_scenario_table(payload["scenarios"], capacity))
    if payload.get("gpu_models"):
        console.print(_model_table(payload["gpu_models"]))
    if "savings" in payload:
        saved = payload["savings"]["saved"]
        console.print(f"greengpu default vs always-on on this trace: {saved['energy_kwh']:,.0f} kWh, "
                      f"{saved['cost']:,.0f} in cost and {saved['co2_kg']:,.0f} kg CO2 saved.")
        console.print(_tenant_table(payload["savings"]))
    for flag in payload["flags"]:
        console.print(f"[yellow]note:[/yellow] {flag}")
    if history.get("credit"):
        console.print(f"Data: {history['credit']}", markup=False)


def _inputs_table(inputs: dict[str, Any], growth: dict[str, Any]) -> Any:
    from rich.table import Table

    table = Table(title="Planning inputs beyond history")
    table.add_column("input")
    table.add_column("value")
    table.add_row("growth of daily peaks", growth_text(inputs, growth))
    for gain in inputs["efficiency"]:
        table.add_row(f"efficiency: {gain['name']}", f"{gain['change']:+.0%} GPU-hours from {gain['start']}")
    for project in inputs["projects"]:
        until = f" to {project['end']}" if project["end"] else ""
        table.add_row(f"project: {project['name']}", f"+{project['gpus']:g} GPUs from {project['start']}{until}")
    table.add_row("buffer factor", f"x {inputs['buffer_factor']:g} on the upper peak")
    return table


def _scenario_table(scenarios: list[dict[str, Any]], capacity: dict[str, Any]) -> Any:
    from rich.table import Table

    utilisations = sorted({row["target_utilisation"] for row in scenarios})
    table = Table(title=f"Scenarios: GPUs required within {capacity['horizon_days']} days (run-out date)")
    table.add_column("peak quantile")
    for utilisation in utilisations:
        table.add_column(f"{utilisation:.0%} utilisation", justify="right")
    for quantile in sorted({row["quantile"] for row in scenarios}):
        cells = []
        for utilisation in utilisations:
            row = next(r for r in scenarios if r["quantile"] == quantile and r["target_utilisation"] == utilisation)
            cells.append(f"{row['required_gpus']:,} ({row['run_out_date'] or 'ok'})")
        table.add_row(f"{quantile:.0%}", *cells)
    return table


def growth_text(inputs: dict[str, Any], growth: dict[str, Any]) -> str:
    """What growth the plan used, and where it came from."""
    used, measured = inputs["used_growth_gpus_per_month"], inputs["measured_growth_gpus_per_month"]
    if inputs["growth_gpus_per_month"] is not None:
        return f"{used:+g} GPUs/month (given; measured {measured:+g} over {growth['window_days']:g} days)"
    if used != measured:
        return (f"{used:+g} GPUs/month (measured {measured:+g} over {growth['window_days']:g} days; a fall is "
                "planned flat)")
    return f"{used:+g} GPUs/month (measured over {growth['window_days']:g} days)"


def tenant_rows(savings: dict[str, Any]) -> list[dict[str, Any]]:
    """Per tenant (and idle): cost and CO2 under always-on and default, and what default saves."""
    base, ours = savings["always-on"]["tenants"], savings["default"]["tenants"]
    rows = []
    for tenant in sorted(set(base) | set(ours), key=lambda t: (t == "(idle)", t)):
        zero = {"energy_kwh": 0.0, "cost": 0.0, "co2_kg": 0.0, "gpu_hours": 0.0}
        a, b = base.get(tenant, zero), ours.get(tenant, zero)
        rows.append({"tenant": tenant, "gpu_hours": b["gpu_hours"], "always_on_cost": a["cost"],
                     "default_cost": b["cost"], "saved_cost": a["cost"] - b["cost"],
                     "saved_co2_kg": a["co2_kg"] - b["co2_kg"]})
    return rows


def _tenant_table(savings: dict[str, Any]) -> Any:
    from rich.table import Table

    table = Table(title="Cost per tenant (jobs' own draw and host share; idle: what no job used)")
    for column in ("tenant", "GPU-hours", "always-on cost", "default cost", "saved", "CO2 saved kg"):
        table.add_column(column, justify="left" if column == "tenant" else "right")
    for row in tenant_rows(savings):
        table.add_row(row["tenant"], f"{row['gpu_hours']:,.0f}", f"{row['always_on_cost']:,.0f}",
                      f"{row['default_cost']:,.0f}", f"{row['saved_cost']:,.0f}", f"{row['saved_co2_kg']:,.0f}")
    return table


def _model_table(rows: list[dict[str, Any]]) -> Any:
    from rich.table import Table

    table = Table(title="Per GPU model (jobs pinned to one model; the cluster's planning inputs not split)")
    for column in ("GPU model", "installed", "peak", "upper rise", "required", "run out"):
        table.add_column(column, justify="left" if column == "GPU model" else "right")
    for row in rows:
        required = "shares every pool" if row["required_gpus"] is None else f"{row['required_gpus']:,}"
        installed = "-" if row["installed_gpus"] is None else f"{row['installed_gpus']:,}"
        table.add_row(row["gpu_model"], installed, f"{row['peak_gpus']:g}", f"+{row['upper_offset_gpus']:g}",
                      required, row["run_out_date"] or "-")
    return table
