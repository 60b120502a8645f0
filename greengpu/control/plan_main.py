"""`greengpu plan`: read the inputs (with located errors), run the pure plan, optionally the savings
replay, and render the result (JSON or rich tables)."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import pandas as pd

from greengpu.errors import BadInput
from greengpu.forecast.demand import demand_from_history, demand_from_jobs
from greengpu.forecast.models import BASELINES
from greengpu.forecast.plan import PlanResult, PlanSettings, make_plan

DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([hdw])\s*$")
_UNIT_DAYS = {"h": 1 / 24, "d": 1.0, "w": 7.0}


@dataclass(frozen=True)
class PlanOptions:
    history_file: str | None
    trace_file: str | None
    trace_format: str
    cluster_file: str | None
    horizon: str | None
    lead_time: str | None
    target_utilisation: float | None
    redundancy_gpus: int | None
    baselines_only: bool = False


def parse_days(text: str, what: str) -> int:
    """`90d`, `12w`, `720h` -> whole days (at least 1)."""
    match = DURATION.match(text)
    if not match:
        raise BadInput(f"{what} {text!r}: expected a duration such as 90d, 12w or 720h")
    return max(1, round(float(match.group(1)) * _UNIT_DAYS[match.group(2)]))


def bundled_example() -> Path:
    """forecasts/plan.yaml of the checkout this package runs from, else of the current directory."""
    for root in (Path(__file__).resolve().parents[2], Path.cwd()):
        candidate = root / "forecasts" / "plan.yaml"
        if candidate.exists():
            return candidate
    raise BadInput("no arguments and no bundled example: forecasts/plan.yaml is not beside this install; "
                   "give --history FILE or --trace FILE")


def _example_settings(path: Path) -> dict[str, Any]:
    from greengpu.config.fields import Fields
    from greengpu.config.yamlsource import load_yaml_file

    document = load_yaml_file(path)
    fields = Fields(document, (), document.value)
    fields.reject_unknown(("history", "cluster", "horizon", "lead_time", "target_utilisation", "redundancy_gpus",
                           "max_wait_probability"))
    return {
        "history": str(path.parent / (fields.string("history", required=True) or "")),
        "cluster": str(path.parent / (fields.string("cluster", required=True) or "")),
        "horizon": fields.string("horizon", "90d"),
        "lead_time": fields.string("lead_time", "12w"),
        "target_utilisation": fields.number("target_utilisation", 0.65, minimum=0.05, maximum=1.0),
        "redundancy_gpus": fields.integer("redundancy_gpus", 0, minimum=0),
        "max_wait_probability": fields.number("max_wait_probability", 0.10, minimum=0.0001, maximum=1.0),
    }


def read_history(path: str) -> pd.Series:
    """A usage history CSV -> hourly demand; bad input names file, line and column."""
    try:
        frame = pd.read_csv(path, dtype=str, keep_default_na=False)
    except FileNotFoundError:
        raise BadInput(f"{path}: file not found") from None
    except (pd.errors.ParserError, UnicodeDecodeError, pd.errors.EmptyDataError) as error:
        raise BadInput(f"{path}: not a CSV file: {str(error).splitlines()[0]}") from None
    for column in ("time", "gpus_busy"):
        if column not in frame.columns:
            raise BadInput(f"{path}:1: missing column {column!r} (have: {', '.join(frame.columns)})")
    times = pd.to_datetime(frame["time"], utc=True, errors="coerce", format="mixed")
    bad_time = times.isna()
    if bad_time.any():
        row = int(bad_time.to_numpy().argmax())
        raise BadInput(f"{path}:{row + 2}: time: not a date and time: {frame['time'].iloc[row]!r}")
    for column in [c for c in ("gpus_busy", "gpus_pending") if c in frame.columns]:
        values = pd.to_numeric(frame[column].replace("", "0" if column == "gpus_pending" else ""), errors="coerce")
        bad = values.isna() | (values < 0)
        if bad.any():
            row = int(bad.to_numpy().argmax())
            raise BadInput(f"{path}:{row + 2}: {column}: expected a number of GPUs >= 0, got "
                           f"{frame[column].iloc[row]!r}")
        frame[column] = values
    frame["time"] = times
    if len(frame) < 2:
        raise BadInput(f"{path}: needs at least two rows of history")
    return demand_from_history(frame)


def run_plan(options: PlanOptions) -> tuple[dict[str, Any], Callable[[], None]]:
    settings_source: dict[str, Any] = {}
    history_file, cluster_file = options.history_file, options.cluster_file
    if history_file is None and options.trace_file is None:
        settings_source = _example_settings(bundled_example())
        history_file = settings_source["history"]
        cluster_file = cluster_file or settings_source["cluster"]
    if history_file is not None and options.trace_file is not None:
        raise BadInput("give --history or --trace, not both")
    jobs = None
    if options.trace_file is not None:
        from greengpu.sim.traces import read_trace

        jobs = read_trace(options.trace_file, options.trace_format).jobs
        series = demand_from_jobs(jobs)
    else:
        assert history_file is not None
        series = read_history(history_file)
    cluster = None
    installed = None
    if cluster_file is not None:
        from greengpu.config.inventory import load_cluster

        cluster = load_cluster(cluster_file)
        installed = sum(cluster.node_types[n.type_name].gpus for n in cluster.nodes)
    days = (series.index[-1] - series.index[0]).total_seconds() / 86400 if len(series) else 0
    if days < 15:
        raise BadInput(f"{options.trace_file or history_file}: {days:.1f} days of history; the backtest needs at "
                       "least 15 (14 to train, 1 to test)")
    settings = PlanSettings(
        horizon_days=parse_days(options.horizon or settings_source.get("horizon") or "90d", "--horizon"),
        lead_time_days=parse_days(options.lead_time or settings_source.get("lead_time") or "12w", "--lead-time"),
        target_utilisation=options.target_utilisation or settings_source.get("target_utilisation") or 0.65,
        redundancy_gpus=(options.redundancy_gpus if options.redundancy_gpus is not None
                         else settings_source.get("redundancy_gpus") or 0),
        max_wait_probability=settings_source.get("max_wait_probability") or 0.10,
    )
    if options.baselines_only:
        settings = replace(settings, models=BASELINES)
    result = make_plan(series, installed, settings)
    payload: dict[str, Any] = {"forecast": result.forecast, "capacity": result.capacity, "months": result.months,
                               "growth": result.growth, "flags": result.flags,
                               "settings": {k: v for k, v in asdict(settings).items() if k != "models"},
                               "history": {"source": options.trace_file or history_file, "hours": len(series),
                                           "first": series.index[0].isoformat(),
                                           "last": series.index[-1].isoformat()}}
    if jobs is not None and cluster is not None:
        payload["savings"] = _savings(cluster, jobs)
    return payload, lambda: _render(payload, result)


def _savings(cluster: Any, jobs: Any) -> dict[str, Any]:
    from greengpu.config.policy import load_policy
    from greengpu.sim.engine import simulate

    keys = ("energy_kwh", "gpu_energy_kwh", "cost", "co2_kg", "wait_s", "node_sleep_hours", "wakes")
    results = {name: simulate(cluster, load_policy(name), jobs) for name in ("always-on", "default")}
    out: dict[str, Any] = {name: {k: r[k] for k in keys} for name, r in results.items()}
    base, ours = results["always-on"], results["default"]
    out["saved"] = {k: base[k] - ours[k] for k in ("energy_kwh", "cost", "co2_kg")}
    return out


def _render(payload: dict[str, Any], result: PlanResult) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    forecast, capacity, growth = payload["forecast"], payload["capacity"], payload["growth"]
    history = payload["history"]
    console.print(f"[bold]greengpu plan[/bold]: {history['hours']:,} hours of demand from {history['source']} "
                  f"({history['first'][:10]} to {history['last'][:10]})")
    models = Table(title=f"Day-ahead backtest, {forecast['origins']} origins (MASE, lower is better)")
    models.add_column("model")
    models.add_column("MASE", justify="right")
    for name, mase in forecast["models"].items():
        mark = " (shipped)" if name == forecast["model"] else ""
        models.add_row(name + mark, f"{mase:.3f}" if mase is not None else "n/a")
    console.print(models)
    console.print(forecast["reason"])
    console.print(f"Calibrated bands cover {forecast['coverage_80']:.0%} (80%) and {forecast['coverage_95']:.0%} "
                  f"(95%) of backtest hours.")
    console.print(f"Daily peak demand now {growth['peak_level_gpus']:g} GPUs, growing "
                  f"{growth['peak_growth_gpus_per_day']:g} GPUs/day (Theil-Sen over {growth['window_days']:g} days); "
                  f"upper band +{growth['upper_offset_gpus']:g} GPUs.")
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
    if "savings" in payload:
        saved = payload["savings"]["saved"]
        console.print(f"greengpu default vs always-on on this trace: {saved['energy_kwh']:,.0f} kWh, "
                      f"{saved['cost']:,.0f} in cost and {saved['co2_kg']:,.0f} kg CO2 saved.")
    for flag in payload["flags"]:
        console.print(f"[yellow]note:[/yellow] {flag}")
