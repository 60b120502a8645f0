"""`greengpu plan --html FILE`: one self-contained page (inline SVG charts, inline CSS, no scripts, no
external links) from the plan's JSON payload.

Byte-identical for the same input: matplotlib's SVG ids come from a fixed `svg.hashsalt`, its Date
metadata is dropped, text stays text (`svg.fonttype: none`, so no font glyph paths whose order could
vary), and the page carries no generation time.
"""

from __future__ import annotations

import io
import math
from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd

from greengpu.errors import BadInput
from greengpu.forecast.plan_types import ForecastSummary, PlanPayload, Savings
from greengpu.report.plan_text import (
    bands_line,
    gate_line,
    gpus,
    growth_line,
    growth_text,
    headline,
    signed,
    tenant_rows,
)

if TYPE_CHECKING:  # matplotlib is imported where a chart is drawn
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure
    from matplotlib.typing import RcKeyType

SVG_RC: dict[RcKeyType, str | float | bool] = {
    "svg.hashsalt": "greengpu-plan", "svg.fonttype": "none", "font.family": "DejaVu Sans", "font.size": 9.0,
    "axes.spines.top": False, "axes.spines.right": False}
EPOCH = pd.Timestamp("1970-01-01")
"""matplotlib's default date epoch (rcParams["date.epoch"])."""
COLOURS = {"history": "#4a4a4a", "forecast": "#1f6fb4", "band95": "#cfe2f3", "band80": "#9fc5e8",
           "upper": "#e69138", "required": "#cc0000", "installed": "#38761d", "default": "#38761d",
           "always-on": "#999999", "candidate": "#674ea7", "baseline": "#4a4a4a"}


def _svg(figure: Figure) -> str:
    import matplotlib.pyplot as plt

    buffer = io.StringIO()
    figure.savefig(buffer, format="svg", metadata={"Date": None, "Creator": "greengpu"}, bbox_inches="tight")
    plt.close(figure)
    text = buffer.getvalue()
    return text[text.index("<svg"):]  # drop the XML prolog and DOCTYPE: the SVG sits inside HTML


def _finish(figure: Figure, axes: Axes) -> None:
    """GPUs from zero with headroom, so a line at the top is not lost in the frame; the legend above."""
    axes.set_ylabel("GPUs")
    axes.set_ylim(0, axes.get_ylim()[1] * 1.08)
    axes.legend(loc="lower left", bbox_to_anchor=(0.0, 1.01), fontsize=7.5, frameon=False, ncol=3)
    figure.autofmt_xdate()


def demand_chart(payload: PlanPayload) -> str:
    """The last two weeks of hourly demand and the next 24 hours with calibrated 80% and 95% bands."""
    import matplotlib.pyplot as plt

    recent = payload["history"]["recent"]
    ahead = pd.DataFrame(payload["day_ahead"])
    figure, axes = plt.subplots(figsize=(9.0, 3.2))
    axes.plot(pd.to_datetime([t for t, _ in recent]), [v for _, v in recent], color=COLOURS["history"],
              linewidth=0.9, label="demand (busy + pending GPUs)")
    if len(ahead):
        times = pd.to_datetime(ahead["time"])
        axes.fill_between(times, ahead["lower_95"], ahead["upper_95"], color=COLOURS["band95"], label="95% band")
        axes.fill_between(times, ahead["lower_80"], ahead["upper_80"], color=COLOURS["band80"], label="80% band")
        axes.plot(times, ahead["gpus"], color=COLOURS["forecast"], linewidth=1.4,
                  label=f"forecast ({payload['forecast']['model']})")
    installed = payload["capacity"]["installed_gpus"]
    if installed:
        axes.axhline(installed, color=COLOURS["installed"], linestyle="--", linewidth=1.0, label="installed GPUs")
    _finish(figure, axes)
    return _svg(figure)


def capacity_figure(payload: PlanPayload) -> Figure:
    """Daily peaks so far, the planned peak and upper peak, GPUs required, and the installed line; the time
    axis runs from the first day of data to the last planned day, whatever the dates to mark."""
    import matplotlib.pyplot as plt

    peaks = payload["history"]["daily_peaks"]
    days = pd.DataFrame(payload["days"])
    capacity = payload["capacity"]
    figure, axes = plt.subplots(figsize=(9.0, 3.4))
    peak_days = pd.to_datetime([d for d, _ in peaks])
    axes.plot(peak_days, [v for _, v in peaks], color=COLOURS["history"],
              linewidth=1.0, marker=".", markersize=3, label="daily peak demand")
    first: pd.Timestamp | None = peak_days.min() if len(peak_days) else None
    last: pd.Timestamp | None = peak_days.max() if len(peak_days) else None
    if len(days):
        when = pd.to_datetime(days["day"])
        axes.plot(when, days["peak_gpus"], color=COLOURS["forecast"], linewidth=1.2, label="planned peak")
        axes.plot(when, days["upper_peak_gpus"], color=COLOURS["upper"], linewidth=1.2,
                  label="upper peak (95%, with inputs)")
        axes.step(when, days["required_gpus"], where="post", color=COLOURS["required"], linewidth=1.4,
                  label=f"GPUs required at {capacity['target_utilisation']:.0%}")
        first = when.min() if first is None else first
        last = when.max()
    if capacity["installed_gpus"]:
        axes.axhline(capacity["installed_gpus"], color=COLOURS["installed"], linestyle="--", linewidth=1.0,
                     label="installed GPUs")
    for key, label, date in (("run_out_date", "run out", capacity["run_out_date"]),
                             ("order_by_date", "order by", capacity["order_by_date"])):
        if date:
            # In matplotlib's date unit (days since its 1970 epoch): its stubs take a float here.
            when_line = (pd.Timestamp(date) - EPOCH) / pd.Timedelta(days=1)
            if key == "order_by_date" and capacity.get("late_days"):
                label = "order now"  # the lead-time date has passed (it may lie before the data): say so, at today
            axes.axvline(when_line, color="#666666", linestyle=":", linewidth=1.0)
            # Run-out on the line's left, order-by on its right: on the same day (already short) both read.
            before = key == "run_out_date"
            axes.annotate(f"{label} {date}", (when_line, 0), rotation=90, fontsize=7, va="bottom",
                          ha="right" if before else "left", xytext=(-2 if before else 2, 4),
                          textcoords="offset points")
    if first is not None and last is not None:
        axes.set_xlim(first, last)
    _finish(figure, axes)
    return figure


def capacity_chart(payload: PlanPayload) -> str:
    """The capacity figure as inline SVG."""
    return _svg(capacity_figure(payload))


def savings_chart(savings: Savings) -> str:
    """always-on against default: facility energy, cost and CO2, side by side."""
    import matplotlib.pyplot as plt

    figure, all_axes = plt.subplots(1, 3, figsize=(9.0, 2.6))
    base, ours = savings["always-on"], savings["default"]
    figures = (("energy (kWh)", base["energy_kwh"], ours["energy_kwh"]), ("cost", base["cost"], ours["cost"]),
               ("CO2 (kg)", base["co2_kg"], ours["co2_kg"]))
    for axes, (label, base_value, our_value) in zip(all_axes, figures, strict=True):
        names = ["always-on", "default"]
        values = [float(base_value), float(our_value)]
        bars = axes.bar(names, values, color=[COLOURS[n] for n in names])
        axes.bar_label(bars, labels=[f"{v:,.0f}" for v in values], fontsize=7)
        axes.set_title(label, fontsize=9)
        axes.set_yticks([])
        axes.spines["left"].set_visible(False)
    figure.tight_layout()
    return _svg(figure)


def origins_chart(forecast: ForecastSummary) -> str:
    """Per origin of the day-ahead backtest, the MASE of the shipped model and, when a candidate was judged,
    of that candidate and the baseline it was judged against: where it won, where it lost, by how much."""
    import matplotlib.pyplot as plt

    gate, per_origin = forecast["gate"], forecast["per_origin"]
    baseline, candidate = (gate.get("baseline"), gate.get("candidate")) if gate else (None, None)
    shown = dict.fromkeys(name for name in (forecast["model"], baseline, candidate)
                          if name is not None and name in per_origin["mase"])
    figure, axes = plt.subplots(figsize=(9.0, 2.6))
    when = pd.to_datetime(per_origin["times"])
    for name in shown:
        role = "candidate" if name == candidate else "baseline"
        values = [math.nan if v is None else v for v in per_origin["mase"][name]]
        axes.plot(when, values, color=COLOURS[role], linewidth=1.0, marker="o", markersize=3,
                  label=f"{name} ({role}{', shipped' if name == forecast['model'] else ''})")
    axes.set_ylabel("MASE per origin")
    axes.set_ylim(0, axes.get_ylim()[1] * 1.08)
    axes.legend(loc="lower left", bbox_to_anchor=(0.0, 1.01), fontsize=7.5, frameon=False, ncol=2)
    figure.autofmt_xdate()
    return _svg(figure)


TEMPLATE = "plan.html.j2"

def render_plan_html(payload: PlanPayload) -> str:
    import jinja2
    import matplotlib

    matplotlib.use("Agg")
    with matplotlib.rc_context(SVG_RC):
        demand_svg = demand_chart(payload)
        capacity_svg = capacity_chart(payload)
        savings_svg = savings_chart(payload["savings"]) if payload.get("savings") else ""
        origins_svg = origins_chart(payload["forecast"])
    environment = jinja2.Environment(loader=jinja2.PackageLoader("greengpu.report", "templates"),
                                     autoescape=True, undefined=jinja2.StrictUndefined, keep_trailing_newline=True)
    scenarios = payload["scenarios"]
    return environment.get_template(TEMPLATE).render(
        **{**payload, "savings": payload.get("savings"), "gpu_models": payload.get("gpu_models")},
        demand_svg=demand_svg, capacity_svg=capacity_svg, savings_svg=savings_svg, origins_svg=origins_svg,
        quantiles=sorted({r["quantile"] for r in scenarios}),
        utilisations=sorted({r["target_utilisation"] for r in scenarios}),
        scenario={(r["quantile"], r["target_utilisation"]): r for r in scenarios},
        credit=payload["history"].get("credit", ""),
        pct=lambda v: "n/a" if v is None else f"{v:.0%}",
        num=lambda v, digits: "n/a" if v is None else f"{v:.{digits}f}",
        growth_text=growth_text(payload["inputs"], payload["growth"]),
        headline=headline(payload), growth_line=growth_line(payload), bands_line=bands_line(payload),
        gate_line=gate_line(payload["forecast"].get("gate")), gpus=gpus, signed=signed,
        tenants=tenant_rows(payload["savings"]) if payload.get("savings") else [],
    )


def write_plan_html(payload: PlanPayload, path: str) -> None:
    text = render_plan_html(payload)
    try:
        Path(path).write_text(text, encoding="utf-8")
    except OSError as error:
        raise BadInput(f"--html {path}: cannot write: {error.strerror}") from None


def check_writable(path: str) -> None:
    """A one-line error now if the report could not be written later."""
    target = Path(path)
    if target.is_dir():
        raise BadInput(f"--html {path}: is a directory")
    if not target.parent.is_dir():
        raise BadInput(f"--html {path}: folder {target.parent} does not exist")
