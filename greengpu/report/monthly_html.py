"""`greengpu report --format html`: one self-contained page with charts, made the way `greengpu plan --html`
makes its page (greengpu/report/plan_html.py): inline SVG from matplotlib with a fixed hash salt and no
date, text kept as text, no scripts and no links; byte-identical for the same input."""

from __future__ import annotations

import math

from greengpu.report.month_rows import all_rows, month_seconds
from greengpu.report.month_types import Figures, MonthReport, maybe_number, number
from greengpu.report.plan_html import SVG_RC, _svg

COLOURS = {"cost": "#1f6fb4", "co2": "#38761d", "co2_market": "#93c47d", "idle": "#e69138",
           "saved": "#674ea7", "trend": "#4a4a4a"}
CHART_ROWS = 15
"""Rows drawn in the charts (the largest by cost; the tables list them all up to TABLE_ROWS)."""
TABLE_ROWS = 200


def _or_nan(value: float | None) -> float:
    """A missing figure as matplotlib draws None: not at all."""
    return math.nan if value is None else value


def _largest(payload: MonthReport) -> list[tuple[str, Figures]]:
    rows = [(name, figures) for kind, name, figures in all_rows(payload) if kind != "total"]
    return sorted(rows, key=lambda item: (-abs(number(item[1], "cost")), item[0]))[:CHART_ROWS]


def rows_chart(payload: MonthReport) -> str:
    """Cost and CO2 (location-based, and market-based beside it when configured) by row."""
    import matplotlib.pyplot as plt

    rows = _largest(payload)[::-1]
    names = [name for name, _ in rows]
    figure, (left, right) = plt.subplots(1, 2, figsize=(9.0, 0.9 + 0.28 * max(len(rows), 1)), sharey=True)
    positions = list(range(len(rows)))
    left.barh(positions, [number(f, "cost") for _, f in rows], color=COLOURS["cost"])
    left.set_title(f"cost ({payload['currency']})", fontsize=9)
    left.set_yticks(positions, names, fontsize=7.5)
    market = payload["pricing"]["carbon_market"] is not None
    height = 0.4 if market else 0.8
    right.barh([p + (height / 2 if market else 0) for p in positions], [number(f, "co2_kg") for _, f in rows],
               height=height, color=COLOURS["co2"], label="location-based")
    if market:
        right.barh([p - height / 2 for p in positions], [_or_nan(maybe_number(f, "co2_market_kg")) for _, f in rows],
                   height=height, color=COLOURS["co2_market"], label="market-based")
        right.legend(fontsize=7, frameon=False)
    right.set_title("CO2 (kg)", fontsize=9)
    figure.tight_layout()
    return _svg(figure)


def days_chart(payload: MonthReport) -> str:
    """The site by day: cost (bars), CO2 (line), and the share of energy no job was charged for."""
    import matplotlib.pyplot as plt

    days = payload["days"]
    labels = [str(d["day"])[8:] for d in days]
    figure, (top, bottom) = plt.subplots(2, 1, figsize=(9.0, 4.2), sharex=True)
    top.bar(labels, [number(d, "cost") for d in days], color=COLOURS["cost"], label=f"cost ({payload['currency']})")
    twin = top.twinx()
    twin.plot(labels, [number(d, "co2_kg") for d in days], color=COLOURS["co2"], linewidth=1.6, label="CO2 kg")
    top.set_ylabel(f"cost ({payload['currency']})")
    twin.set_ylabel("CO2 (kg)")
    top.set_title(f"by day, {payload['period']} (UTC)", fontsize=9)
    bottom.fill_between(labels, [100 * number(d, "idle_share") for d in days], color=COLOURS["idle"], step="mid")
    bottom.set_ylabel("idle share (%)")
    bottom.set_ylim(0, 100)
    bottom.tick_params(axis="x", labelsize=7)
    figure.tight_layout()
    return _svg(figure)


def savings_chart(payload: MonthReport) -> str:
    """Saving against the baseline by row: energy, cost and CO2."""
    import matplotlib.pyplot as plt

    baseline = payload["baseline"]
    if baseline is None:
        return ""
    rows = sorted(baseline["rows"], key=lambda r: (-abs(number(r, "cost")), str(r["name"])))[:CHART_ROWS][::-1]
    figure, all_axes = plt.subplots(1, 3, figsize=(9.0, 0.9 + 0.28 * max(len(rows), 1)), sharey=True)
    positions = list(range(len(rows)))
    for axes, (key, label) in zip(all_axes, (("energy_kwh", "kWh saved"), ("cost", f"{payload['currency']} saved"),
                                             ("co2_kg", "kg CO2 saved")), strict=True):
        axes.barh(positions, [number(r, key) for r in rows], color=COLOURS["saved"])
        axes.axvline(0, color="#666666", linewidth=0.6)
        axes.set_title(label, fontsize=9)
    all_axes[0].set_yticks(positions, [str(r["name"]) for r in rows], fontsize=7.5)
    figure.tight_layout()
    return _svg(figure)


def trend_chart(payload: MonthReport) -> str:
    """The site's cost and CO2 month by month."""
    import matplotlib.pyplot as plt

    trend = payload["trend"]
    labels = [t["period"] for t in trend]
    figure, (left, right) = plt.subplots(1, 2, figsize=(9.0, 2.6))
    left.bar(labels, [t["cost"] for t in trend], color=COLOURS["trend"])
    left.set_title(f"cost ({payload['currency']})", fontsize=9)
    right.bar(labels, [t["co2_kg"] for t in trend], color=COLOURS["trend"])
    right.set_title("CO2, location-based (kg)", fontsize=9)
    for axes in (left, right):
        axes.tick_params(axis="x", labelsize=7, rotation=45)
    figure.tight_layout()
    return _svg(figure)


TEMPLATE = "monthly.html.j2"


def render_month_html(payload: MonthReport) -> str:
    import jinja2
    import matplotlib

    matplotlib.use("Agg")
    with matplotlib.rc_context({**SVG_RC, "svg.hashsalt": "greengpu-report"}):
        charts = {"rows_svg": rows_chart(payload), "days_svg": days_chart(payload) if payload["days"] else "",
                  "savings_svg": savings_chart(payload) if payload.get("baseline") else "",
                  "trend_svg": trend_chart(payload) if len(payload["trend"]) > 1 else ""}
    environment = jinja2.Environment(loader=jinja2.PackageLoader("greengpu.report", "templates"),
                                     autoescape=True, undefined=jinja2.StrictUndefined, keep_trailing_newline=True)
    rows = all_rows(payload)
    return environment.get_template(TEMPLATE).render(
        **{"runs": None, **payload}, **charts, table=rows[:TABLE_ROWS] + ([rows[-1]] if len(rows) > TABLE_ROWS else []),
        hidden=max(0, len(rows) - TABLE_ROWS), hours=month_seconds(payload["period"]) // 3600,
        num=lambda v, digits: "-" if v is None else f"{v:,.{digits}f}",
        pct=lambda v: "-" if v is None else f"{v:.0%}")
