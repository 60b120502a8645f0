"""Vectorised trace reading with pandas for well-formed files (the common case).

The exact row-by-row reader in traces.py stays the reference: whenever anything in a file is not
clean (a bad value, a width mismatch, a duplicate id, blank lines that would shift line numbers),
this returns None and the caller falls back to it, so error messages always name the exact line.
Both paths build identical jobs; a test checks that on the public Philly trace.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from greengpu.config.limits import MAX_DURATION_S, MAX_GPUS, MAX_PRIORITY, MAX_TIME_S, MIN_TIME_S
from greengpu.model import JOB_CLASSES, Job
from greengpu.sim.trace_formats import SHARED_PROFILES
from greengpu.slurm_json import QOS_PRIORITY

_EPOCH = pd.Timestamp("1970-01-01", tz="UTC")
_MAX_ELAPSED_DIGITS = 9
"""Longest field of a sacct Elapsed the int64 arithmetic takes (longer ones: the exact reader says why)."""


def _seconds(series: pd.Series) -> pd.Series | None:
    stamps = pd.to_datetime(series, format="ISO8601", utc=True, errors="coerce")
    if stamps.isna().any():
        return None
    seconds = (stamps - _EPOCH).dt.total_seconds()
    if not ((seconds >= MIN_TIME_S) & (seconds < MAX_TIME_S)).all():
        return None
    return seconds


def _numbers(series: pd.Series) -> pd.Series:
    return pd.to_numeric(series, errors="coerce")


def _valid_durations(duration: pd.Series) -> bool:
    return bool((np.isfinite(duration) & (duration > 0) & (duration <= MAX_DURATION_S)).all())


def _valid_gpus(gpus: pd.Series) -> bool:
    fractional = (gpus > 0) & (gpus < 1)
    whole = (gpus >= 1) & (gpus <= MAX_GPUS) & (np.floor(gpus) == gpus)
    return bool((fractional | whole).all())


def _has_columns(frame: pd.DataFrame, columns: tuple[str, ...]) -> bool:
    """Whether every column the reader reads is there (else the exact reader names the missing ones)."""
    return set(columns) <= set(frame.columns) and not frame.columns.duplicated().any()


def _gpu_values(gpus: pd.Series) -> list[float]:
    return [int(g) if g >= 1 else g for g in gpus.tolist()]


def _clean_lines(path: Path, rows: int) -> bool:
    """True when the file is header plus one physical line per row (so line = index + 2)."""
    data = path.read_bytes()
    lines = data.count(b"\n") + (0 if data.endswith(b"\n") else 1)
    return lines == rows + 1 and b"\n\n" not in data and b"\r\n\r\n" not in data


def _frame(path: Path, delimiter: str) -> pd.DataFrame | None:
    try:
        return pd.read_csv(path, sep=delimiter, dtype=str, keep_default_na=False, engine="c",
                           skip_blank_lines=False)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError, ValueError, OSError):
        return None


def fast_philly(path: Path) -> list[Job] | None:
    """Jobs of a clean Philly CSV, or None."""
    frame = _frame(path, ",")
    if frame is None or not _has_columns(frame, ("timestamp", "duration", "num_gpus", "cluster")) \
            or frame.isna().any().any() or not _clean_lines(path, len(frame)):
        return None
    duration = _numbers(frame["duration"])
    gpus = _numbers(frame["num_gpus"])
    submit = _seconds(frame["timestamp"])
    tenants = frame["cluster"].str.strip()
    if submit is None or not _valid_durations(duration) or not _valid_gpus(gpus) or (tenants == "").any():
        return None
    lines = (frame.index + 2).tolist()
    return [Job.trusted(job_id=f"philly-{line}", tenant=t, gpus=g, duration_s=d, submit_time_s=s)
            for line, t, g, d, s in zip(lines, tenants.tolist(), _gpu_values(gpus), duration.tolist(),
                                        submit.tolist(), strict=True)]


def fast_canonical(path: Path) -> list[Job] | None:
    """Jobs of a clean canonical CSV with only the common optional columns, or None."""
    frame = _frame(path, ",")
    if frame is None or not _has_columns(frame, ("job_id", "submit_time", "duration_s", "gpus", "tenant")) \
            or frame.isna().any().any() or not _clean_lines(path, len(frame)):
        return None
    supported = {"job_id", "submit_time", "duration_s", "gpus", "tenant", "priority", "class",
                 "checkpoint_interval_s", "interruptible", "gpu_type", "deadline_s", "gpu_profile"}
    if set(frame.columns) - supported:
        return None
    frame = frame.apply(lambda column: column.str.strip())
    ids = frame["job_id"]
    if (ids == "").any() or ids.duplicated().any() or (frame["tenant"] == "").any():
        return None
    duration = _numbers(frame["duration_s"])
    gpus = _numbers(frame["gpus"])
    submit = _seconds(frame["submit_time"])
    if submit is None or not _valid_durations(duration) or not _valid_gpus(gpus):
        return None
    rows = len(frame)
    classes = frame["class"].replace("", "training") if "class" in frame else pd.Series(["training"] * rows)
    if not classes.isin(JOB_CLASSES).all():
        return None
    priority = _numbers(frame["priority"].replace("", "0")) if "priority" in frame else pd.Series([0] * rows)
    if priority.isna().any() or (np.floor(priority) != priority).any() or (priority.abs() > MAX_PRIORITY).any():
        return None
    checkpoint: list[float | None] = [None] * rows
    if "checkpoint_interval_s" in frame:
        raw = frame["checkpoint_interval_s"]
        values = _numbers(raw.replace("", "nan"))
        given = raw != ""
        if not _valid_durations(values[given]):
            return None
        checkpoint = [v if g else None for v, g in zip(values.tolist(), given.tolist(), strict=True)]
    if any((frame[c] != "").any() for c in ("interruptible", "gpu_type", "deadline_s") if c in frame):
        return None  # rarer columns: the exact reader handles them
    profiles = _profiles(frame, gpus)
    if profiles is None:
        return None
    jobs = [
        Job.trusted(job_id=i, tenant=t, gpus=g, duration_s=d, submit_time_s=s, priority=int(p), job_class=c,
            interruptible=c in ("training", "batch"), checkpoint_interval_s=k)
        for i, t, g, d, s, p, c, k in zip(
            ids.tolist(), frame["tenant"].tolist(), _gpu_values(gpus), duration.tolist(), submit.tolist(),
            priority.tolist(), classes.tolist(), checkpoint, strict=True)
    ]
    if profiles:
        jobs = [Job.trusted(**{**vars(j), "gpu_profile": p}) if p else j for j, p in zip(jobs, profiles, strict=True)]
    return jobs


def _profiles(frame: pd.DataFrame, gpus: pd.Series) -> list[str] | None:
    """The `gpu_profile` cells ([] without the column or with every cell empty); None when one is not clean (an
    unknown profile, or gpus other than 1 beside one: the exact reader says which)."""
    if "gpu_profile" not in frame:
        return []
    profiles = frame["gpu_profile"]
    given = profiles != ""
    if not given.any():
        return []
    if not profiles[given].isin(SHARED_PROFILES).all() or not (gpus[given] == 1).all():
        return None
    return [str(p) for p in profiles.tolist()]


_QOS_DEFAULT = 0


def fast_sacct(path: Path) -> list[Job] | None:
    """Jobs of a clean `sacct --parsable2` file, or None (ignored rows are counted by the exact reader)."""
    frame = _frame(path, "|")
    if frame is None or not _has_columns(frame, ("JobID", "Submit", "Elapsed", "AllocTRES", "Account", "QOS")) \
            or frame.isna().any().any() or not _clean_lines(path, len(frame)):
        return None
    ids = frame["JobID"].str.strip()
    gpus_text = frame["AllocTRES"].str.extract(r"gres/gpu(?::[^=,]+)?=(\d+)", expand=False)
    elapsed = frame["Elapsed"].str.strip().str.extract(r"^(?:(\d+)-)?(?:(\d+):)?(\d+):(\d+)(?:\.\d+)?$")
    too_long = (elapsed.fillna("").apply(lambda part: part.str.len()) > _MAX_ELAPSED_DIGITS).any().any()
    if elapsed[3].isna().any() or (ids == "").any() or too_long:
        return None
    parts = elapsed.fillna("0").astype("int64")
    duration = ((parts[0] * 24 + parts[1]) * 60 + parts[2]) * 60 + parts[3]
    keep = ~ids.str.contains(".", regex=False) & gpus_text.notna()
    gpus = pd.to_numeric(gpus_text.where(keep, "0"))
    keep &= (gpus >= 1) & (gpus <= MAX_GPUS) & (duration > 0) & (duration <= MAX_DURATION_S)
    if not keep.all():
        return None  # steps, CPU-only or never-run rows: the exact reader counts them as ignored
    if ids.duplicated().any():
        return None
    submit = _seconds(frame["Submit"])
    if submit is None:
        return None
    accounts = frame["Account"].str.strip().replace("", "unknown")
    priority = [QOS_PRIORITY.get(q, _QOS_DEFAULT) for q in frame["QOS"].str.strip().str.lower().tolist()]
    return [Job.trusted(job_id=f"slurm-{i}", tenant=a, gpus=int(g), duration_s=float(d), submit_time_s=s, priority=p)
            for i, a, g, d, s, p in zip(ids.tolist(), accounts.tolist(), gpus.tolist(), duration.tolist(),
                                        submit.tolist(), priority, strict=True)]
