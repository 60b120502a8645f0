"""`greengpu plan`: read the inputs (with located errors), run the pure plan, optionally the savings
replay, and render the result (JSON or rich tables)."""

from __future__ import annotations

import multiprocessing
import time
from collections.abc import Callable
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import pandas as pd

from greengpu.config.plan_settings import PHILLY_CREDIT, PlanFile, PlanFileValues, load_plan_file
from greengpu.errors import BadInput
from greengpu.forecast.demand import (
    ANY_MODEL,
    demand_by_model_from_history,
    demand_by_model_from_jobs,
    demand_from_history,
    demand_from_jobs,
    demand_from_replay,
)
from greengpu.forecast.models import BASELINES
from greengpu.forecast.plan import make_plan, size_by_model
from greengpu.forecast.plan_types import (
    PlanPayload,
    PlanResult,
    PlanSettings,
    ReplayFigures,
    Savings,
    settings_shown,
)
from greengpu.model import Cluster, Job
from greengpu.plan_inputs import PlanInputs


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
    settings_file: str | None = None
    buffer_factor: float | None = None
    growth_gpus_per_month: float | None = None
    origins: int | None = None
    """Backtest origins; None: the backtest's default (one a day, at most 30)."""


def parse_days(text: str, what: str) -> int:
    """`90d`, `12w`, `720h` -> whole days (1 to five years); BadInput naming `what` (the flag) otherwise."""
    from greengpu.config.plan_settings import days_of

    try:
        return days_of(text)
    except ValueError as exc:
        raise BadInput(f"{what} {text[:40]!r}: {exc}") from None


def bundled_example() -> Path:
    """The example settings that ship inside the package (greengpu/plan_example/plan.yaml), found from any
    directory: the package's own files, not the current directory's."""
    from importlib.resources import files

    candidate = Path(str(files("greengpu") / "plan_example" / "plan.yaml"))
    if not candidate.is_file():
        raise BadInput(f"no arguments and no bundled example: {candidate} is missing from this install (reinstall "
                       "greengpu with its package data); give --history FILE or --trace FILE")
    return candidate


def read_history_frame(path: str) -> pd.DataFrame:
    """A usage history CSV, validated (times parsed and in 1900 to 2199, GPU counts finite numbers from 0 to
    a million)."""
    from greengpu.config.limits import (
        MAX_CSV_BYTES,
        MAX_DURATION_S,
        MAX_GPUS,
        MAX_TIME_S,
        MIN_TIME_S,
        check_file_size,
    )

    if Path(path).is_dir():
        raise BadInput(f"{path}: is a directory, expected a usage history CSV file")
    if Path(path).exists() and not Path(path).is_file():
        raise BadInput(f"{path}: not a regular file (a device or a pipe), expected a usage history CSV file")
    try:
        check_file_size(path, MAX_CSV_BYTES)
        frame = pd.read_csv(path, dtype=str, keep_default_na=False)
    except FileNotFoundError:
        raise BadInput(f"{path}: file not found") from None
    except OSError as error:
        raise BadInput(f"{path}: cannot read: {error.strerror}") from None
    except (pd.errors.ParserError, UnicodeDecodeError, pd.errors.EmptyDataError, ValueError) as error:
        first = (str(error).splitlines() or [type(error).__name__])[0][:200]
        raise BadInput(f"{path}: not a CSV file: {first}") from None
    for column in ("time", "gpus_busy"):
        if column not in frame.columns:
            raise BadInput(f"{path}:1: missing column {column!r} (have: {', '.join(frame.columns)})")
    times = pd.to_datetime(frame["time"], utc=True, errors="coerce", format="mixed")
    # Compared, not subtracted: a parsed year 9999 may sit in a coarser unit that nanoseconds cannot hold.
    bad_time = times.isna() | (times < pd.Timestamp(MIN_TIME_S, unit="s", tz="UTC")) \
        | (times >= pd.Timestamp(MAX_TIME_S, unit="s", tz="UTC"))
    if bad_time.any():
        row = int(bad_time.to_numpy().argmax())
        raise BadInput(f"{path}:{row + 2}: time: not a date and time in 1900 to 2199: "
                       f"{frame['time'].iloc[row][:40]!r}")
    for column in [c for c in ("gpus_busy", "gpus_pending") if c in frame.columns]:
        values = pd.to_numeric(frame[column].replace("", "0" if column == "gpus_pending" else ""), errors="coerce")
        too_many = ~np.isfinite(values) | (values > MAX_GPUS)
        for bad, wanted in ((values.isna() | (values < 0), "a number of GPUs >= 0"),
                            (too_many, f"a finite number of GPUs up to {MAX_GPUS:,}")):
            if bad.any():
                row = int(bad.to_numpy().argmax())
                raise BadInput(f"{path}:{row + 2}: {column}: expected {wanted}, got {frame[column].iloc[row][:40]!r}")
        frame[column] = values.astype(float)
    frame["time"] = times.dt.as_unit("ns")
    if len(frame) < 2:
        raise BadInput(f"{path}: needs at least two rows of history")
    # In Python datetimes: 1900 to 2199 is longer than a pandas Timedelta holds (292 years).
    span_s = (frame["time"].max().to_pydatetime() - frame["time"].min().to_pydatetime()).total_seconds()
    if span_s > MAX_DURATION_S:  # the forecaster works hour by hour: centuries of hours are not a history
        raise BadInput(f"{path}: the history spans {span_s / 86_400 / 365.25:,.0f} years, more than the ten "
                       "greengpu plan takes")
    return frame


@dataclass
class LoadedInputs:
    """Everything `greengpu plan` reads, checked, before any replay or fit starts."""
    source: str
    settings: PlanSettings
    inputs: PlanInputs
    settings_file: str | None
    jobs: list[Job] | None
    history: pd.DataFrame | None
    cluster: Cluster | None
    installed_gpus: int | None
    installed_by_model: dict[str, int]
    credit: str = ""
    """Where the data comes from (`credit:` in the settings), shown with the report."""


@dataclass
class Demand:
    series: pd.Series
    kind: str
    by_model: dict[str, pd.Series]
    replays: SavingsReplays | None
    """The savings replays in flight (with a trace and a cluster)."""


def load_inputs(options: PlanOptions) -> LoadedInputs:
    """Read and check every input (settings file, flags, history or trace, cluster): bad input fails here,
    in this order, one step per input."""
    settings_file, plan_file = _read_settings_file(options)
    given = plan_file.values if plan_file is not None else PlanFileValues()
    inputs = _plan_inputs(options, plan_file)
    history_file, trace_file = _history_or_trace(options, given, settings_file)
    jobs, frame, source = _read_usage(options, given, history_file, trace_file)
    cluster = _read_cluster(options.cluster_file or given.cluster, jobs, source)
    settings = _plan_settings(options, given)
    credit = given.credit or (PHILLY_CREDIT if "philly" in source.lower() else "")
    return LoadedInputs(source, settings, inputs, settings_file, jobs, frame, cluster.cluster, cluster.installed_gpus,
                        cluster.installed_by_model, credit)


def _read_settings_file(options: PlanOptions) -> tuple[str | None, PlanFile | None]:
    """The settings file given, or the bundled example when no history, trace or settings is given."""
    settings_file = options.settings_file
    if settings_file is None and options.history_file is None and options.trace_file is None:
        settings_file = str(bundled_example())
    return settings_file, load_plan_file(settings_file) if settings_file is not None else None


def _plan_inputs(options: PlanOptions, plan_file: PlanFile | None) -> PlanInputs:
    """The file's projects, efficiency gains, buffer and growth, the flags overriding the last two."""
    inputs = plan_file.inputs if plan_file is not None else PlanInputs()
    if options.buffer_factor is not None:
        inputs = replace(inputs, buffer_factor=options.buffer_factor)
    if options.growth_gpus_per_month is not None:
        inputs = replace(inputs, growth_gpus_per_month=options.growth_gpus_per_month)
    return inputs


def _history_or_trace(options: PlanOptions, given: PlanFileValues,
                      settings_file: str | None) -> tuple[str | None, str | None]:
    """(history file, trace file), exactly one of them set: the flags', else the settings file's."""
    if options.history_file is not None and options.trace_file is not None:
        raise BadInput("give --history or --trace, not both")
    history_file, trace_file = options.history_file, options.trace_file
    if history_file is None and trace_file is None:
        history_file, trace_file = given.history, given.trace
    if history_file is None and trace_file is None:
        raise BadInput(f"{settings_file}: no history or trace: give --history FILE or --trace FILE")
    return history_file, trace_file


def _read_usage(options: PlanOptions, given: PlanFileValues, history_file: str | None,
                trace_file: str | None) -> tuple[list[Job] | None, pd.DataFrame | None, str]:
    """The trace's jobs or the history's rows, and their source, checked to hold the backtest's 15 days."""
    jobs, frame = None, None
    if trace_file is not None:
        from greengpu.sim.traces import REPLAY_SPAN_S, read_trace

        trace_format = options.trace_format if options.trace_file is not None else given.trace_format or "csv"
        jobs = read_trace(trace_file, trace_format, max_span_s=REPLAY_SPAN_S).jobs
        span = demand_from_jobs(jobs)
    else:
        assert history_file is not None
        frame = read_history_frame(history_file)
        span = demand_from_history(frame)
    source = str(trace_file or history_file)
    days = (span.index[-1] - span.index[0]).total_seconds() / 86400 if len(span) else 0
    if days < 15:
        raise BadInput(f"{source}: {days:.1f} days of history; the backtest needs at least 15 (14 to train, 1 to "
                       "test)")
    return jobs, frame, source


@dataclass(frozen=True)
class InstalledGpus:
    """The inventory the plan sizes against (all None or empty without a cluster file)."""
    cluster: Cluster | None = None
    installed_gpus: int | None = None
    installed_by_model: dict[str, int] = field(default_factory=dict)


def _read_cluster(cluster_file: str | None, jobs: list[Job] | None, source: str) -> InstalledGpus:
    """The inventory's GPUs, in all and per GPU model; with a trace, no job may be one it can never run."""
    if cluster_file is None:
        return InstalledGpus()
    from greengpu.config.inventory import load_cluster

    cluster = load_cluster(cluster_file)
    installed = sum(cluster.node_types[n.type_name].gpus for n in cluster.nodes)
    by_model: dict[str, int] = {}
    for node in cluster.nodes:
        node_type = cluster.node_types[node.type_name]
        by_model[node_type.gpu_model] = by_model.get(node_type.gpu_model, 0) + node_type.gpus
    if jobs is not None:  # a job the cluster can never run would wait forever in the replays
        from greengpu.sim.feasibility import split_never_fitting

        _, never = split_never_fitting(jobs, cluster)
        if never:
            more = f" (and {len(never) - 1} more such jobs)" if len(never) > 1 else ""
            raise BadInput(f"{source}: {never[0]} ({cluster_file}){more}")
    return InstalledGpus(cluster, installed, by_model)


def _plan_settings(options: PlanOptions, given: PlanFileValues) -> PlanSettings:
    """Horizon, lead time, sizing and growth window: the flags', else the settings file's, else the defaults."""
    settings = PlanSettings(
        horizon_days=parse_days(options.horizon or given.horizon or "90d", "--horizon"),
        lead_time_days=parse_days(options.lead_time or given.lead_time or "12w", "--lead-time"),
        target_utilisation=options.target_utilisation or given.target_utilisation or 0.65,
        redundancy_gpus=(options.redundancy_gpus if options.redundancy_gpus is not None
                         else given.redundancy_gpus or 0),
        max_wait_probability=given.max_wait_probability or 0.10,
        growth_window_days=parse_days(given.growth_window or "4w", "growth_window"),
        origins=options.origins,
    )
    if options.baselines_only:
        settings = replace(settings, models=BASELINES, daily_candidates=False)
    return settings


def hourly_demand(loaded: LoadedInputs) -> Demand:
    """The demand to plan on, and (with a trace and a cluster) the savings replays, started."""
    if loaded.history is not None:
        return Demand(demand_from_history(loaded.history), "busy + pending, from the history",
                      demand_by_model_from_history(loaded.history), None)
    jobs = loaded.jobs
    assert jobs is not None
    if loaded.cluster is None:
        return Demand(demand_from_jobs(jobs), "offered load (no --cluster to replay on)",
                      demand_by_model_from_jobs(jobs), None)
    # What a cluster would have recorded: running + pending GPUs, from an always-on replay on this
    # inventory (a job that waits is pending, then runs). The default replay for the savings runs
    # beside it and then beside the backtest.
    replays = _start_savings(loaded.cluster, jobs)
    finish_s = replays.futures[DEMAND_POLICY].result()["finish_s"]
    return Demand(demand_from_replay(jobs, finish_s), "running + pending, always-on replay",
                  demand_by_model_from_jobs(jobs, finish_s), replays)


def run_plan(options: PlanOptions, progress: Callable[[str], None] | None = None) -> tuple[PlanPayload, PlanResult]:
    """Read the inputs, plan, and (with a trace and a cluster) replay the savings: the JSON payload.

    `progress` (when given) hears the name of each phase as it starts, for a display on a terminal."""
    phase = progress or (lambda name: None)
    phase("reading inputs")
    loaded = load_inputs(options)
    phase("hourly demand" + (" (always-on replay)" if loaded.cluster is not None and loaded.jobs else ""))
    demand = hourly_demand(loaded)
    series, settings = demand.series, loaded.settings
    phase("backtest and plan")
    started = time.perf_counter()
    result = make_plan(series, loaded.installed_gpus, settings, loaded.inputs, progress=phase)
    plan_s = time.perf_counter() - started
    payload: PlanPayload = {
        "forecast": result.forecast, "capacity": result.capacity, "months": result.months, "growth": result.growth,
        "flags": result.flags, "inputs": result.inputs, "scenarios": result.scenarios, "days": result.days,
        "day_ahead": result.day_ahead, "settings": settings_shown(settings),
        "history": {"source": loaded.source, "demand": demand.kind, "hours": len(series),
                    "first": series.index[0].isoformat(), "last": series.index[-1].isoformat(),
                    "recent": _recent_history(series), "daily_peaks": _daily_peaks(series), "credit": loaded.credit}}
    if loaded.settings_file is not None:
        payload["settings"]["file"] = loaded.settings_file
    if set(demand.by_model) - {ANY_MODEL}:  # some demand is pinned to a GPU model: size each model's pool
        payload["gpu_models"] = size_by_model(demand.by_model, loaded.installed_by_model, settings)
    payload["timing"] = {"plan_s": round(plan_s, 2), "backtest_s": result.forecast["backtest_s"]}
    if demand.replays is not None:
        phase("savings replays")
        started = time.perf_counter()
        payload["savings"] = _finish_savings(demand.replays)
        payload["timing"]["savings_wait_s"] = round(time.perf_counter() - started, 2)
    return payload, result


RECENT_DAYS = 14


def _daily_peaks(series: pd.Series) -> list[tuple[str, float]]:
    peaks = series.astype(float).resample("D").max().dropna()
    return [(when.date().isoformat(), round(float(value), 1))
            for when, value in zip(pd.DatetimeIndex(peaks.index), peaks.to_numpy(dtype=float), strict=True)]


def _recent_history(series: pd.Series) -> list[tuple[str, float]]:
    """The last two weeks, hourly, for the chart beside the day-ahead forecast."""
    hourly = series.astype(float).resample("h").mean().interpolate().iloc[-RECENT_DAYS * 24:]
    return [(when.isoformat(), round(float(value), 1))
            for when, value in zip(pd.DatetimeIndex(hourly.index), hourly.to_numpy(dtype=float), strict=True)]


SAVINGS_POLICIES = ("always-on", "default")
DEMAND_POLICY = "always-on"
"""The replay whose running + pending GPUs are a trace's demand: the cluster as it is, without greengpu's levers."""


def _replay(cluster: Cluster, policy_name: str, jobs: list[Job], keep_finish_s: bool) -> ReplayFigures:
    from greengpu.config.policy import load_policy
    from greengpu.sim.engine import Simulation

    simulation = Simulation(cluster, load_policy(policy_name), jobs, attribute=True)
    result = simulation.run()
    assert simulation.attribution is not None
    out: ReplayFigures = {"energy_kwh": result.energy_kwh, "gpu_energy_kwh": result.gpu_energy_kwh,
                          "cost": result.cost, "co2_kg": result.co2_kg, "wait_s": result.wait_s.to_json(),
                          "node_sleep_hours": result.node_sleep_hours, "wakes": result.wakes,
                          "tenants": simulation.attribution.tenant_totals()}
    if keep_finish_s:  # per-job finish times, for the always-on demand; not sent back otherwise
        out["finish_s"] = simulation.finish_s
    return out


@dataclass(frozen=True)
class SavingsReplays:
    """The savings replays running in worker processes, one per policy of SAVINGS_POLICIES."""
    pool: ProcessPoolExecutor
    futures: dict[str, Future[ReplayFigures]]


def _start_savings(cluster: Cluster, jobs: list[Job]) -> SavingsReplays:
    # fork: a worker starts with greengpu and its libraries already imported (the jobs are still pickled
    # to it, about a second for Philly's 64,483).
    pool = ProcessPoolExecutor(max_workers=len(SAVINGS_POLICIES), mp_context=multiprocessing.get_context("fork"))
    return SavingsReplays(pool, {name: pool.submit(_replay, cluster, name, jobs, name == DEMAND_POLICY)
                                 for name in SAVINGS_POLICIES})


def _finish_savings(replays: SavingsReplays) -> Savings:
    try:
        base, ours = (replays.futures[name].result() for name in SAVINGS_POLICIES)
    finally:
        replays.pool.shutdown()
    base.pop("finish_s", None)  # per-job times: for the demand, not for the report
    return {"always-on": base, "default": ours,
            "saved": {k: base[k] - ours[k] for k in ("energy_kwh", "cost", "co2_kg")}}
