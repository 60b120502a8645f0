"""Job trace readers: canonical CSV, the public Philly CSV, and Slurm `sacct --parsable2` output.

Each reader yields `Job`s sorted by submit time. A malformed row stops the read with
`file:line: column: what is wrong` (a `BadInput`, exit code 2), unless `skip_bad_rows` is set, in
which case it is counted in `TraceResult.skipped`. Formats: docs/TRACES.md.
"""

from __future__ import annotations

import csv
import gc
import math
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from operator import attrgetter
from pathlib import Path

from greengpu.config.limits import (
    MAX_CSV_BYTES,
    MAX_DURATION_S,
    MAX_GPUS,
    MAX_PRIORITY,
    OutOfRange,
    check_file_size,
    duration_s,
)
from greengpu.config.series import parse_time_s
from greengpu.config.yamlsource import shown
from greengpu.errors import BadInput
from greengpu.model import JOB_CLASSES, TIMESLICE, Job
from greengpu.sim.trace_formats import CANONICAL_REQUIRED, SHARED_PROFILES, TRACE_FORMATS
from greengpu.slurm_json import QOS_PRIORITY

_WIDTH_KEY = "\x00width"
_TRUE = {"true", "1", "yes", "y", "t"}
_FALSE = {"false", "0", "no", "n", "f"}
_GRES_GPU = re.compile(r"gres/gpu(?::[^=,]+)?=(\d+)")
_ELAPSED = re.compile(r"^(?:(\d+)-)?(?:(\d+):)?(\d+):(\d+)(?:\.\d+)?$")



REPLAY_SPAN_S = MAX_DURATION_S
"""Longest span of submit times a replay takes (ten years): its clock walks the span hour by hour."""


class BadRow(Exception):
    """One row's problem: the column and what is wrong."""

    def __init__(self, column: str, message: str) -> None:
        super().__init__(f"{column}: {message}")


@dataclass
class TraceResult:
    """The jobs of a trace, sorted by submit time, and what was skipped."""

    jobs: list[Job]
    skipped: int = 0
    ignored: int = 0
    """Rows that are valid but not GPU work (CPU-only jobs, job steps, jobs that never ran)."""
    first_error: str | None = None
    notes: list[str] = field(default_factory=list)


def _duration(row: dict[str, str], column: str) -> float:
    """A positive duration in seconds, at most MAX_DURATION_S (ten years)."""
    raw = (row.get(column) or "").strip()
    try:
        value = float(raw)
    except ValueError:
        raise BadRow(column, f"not a number: {shown(raw)}") from None
    if not math.isfinite(value):
        raise BadRow(column, f"not a finite number: {shown(raw)}")
    if value <= 0:
        raise BadRow(column, f"must be positive, got {raw}")
    if value > MAX_DURATION_S:
        raise BadRow(column, f"must be at most {MAX_DURATION_S:g} s (ten years), got {shown(raw)}")
    return value


def _gpus(raw: str, column: str) -> float:
    try:
        value = float(raw)
    except ValueError:
        raise BadRow(column, f"not a number: {shown(raw)}") from None
    if 0 < value < 1:
        return value
    if value > MAX_GPUS:
        raise BadRow(column, f"more than {MAX_GPUS:,} GPUs: {shown(raw)}")
    if value >= 1 and value.is_integer():
        return int(value)
    raise BadRow(column, f"must be a whole number >= 1 or a fraction in (0, 1), got {shown(raw)}")


def _time(row: dict[str, str], column: str) -> float:
    raw = (row.get(column) or "").strip()
    try:
        return parse_time_s(raw)
    except OutOfRange as exc:
        raise BadRow(column, f"{exc}: {shown(raw)}") from None
    except ValueError:
        raise BadRow(column, f"not a timestamp or seconds: {shown(raw)}") from None


def _bool(raw: str, column: str) -> bool:
    text = raw.strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise BadRow(column, f"expected true or false, got {shown(raw)}")


def _optional(row: dict[str, str], column: str) -> str:
    return (row.get(column) or "").strip()


def _canonical_job(row: dict[str, str], line: int) -> Job | None:
    job_id = _optional(row, "job_id")
    if not job_id:
        raise BadRow("job_id", "empty")
    tenant = _optional(row, "tenant")
    if not tenant:
        raise BadRow("tenant", "empty")
    job_class = _optional(row, "class") or "training"
    if job_class not in JOB_CLASSES:
        raise BadRow("class", f"must be one of {', '.join(JOB_CLASSES)}, got {shown(job_class)}")
    interruptible_raw = _optional(row, "interruptible")
    interruptible = (_bool(interruptible_raw, "interruptible") if interruptible_raw
                     else job_class in ("training", "batch"))
    priority_raw = _optional(row, "priority")
    try:
        priority = int(priority_raw) if priority_raw else 0
    except ValueError:
        raise BadRow("priority", f"not a whole number: {shown(priority_raw)}") from None
    if abs(priority) > MAX_PRIORITY:
        raise BadRow("priority", f"must be within -{MAX_PRIORITY:,} to {MAX_PRIORITY:,}, got {shown(priority_raw)}")
    checkpoint = _duration(row, "checkpoint_interval_s") if _optional(row, "checkpoint_interval_s") else None
    deadline = _duration(row, "deadline_s") if _optional(row, "deadline_s") else None
    gpu_type = _optional(row, "gpu_type")
    types = frozenset(t.strip() for t in gpu_type.split("|") if t.strip()) if gpu_type else None
    gpus = _gpus(_optional(row, "gpus"), "gpus")
    profile = _optional(row, "gpu_profile")
    if profile:
        _check_profile(profile, gpus)
    return Job(
        job_id=job_id, tenant=tenant, gpus=gpus,
        duration_s=_duration(row, "duration_s"), submit_time_s=_time(row, "submit_time"),
        priority=priority, job_class=job_class, interruptible=interruptible, checkpoint_interval_s=checkpoint,
        gpu_types=types, deadline_s=deadline, gpu_profile=profile,
    )


def _check_profile(profile: str, gpus: float) -> None:
    """A `gpu_profile` is a MIG profile or `timeslice`, for one instance or replica (docs/GPU-SHARING.md)."""
    if profile not in SHARED_PROFILES:
        raise BadRow("gpu_profile", f"unknown profile {shown(profile)} (a MIG profile such as 1g.5gb, "
                                    f"or {TIMESLICE})")
    if gpus != 1:
        raise BadRow("gpus", f"a {profile} job takes one instance: gpus must be 1, got {gpus:g}")


def _philly_job(row: dict[str, str], line: int) -> Job | None:
    gpus = _gpus((row.get("num_gpus") or "").strip(), "num_gpus")
    tenant = (row.get("cluster") or "").strip()
    if not tenant:
        raise BadRow("cluster", "empty")
    return Job(job_id=f"philly-{line}", tenant=tenant, gpus=gpus,
               duration_s=_duration(row, "duration"), submit_time_s=_time(row, "timestamp"))


def parse_elapsed_s(text: str) -> float:
    """Slurm elapsed `[D-][HH:]MM:SS` to seconds; ValueError if malformed."""
    match = _ELAPSED.match(text.strip())
    if not match:
        raise ValueError(text)
    days, hours, minutes, seconds = (int(g) if g else 0 for g in match.groups())
    return ((days * 24 + hours) * 60 + minutes) * 60 + seconds


def _sacct_job(row: dict[str, str], line: int) -> Job | None:
    job_id = (row.get("JobID") or "").strip()
    if not job_id:
        raise BadRow("JobID", "empty")
    if "." in job_id:
        return None  # a job step (batch, extern, 0): its allocation is counted on the job itself
    match = _GRES_GPU.search(row.get("AllocTRES") or "")
    if match is None:
        return None  # CPU-only job
    gpus = int(match.group(1))
    if gpus < 1:
        return None
    if gpus > MAX_GPUS:
        raise BadRow("AllocTRES", f"more than {MAX_GPUS:,} GPUs: {shown(match.group(0))}")
    elapsed_raw = (row.get("Elapsed") or "").strip()
    try:
        elapsed_s = parse_elapsed_s(elapsed_raw)
    except ValueError:
        raise BadRow("Elapsed", f"expected [D-][HH:]MM:SS, got {shown(elapsed_raw)}") from None
    if elapsed_s <= 0:
        return None  # never ran (cancelled while pending)
    try:
        duration_s(elapsed_s)
    except ValueError as exc:
        raise BadRow("Elapsed", f"{exc}: {shown(elapsed_raw)}") from None
    account = (row.get("Account") or "").strip() or "unknown"
    qos = (row.get("QOS") or "").strip().lower()
    return Job(job_id=f"slurm-{job_id}", tenant=account, gpus=gpus, duration_s=float(elapsed_s),
               submit_time_s=_time(row, "Submit"), priority=QOS_PRIORITY.get(qos, 0))


_READERS: dict[str, tuple[tuple[str, ...], str, Callable[[dict[str, str], int], Job | None]]] = {
    "csv": (CANONICAL_REQUIRED, ",", _canonical_job),
    "philly": (("timestamp", "duration", "num_gpus", "cluster"), ",", _philly_job),
    "sacct": (("JobID", "Submit", "Elapsed", "AllocTRES", "Account"), "|", _sacct_job),
}


def _fast_readers() -> dict[str, Callable[[Path], list[Job] | None]]:
    from greengpu.sim.fast_traces import fast_canonical, fast_philly, fast_sacct

    return {"csv": fast_canonical, "philly": fast_philly, "sacct": fast_sacct}


_FAST_READERS = _fast_readers()


def _rows(path: Path, delimiter: str) -> Iterator[tuple[int, list[str], dict[str, str]]]:
    """(line, fields, row as dict); the first item is the header. Blank lines are skipped."""
    with path.open(newline="", encoding="utf-8") as handle:
        reader = csv.reader(handle, delimiter=delimiter)
        header = next(reader, [])
        yield 1, header, {}
        width = len(header)
        for fields in reader:
            if not fields:
                continue
            row = dict(zip(header, fields, strict=False))
            if len(fields) != width:
                row[_WIDTH_KEY] = str(len(fields))
            yield reader.line_num, fields, row


def read_trace(path: str | Path, trace_format: str = "csv", skip_bad_rows: bool = False,
               vectorised: bool = True, max_span_s: float | None = None) -> TraceResult:
    """Read a trace file into jobs sorted by submit time; raises BadInput on the first bad row.

    `vectorised=False` forces the exact row-by-row reader (the reference the fast path is tested against).
    `max_span_s`: refuse a trace whose submit times span longer (the commands that replay pass
    REPLAY_SPAN_S).
    """
    if trace_format not in _READERS:
        raise BadInput(f"--trace-format: unknown format {trace_format!r} (one of {', '.join(TRACE_FORMATS)})")
    name = str(path)
    file_path = Path(path)
    if not file_path.is_file():
        raise BadInput(f"{name}: no such trace file")
    try:
        check_file_size(file_path, MAX_CSV_BYTES)
    except ValueError as exc:
        raise BadInput(f"{name}: {exc}") from None
    # 100k rows make 100k long-lived Jobs: the cyclic collector would re-walk them again and again
    # for nothing (rows build no cycles), costing ~15-50% of the read.
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        result = _read(file_path, name, trace_format, skip_bad_rows, vectorised)
    finally:
        if was_enabled:
            gc.enable()
    if max_span_s is not None and result.jobs \
            and result.jobs[-1].submit_time_s - result.jobs[0].submit_time_s > max_span_s:
        # A replay's virtual clock runs from the first submit to the last finish: a trace that mixes plain
        # seconds (1970) with 2024 dates would replay 54 years hour by hour.
        first, last = result.jobs[0], result.jobs[-1]
        years = (last.submit_time_s - first.submit_time_s) / 86_400 / 365.25
        raise BadInput(f"{name}: submit times span {years:,.0f} years (jobs {first.job_id} and {last.job_id}), more "
                       f"than the {max_span_s / 86_400 / 365.25:.0f} a replay covers")
    return result


def _read(file_path: Path, name: str, trace_format: str, skip_bad_rows: bool, vectorised: bool) -> TraceResult:
    required, delimiter, make_job = _READERS[trace_format]
    fast = _FAST_READERS.get(trace_format) if vectorised else None
    if fast is not None:
        jobs = fast(file_path)
        if jobs is not None:
            jobs.sort(key=attrgetter("submit_time_s", "job_id"))
            return TraceResult(jobs=jobs)
    result = TraceResult(jobs=[])
    seen_ids: set[str] = set()
    try:
        rows = _rows(file_path, delimiter)
        _, header, _ = next(rows)
        missing = [c for c in required if c not in header]
        if missing:
            hint = " (is this a different --trace-format?)" if header else ""
            raise BadInput(f"{name}:1: missing column(s) {', '.join(missing)}{hint}")
        for line, _, row in rows:
            try:
                if _WIDTH_KEY in row:
                    raise BadRow("row", f"{row[_WIDTH_KEY]} fields, header has {len(header)}")
                job = make_job(row, line)
                if job is not None and job.job_id in seen_ids:
                    raise BadRow(required[0], f"duplicate job id {job.job_id!r}")
            except BadRow as problem:
                message = f"{name}:{line}: {problem}"
                if not skip_bad_rows:
                    raise BadInput(message) from None
                result.skipped += 1
                result.first_error = result.first_error or message
                continue
            if job is None:
                result.ignored += 1
                continue
            seen_ids.add(job.job_id)
            result.jobs.append(job)
    except UnicodeDecodeError:
        raise BadInput(f"{name}: not UTF-8 text") from None
    except csv.Error as exc:
        raise BadInput(f"{name}: malformed CSV: {exc}") from None
    except OSError as exc:
        raise BadInput(f"{name}: cannot read: {exc.strerror}") from None
    result.jobs.sort(key=attrgetter("submit_time_s", "job_id"))
    return result
