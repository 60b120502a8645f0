"""Render a monthly ledger report (greengpu.accounting.ledger.month_report) as text, JSON or CSV."""

from __future__ import annotations

import csv
import io
import json
from typing import Any

_COLUMNS = ("gpu_hours", "energy_kwh", "cost", "co2_kg")


def _rows(figures: dict[str, Any]) -> list[tuple[str, dict[str, float]]]:
    rows = [(t["tenant"], t) for t in figures["tenants"]]
    return [*rows, ("(idle)", figures["idle"]), ("TOTAL", figures["totals"])]


def render(figures: dict[str, Any], output_format: str) -> str:
    """The report as `text` (a table), `json` (docs/LEDGER.md) or `csv` (one row per tenant)."""
    if output_format == "json":
        return json.dumps(figures) + "\n"
    if output_format == "csv":
        buffer = io.StringIO()
        writer = csv.writer(buffer, lineterminator="\n")
        writer.writerow(["period", "tenant", *_COLUMNS, "currency"])
        for name, values in _rows(figures):
            writer.writerow([figures["period"], name, *(values[c] for c in _COLUMNS), figures["currency"]])
        return buffer.getvalue()
    currency = figures["currency"]
    lines = [f"greengpu report {figures['period']}  (run {figures['run_id']}, policy {figures['policy']})",
             f"{'tenant':<20} {'GPU-h':>12} {'kWh':>12} {'cost ' + currency:>14} {'CO2 kg':>12}"]
    for name, values in _rows(figures):
        if name == "TOTAL":
            lines.append("-" * 74)
        lines.append(f"{name:<20} {values['gpu_hours']:>12,.1f} {values['energy_kwh']:>12,.1f} "
                     f"{values['cost']:>14,.2f} {values['co2_kg']:>12,.3f}")
    lines.append(f"node sleep: {figures['node_sleep_hours']:,.1f} node-hours")
    return "\n".join(lines) + "\n"
