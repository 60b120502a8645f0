"""Rolling-origin backtest and quantiles calibrated from backtest errors (the gate is in `gate.py`).

- Origins: every `spacing` steps (a day) back from the last cut that leaves one horizon to test, down
  to `min_train_h` of history (two weeks for the hourly plan): all of them by default (the last
  `MAX_ORIGINS`, half a year), thinned evenly only when a count is asked for; every origin then sits at the
  same hour of the day as the live forecast's. Asked for more origins than there are days (or with
  fewer than `MIN_ORIGINS` days to start from), they are spread evenly at a finer step, and overlap.
  Every model forecasts `horizon_h` steps from each.
- Fitting: baselines on the whole history before the origin; candidates on a trailing window
  (`candidate_window`). Models that keep their parameters (`ModelSpec.fit`: ETS, UnobservedComponents,
  SARIMAX) estimate them again once they are `REFIT_EVERY` (7 days) old, counted in days of the series
  whatever the origins' spacing, starting from the old ones (a warm start); in between they only run
  them over the new window (estimated on earlier data only, so nothing leaks from the future).
  An ensemble takes the per-step median of its members' forecasts at the same origin.
- Workers: the fits run as tasks of one model over `CHUNK_REFITS` refit periods, in forked worker
  processes, one per CPU, each with one BLAS thread (`blas.py`). A task's first fit starts cold, so the
  figures are the same for any number of workers.
- Metrics per origin: MASE (scaled by the training window's in-sample one-day seasonal naive error),
  sMAPE; and, for the calibrated bands, pinball loss and interval coverage.
- Calibration: per horizon step, the empirical quantiles of the shipped model's backtest errors.
  Coverage is measured leave-one-origin-out (each origin's band comes from the other origins' errors),
  so the reported coverage is what a new forecast can expect, not a fit to itself.
"""

from __future__ import annotations

import multiprocessing
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from greengpu.forecast.blas import one_blas_thread, one_blas_thread_for_good
from greengpu.forecast.models import (
    BASELINES,
    CANDIDATES,
    DAY_H,
    Fitted,
    GuardedForecast,
    ModelSpec,
    guarded,
    median_of,
)

CANDIDATE_WINDOW_H = 21 * DAY_H
MAX_ORIGINS = 182
"""Origins a backtest uses at most by default: the last half year of daily origins, the time budget. On two
cores busy with other work, 168 origins of every hourly model took 38 s and a plan 45 s; 365 took 87 s
and 101 s, over the 60 s a plan may take. `origins=` asks for another count (up to 365 from the command)."""
MIN_ORIGINS = 10
"""Fewer days than this to start from, and the origins are spread at a finer step (they then overlap)."""
SHORT_HISTORY_ORIGINS = 30
"""Origins spread at a finer step when there are fewer than `MIN_ORIGINS` days to start from."""
REFIT_EVERY = pd.Timedelta(days=7)
"""Models that keep their parameters (`ModelSpec.fit`) estimate them afresh once they are this old, in days
of the series, whatever the spacing of the origins; between refits they only filter the new window."""
CHUNK_REFITS = 4
"""A worker's task: one model over the origins of this many refit periods (four weeks of daily origins).
Each task's first fit starts cold, so the results do not depend on how many workers share the tasks."""

@dataclass(frozen=True)
class Prepared:
    series: pd.Series
    flags: tuple[str, ...]


def prepare(series: pd.Series, capacity: float | None = None) -> Prepared:
    """An hourly series without holes, and what was done or noticed on the way (gaps, a ceiling)."""
    flags: list[str] = []
    hourly = series.astype(float).resample("h").mean()
    missing = int(hourly.isna().sum())
    if missing:
        flags.append(f"{missing} missing hours filled by interpolation")
        hourly = hourly.interpolate(method="time").bfill().ffill()
    ceiling = capacity if capacity is not None else float(hourly.max())
    at_ceiling = float((hourly >= ceiling - 1e-9).mean())
    if ceiling > 0 and at_ceiling >= 0.05:
        flags.append(f"demand sits at its ceiling ({ceiling:g}) {at_ceiling:.0%} of the time: it may be capped "
                     "by capacity or quota, so the forecast understates demand")
    hourly = hourly.asfreq("h")  # statsmodels wants the frequency on the index
    return Prepared(hourly, tuple(flags))


@dataclass(frozen=True)
class ModelBacktest:
    name: str
    kind: str
    mase: float
    smape: float
    per_origin_mase: tuple[float, ...]
    forecasts: np.ndarray
    """Shape (origins, horizon)."""
    fallbacks: int
    fit_s: float
    """Mean seconds per fit and forecast (for an ensemble, its members' together)."""


@dataclass(frozen=True)
class Backtest:
    origins: tuple[int, ...]
    horizon_h: int
    actuals: np.ndarray
    models: dict[str, ModelBacktest]
    notes: list[str] = field(default_factory=list)
    origin_times: tuple[pd.Timestamp, ...] = ()
    """The first forecast step of each origin."""


def _thin(positions: list[int], count: int) -> list[int]:
    """`count` of `positions`, evenly spread, keeping the first and the last."""
    if count >= len(positions):
        return positions
    if count == 1:
        return positions[-1:]
    picks = np.round(np.linspace(0, len(positions) - 1, count)).astype(int)
    return [positions[i] for i in sorted(set(picks.tolist()))]


def origin_positions(length: int, horizon_h: int, count: int | None, min_train_h: int,
                     spacing: int | None = None) -> list[int]:
    """Cut-off indexes (training is `[:cut]`, test `[cut:cut + horizon]`).

    With `spacing`, every `spacing` steps back from the last cut down to `min_train_h`: all of them when
    `count` is None (the last `MAX_ORIGINS`), else thinned evenly to `count`. Without it, or when more are
    asked for than that gives, `count` cuts spread evenly between `min_train_h` and the last cut (also,
    `SHORT_HISTORY_ORIGINS` of them, when `count` is None and fewer than `MIN_ORIGINS` spaced cuts fit)."""
    last = length - horizon_h
    if last < min_train_h:
        return []
    if spacing:
        aligned = list(range(last, min_train_h - 1, -spacing))[::-1]
        if count is None and len(aligned) >= MIN_ORIGINS:
            return aligned[-MAX_ORIGINS:]
        if count is not None and count <= len(aligned):
            return _thin(aligned, max(1, count))
    count = max(1, min(SHORT_HISTORY_ORIGINS if count is None else count, last - min_train_h + 1))
    if count == 1:
        return [last]
    return sorted({int(round(min_train_h + i * (last - min_train_h) / (count - 1))) for i in range(count)})


def mase_scale(train: np.ndarray, season: int = DAY_H) -> float:
    if len(train) > season:
        scale = float(np.mean(np.abs(train[season:] - train[:-season])))
    else:
        scale = float(np.mean(np.abs(np.diff(train)))) if len(train) > 1 else 0.0
    return max(scale, 1e-9)


def smape(actual: np.ndarray, forecast: np.ndarray) -> float:
    denominator = np.abs(actual) + np.abs(forecast)
    ratio = np.where(denominator > 0, 2.0 * np.abs(forecast - actual) / np.where(denominator > 0, denominator, 1), 0)
    return float(np.mean(ratio) * 100.0)


def pinball(actual: np.ndarray, quantile_forecast: np.ndarray, tau: float) -> float:
    diff = actual - quantile_forecast
    return float(np.mean(np.maximum(tau * diff, (tau - 1.0) * diff)))


def _with_kept_parameters(spec: ModelSpec, history: pd.Series, horizon_h: int, season: int,
                          fitted: Fitted | None, refit: bool) -> tuple[GuardedForecast, Fitted | None]:
    """`spec`'s guarded forecast: `fitted`'s parameters run over `history` (a filter pass), or, when `refit`,
    parameters estimated afresh starting from them (cold when there are none, or when the warm start fails)."""
    assert spec.fit is not None
    fit = spec.fit
    kept: list[Fitted] = []

    def produce() -> np.ndarray:
        model: Fitted | None = None
        if fitted is not None:
            try:
                model = fitted.refit(history) if refit else fitted.extend(history)
            except Exception:  # parameters that no longer filter (or start) the new window: estimate afresh
                model = None
        kept.append(model if model is not None else fit(history))
        return kept[-1].forecast(horizon_h)

    result = guarded(spec, history, horizon_h, season, produce)
    return result, (kept[-1] if kept and not result.fell_back else None)


def refit_schedule(times: Sequence[pd.Timestamp], every: pd.Timedelta = REFIT_EVERY) -> list[bool]:
    """Per origin, whether kept parameters are estimated afresh there: at the first origin, then at the first
    origin at least `every` after the last refit (in time, not in origins: thinned origins refit as often)."""
    flags: list[bool] = []
    last: pd.Timestamp | None = None
    for when in times:
        due = last is None or when - last >= every
        if due:
            last = when
        flags.append(due)
    return flags


def task_chunks(refits: Sequence[bool], refits_per_chunk: int = CHUNK_REFITS) -> list[tuple[int, int]]:
    """Origin index ranges [start, stop) of the workers' tasks: each starts at a refit and holds
    `refits_per_chunk` refit periods."""
    starts = [i for i, due in enumerate(refits) if due][::refits_per_chunk]
    return list(zip(starts, [*starts[1:], len(refits)][:len(starts)], strict=True))


@dataclass(frozen=True)
class _Job:
    """What every task of one backtest shares (a worker process inherits it when it forks)."""
    series: pd.Series
    specs: tuple[ModelSpec, ...]
    cuts: tuple[int, ...]
    refits: tuple[bool, ...]
    horizon_h: int
    season: int
    candidate_window: int | None


@dataclass(frozen=True)
class _TaskResult:
    forecasts: list[np.ndarray]
    fallbacks: int
    elapsed_s: float


_JOB: _Job | None = None
"""The backtest the worker processes serve: set before they fork, so no model or series is pickled."""


def _run_task(model_index: int, start: int, stop: int, job: _Job | None = None) -> _TaskResult:
    """One model over origins `start` to `stop` of the job, fitting cold at `start`."""
    job = job if job is not None else _JOB
    assert job is not None
    spec = job.specs[model_index]
    forecasts, fallbacks, elapsed = [], 0, 0.0
    fitted: Fitted | None = None
    for index in range(start, stop):
        cut = job.cuts[index]
        # Candidates fit on the last `candidate_window` steps only: fit time grows with the history, and
        # three weeks hold both seasonalities (the weekly one three times).
        windowed = spec.kind == "candidate" and job.candidate_window is not None
        first = max(0, cut - job.candidate_window) if windowed and job.candidate_window is not None else 0
        history = job.series.iloc[first:cut]
        began = time.perf_counter()
        if spec.fit is not None:
            result, fitted = _with_kept_parameters(spec, history, job.horizon_h, job.season, fitted,
                                                   refit=job.refits[index])
        else:
            result = guarded(spec, history, job.horizon_h, job.season)
        elapsed += time.perf_counter() - began
        fallbacks += result.fell_back
        forecasts.append(result.values)
    return _TaskResult(forecasts, fallbacks, elapsed)


def _worker_start() -> None:
    one_blas_thread_for_good()  # the workers are the parallelism: one BLAS thread each


def available_cpus() -> int:
    """CPUs this process may run on (its affinity, not the machine's count)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def _run_tasks(job: _Job, tasks: list[tuple[int, int, int]], workers: int,
               progress: Callable[[int, int], None] | None) -> dict[tuple[int, int, int], _TaskResult]:
    """Every task, in `workers` forked processes; here, in this process, with one worker, without fitted
    models (baselines take microseconds: a fork would cost more), or off Linux (fork is not available on
    Windows, and unsafe on macOS once its system libraries are loaded)."""
    global _JOB
    done: dict[tuple[int, int, int], _TaskResult] = {}
    report = progress or (lambda finished, total: None)
    fitting = any(spec.kind == "candidate" for spec in job.specs)
    if workers <= 1 or len(tasks) <= 1 or not fitting or not sys.platform.startswith("linux"):
        with one_blas_thread():
            for task in tasks:
                done[task] = _run_task(*task, job=job)
                report(len(done), len(tasks))
        return done
    from concurrent.futures import ProcessPoolExecutor, as_completed

    _JOB = job
    try:
        with ProcessPoolExecutor(max_workers=min(workers, len(tasks)), initializer=_worker_start,
                                 mp_context=multiprocessing.get_context("fork")) as pool:
            futures = {pool.submit(_run_task, *task): task for task in tasks}
            for future in as_completed(futures):
                done[futures[future]] = future.result()
                report(len(done), len(tasks))
    finally:
        _JOB = None
    return done


def _score(spec: ModelSpec, forecasts: list[np.ndarray], actuals: np.ndarray, scales: list[float], fallbacks: int,
           fit_s: float) -> ModelBacktest:
    per_origin = [float(np.mean(np.abs(a - f))) / s for a, f, s in zip(actuals, forecasts, scales, strict=True)]
    smapes = [smape(a, f) for a, f in zip(actuals, forecasts, strict=True)]
    return ModelBacktest(spec.name, spec.kind, float(np.mean(per_origin)) if per_origin else float("nan"),
                         float(np.mean(smapes)) if smapes else float("nan"), tuple(per_origin),
                         np.array(forecasts) if forecasts else np.zeros((0, actuals.shape[1])), fallbacks, fit_s)


def run_backtest(series: pd.Series, horizon_h: int = DAY_H, origins: int | None = None, min_train_h: int = 7 * DAY_H,
                 models: Sequence[ModelSpec] = BASELINES + CANDIDATES, season: int = DAY_H,
                 candidate_window: int | None = CANDIDATE_WINDOW_H, spacing: int | None = DAY_H, workers: int = 1,
                 progress: Callable[[int, int], None] | None = None) -> Backtest:
    """Every model from every origin. `horizon_h`, `min_train_h`, `season` (the MASE scale's and the
    fallback's), `candidate_window` and `spacing` are in steps of the series: hours, or days for daily
    peaks. `origins` None: every origin `spacing` allows (the last `MAX_ORIGINS`). `workers` processes
    share the fits (the results are the same for any count); `progress` hears (tasks done, tasks)."""
    values = series.to_numpy(dtype=float)
    cuts = origin_positions(len(values), horizon_h, origins, min_train_h, spacing)
    notes = _origin_notes(len(values), len(cuts), horizon_h, origins, min_train_h, spacing)
    actuals = np.array([values[c:c + horizon_h] for c in cuts]) if cuts else np.zeros((0, horizon_h))
    scales = [mase_scale(values[:cut], season) for cut in cuts]
    # The first forecast step of each origin: refits are scheduled in time, so thinned origins refit as often.
    times = tuple(series.index[c] for c in cuts)
    refits = refit_schedule(times)
    ensembles = [spec for spec in models if spec.members and all(m in {s.name for s in models} for m in spec.members)]
    singles = tuple(spec for spec in models if spec not in ensembles)
    job = _Job(series, singles, tuple(cuts), tuple(refits), horizon_h, season, candidate_window)
    chunks = task_chunks(refits)
    # Candidates first: the costly tasks start early, so the workers finish together.
    tasks = [(m, start, stop) for m in sorted(range(len(singles)), key=lambda m: singles[m].kind != "candidate")
             for start, stop in chunks]
    done = _run_tasks(job, tasks, workers, progress)
    results: dict[str, ModelBacktest] = {}
    for index, spec in enumerate(singles):
        parts = [done[(index, start, stop)] for start, stop in chunks]
        forecasts = [f for part in parts for f in part.forecasts]
        elapsed = sum(part.elapsed_s for part in parts)
        results[spec.name] = _score(spec, forecasts, actuals, scales, sum(part.fallbacks for part in parts),
                                    elapsed / max(1, len(cuts)))
    for spec in ensembles:
        members = [results[name] for name in spec.members]
        forecasts = [median_of([m.forecasts[i] for m in members]) for i in range(len(cuts))]
        results[spec.name] = _score(spec, forecasts, actuals, scales, 0, sum(m.fit_s for m in members))
    ordered = {spec.name: results[spec.name] for spec in models}
    return Backtest(tuple(cuts), horizon_h, actuals, ordered, notes, times)


def _origin_notes(length: int, count: int, horizon_h: int, origins: int | None, min_train_h: int,
                  spacing: int | None) -> list[str]:
    """What a reader of the backtest should know about its origins: too few, closer than asked, or thinned."""
    spaced = (length - horizon_h - min_train_h) // spacing + 1 if spacing else count
    if count < MIN_ORIGINS:
        return [f"only {count} origins: the history is short for a {horizon_h}-step horizon"]
    if spacing and origins is None and spaced < count:
        return [f"only {max(0, spaced)} origins {spacing} steps apart: the history is short, so {count} "
                "origins closer together (and overlapping) were backtested"]
    if spacing and origins is None and spaced > count:
        return [f"{count} origins backtested, the last {count} of the {spaced} the history holds "
                f"(at most {MAX_ORIGINS} by default; --origins asks for another count)"]
    return []
