"""Hourly GPU demand series: from a usage history, or from a job trace's offered load.

Demand is running + pending GPUs (running alone is censored by capacity and quota). From a trace,
the offered load is computed exactly: each job adds its GPUs from submission for its duration, as
`always-on` runs it when it does not queue (on Philly 97% of jobs start at once under always-on);
each hour's value is the mean over the hour.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from greengpu.model import Job

HOUR_S = 3600.0


def demand_from_jobs(jobs: Sequence[Job]) -> pd.Series:
    """Offered load: mean GPUs demanded in each UTC hour, each job from its submission for its duration
    (the demand if no job ever waited)."""
    starts = np.array([j.submit_time_s for j in jobs], dtype=float)
    return demand_from_intervals(starts, starts + np.array([j.duration_s for j in jobs], dtype=float),
                                 np.array([j.gpus for j in jobs], dtype=float))


def demand_from_replay(jobs: Sequence[Job], finish_s: dict[str, float]) -> pd.Series:
    """Running + pending GPUs per hour as a replay saw them: each job from its submission to its finish
    (a job that waited is pending first, then running). Jobs without a finish are left out."""
    kept = [j for j in jobs if j.job_id in finish_s]
    return demand_from_intervals(np.array([j.submit_time_s for j in kept], dtype=float),
                                 np.array([finish_s[j.job_id] for j in kept], dtype=float),
                                 np.array([j.gpus for j in kept], dtype=float))


def demand_from_intervals(starts: np.ndarray, ends: np.ndarray, gpus: np.ndarray) -> pd.Series:
    """Mean GPUs held in each UTC hour from the first start to the last end, by `gpus[i]` over
    `[starts[i], ends[i])`."""
    if len(starts) == 0:
        return pd.Series(dtype=float)
    first_hour = np.floor(starts.min() / HOUR_S) * HOUR_S
    hours = int(np.ceil((ends.max() - first_hour) / HOUR_S))
    gpu_seconds = np.zeros(hours + 1)
    # Each job contributes gpus x overlap to every hour it spans: add whole hours by a difference array,
    # and the partial first and last hours directly.
    start_h = ((starts - first_hour) // HOUR_S).astype(int)
    end_h = ((ends - first_hour) // HOUR_S).astype(int)
    same = start_h == end_h
    np.add.at(gpu_seconds, start_h[same], gpus[same] * (ends[same] - starts[same]))
    spans = ~same
    np.add.at(gpu_seconds, start_h[spans], gpus[spans] * (first_hour + (start_h[spans] + 1) * HOUR_S - starts[spans]))
    np.add.at(gpu_seconds, end_h[spans], gpus[spans] * (ends[spans] - (first_hour + end_h[spans] * HOUR_S)))
    whole = np.zeros(hours + 2)
    np.add.at(whole, start_h[spans] + 1, gpus[spans])
    np.add.at(whole, end_h[spans], -gpus[spans])
    gpu_seconds += np.cumsum(whole)[: hours + 1] * HOUR_S
    index = pd.date_range(pd.Timestamp(first_hour, unit="s", tz="UTC"), periods=hours + 1, freq="h")
    return pd.Series(gpu_seconds / HOUR_S, index=index, name="gpus_demand")


def demand_from_history(frame: pd.DataFrame) -> pd.Series:
    """`time`, `gpus_busy` [, `gpus_pending`] [, `tenant`] [, `gpu_model`] rows (docs/FORECAST.md)
    -> hourly demand of the cluster."""
    values = frame["gpus_busy"].astype(float)
    if "gpus_pending" in frame:
        values = values + frame["gpus_pending"].fillna(0).astype(float)
    series = pd.Series(values.to_numpy(), index=pd.DatetimeIndex(pd.to_datetime(frame["time"], utc=True)))
    if "tenant" in frame or "gpu_model" in frame:
        series = series.groupby(level=0).sum()  # per-tenant and per-model rows add up to the cluster
    return series.sort_index().resample("h").mean()


ANY_MODEL = "(any model)"


def model_of_job(job: Job) -> str:
    """The one GPU model a job is pinned to, or ANY_MODEL when it accepts several or any."""
    return next(iter(job.gpu_types)) if job.gpu_types is not None and len(job.gpu_types) == 1 else ANY_MODEL


def demand_by_model_from_jobs(jobs: Sequence[Job], finish_s: dict[str, float] | None = None) -> dict[str, pd.Series]:
    """Hourly demand per GPU model a job is pinned to (ANY_MODEL: the rest), on one common index;
    offered load, or with `finish_s` from a replay, running + pending."""
    groups: dict[str, list[Job]] = {}
    for job in jobs:
        groups.setdefault(model_of_job(job), []).append(job)
    return _aligned({model: demand_from_jobs(group) if finish_s is None else demand_from_replay(group, finish_s)
                     for model, group in groups.items()})


def demand_by_model_from_history(frame: pd.DataFrame) -> dict[str, pd.Series]:
    """Per `gpu_model` (an optional history column; empty: ANY_MODEL), the hourly demand."""
    if "gpu_model" not in frame:
        return {}
    models = frame["gpu_model"].fillna("").astype(str).str.strip().replace("", ANY_MODEL)
    return _aligned({str(model): demand_from_history(part) for model, part in frame.groupby(models)})


def _aligned(series_by_model: dict[str, pd.Series]) -> dict[str, pd.Series]:
    if not series_by_model:
        return {}
    index = series_by_model[next(iter(series_by_model))].index
    for series in series_by_model.values():
        index = index.union(series.index)
    full = pd.date_range(index.min(), index.max(), freq="h")
    # No row for a model in an hour means no demand for it then.
    return {model: series.reindex(full).fillna(0.0) for model, series in sorted(series_by_model.items())}
