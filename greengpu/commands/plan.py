"""`greengpu plan`: capacity plan and savings report."""

from __future__ import annotations

import json
from pathlib import Path

import click

from greengpu.commands.common import phases
from greengpu.errors import BadInput


@click.command()
@click.option("--history", "history_file", default=None, metavar="FILE",
              help="Usage history CSV: time, gpus_busy [, gpus_pending] [, tenant] [, gpu_model] "
              "(docs/FORECAST.md).")
@click.option("--trace", "trace_file", default=None, metavar="FILE", help="Derive the history from a job trace.")
@click.option("--trace-format", type=click.Choice(["csv", "philly", "sacct"]), default="csv", show_default=True)
@click.option("--cluster", "cluster_file", default=None, metavar="FILE", help="Inventory: the installed GPUs.")
@click.option("--horizon", default=None, metavar="DURATION", help="How far to plan, e.g. 90d (default 90d).")
@click.option("--lead-time", default=None, metavar="DURATION", help="Order-to-ready time, e.g. 12w (default 12w).")
@click.option("--target-utilisation", type=click.FloatRange(0.05, 1.0), default=None,
              help="0.80 development, 0.65 production (default), 0.50 high availability.")
@click.option("--redundancy-gpus", type=click.IntRange(min=0), default=None, help="Spare GPUs on top (default 0).")
@click.option("--models", type=click.Choice(["all", "baselines"]), default="all", show_default=True,
              help="baselines: skip the statsmodels candidates (seconds instead of tens of seconds).")
@click.option("--settings", "settings_file", default=None, metavar="FILE",
              help="Plan settings YAML: inputs, sizing, projects, efficiency gains, growth, buffer "
              "(the bundled example, greengpu/plan_example/plan.yaml, is one; flags override it).")
@click.option("--buffer-factor", type=click.FloatRange(1.0, 10.0), default=None,
              help="Multiply the upper peak by this (default 1.0).")
@click.option("--origins", type=click.IntRange(5, 365), default=None, metavar="N",
              help="Backtest origins (default: every day with two weeks of history before it, the last 182); "
              "a count thins them evenly (half the default checks that the gate's verdict does not turn on the "
              "count).")
@click.option("--growth", "growth_gpus_per_month", type=float, default=None, metavar="GPUS_PER_MONTH",
              help="Expected growth of daily peaks, replacing the measured one.")
@click.option("--html", "html_file", default=None, metavar="FILE", help="Also write a self-contained HTML report "
              "with charts.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object (keys in docs/FORECAST.md).")
def plan(history_file: str | None, trace_file: str | None, trace_format: str, cluster_file: str | None,
         horizon: str | None, lead_time: str | None, target_utilisation: float | None,
         redundancy_gpus: int | None, models: str, settings_file: str | None, buffer_factor: float | None,
         origins: int | None, growth_gpus_per_month: float | None, html_file: str | None, as_json: bool) -> None:
    """How many GPUs will we need, when must we order them, and what would greengpu save?

    With no arguments, plans the example that ships with greengpu (forecasts/ in the repository: Philly's
    public demand, 1,000 GPUs), from any directory.
    The forecast model ships only if its backtest beats the baselines (docs/FORECAST.md).
    """
    from greengpu.commands.plan_main import PlanOptions, run_plan
    from greengpu.report.plan_text import render_text

    if html_file is not None:
        from greengpu.report.plan_html import check_writable

        check_writable(html_file)  # before minutes of backtesting, not after
        inputs = [f for f in (history_file, trace_file, cluster_file, settings_file) if f is not None]
        if any(Path(html_file).resolve() == Path(f).resolve() for f in inputs):
            raise BadInput(f"--html {html_file}: is one of the plan's inputs; the report never overwrites its input")
    options = PlanOptions(history_file, trace_file, trace_format, cluster_file, horizon, lead_time,
                          target_utilisation, redundancy_gpus, baselines_only=models == "baselines",
                          settings_file=settings_file, buffer_factor=buffer_factor,
                          growth_gpus_per_month=growth_gpus_per_month, origins=origins)
    with phases("greengpu plan") as phase:
        payload, _ = run_plan(options, progress=phase)
    if html_file is not None:
        from greengpu.report.plan_html import write_plan_html

        write_plan_html(payload, html_file)
    if as_json:
        click.echo(json.dumps(payload, indent=2, sort_keys=True))
    else:
        render_text(payload)
        if html_file is not None:
            click.echo(f"HTML report: {html_file}")
