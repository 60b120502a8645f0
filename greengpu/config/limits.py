"""The limits every reader applies to its input, in one place (documented in docs/INPUTS.md).

A reader asks here whether a number is finite and in range, whether a time lies in the supported
range, and how large a file may be, so that no input can reach the core as `inf`, `nan`, a
400-digit integer or a date in the year 9999, and no file can make a reader run for minutes or
fill memory. Each check returns the value or raises `ValueError` with a short reason; the reader
turns that into its own located one-line error (file, line, key or column).
"""

from __future__ import annotations

import math
import os
from pathlib import Path

MAX_YAML_BYTES = 4 * 1024 * 1024
"""Inventories, policies and plan settings: 4 MiB (a 20,000-node inventory written out node by node is ~2 MiB)."""
MAX_YAML_DEPTH = 64
"""Nesting of mappings and lists in a YAML file."""
MAX_YAML_NODES = 500_000
"""Values a YAML file may expand to, aliases and merge keys counted each time they are used: bounds the
'billion laughs' attack (a few lines of nested aliases that expand to 10^9 values)."""
MAX_CSV_BYTES = 2 * 1024**3
"""Traces, usage histories, tariff and carbon series: 2 GiB (Philly's 64,483 jobs take 5 MiB)."""
MAX_NUMBER = 1e15
"""Largest magnitude of any number in any input (a quadrillion: far above any watt, GPU or price)."""
MAX_GPUS = 1_000_000
"""Largest GPU count of one job or one history row."""
MAX_PRIORITY = 1_000_000_000
"""Largest magnitude of a job's priority (Slurm's own priorities are 32-bit)."""
MAX_DURATION_S = 10 * 366 * 86_400.0
"""Longest duration anywhere (a job, a timeout, a window): ten years."""
MIN_TIME_S = -2_208_988_800.0
"""Earliest time: 1900-01-01T00:00:00Z."""
MAX_TIME_S = 7_258_118_400.0
"""Latest time: 2200-01-01T00:00:00Z (exclusive)."""
MIN_YEAR, MAX_YEAR = 1900, 2199
MAX_PLAN_DAYS = 1830
"""Longest plan horizon, lead time or growth window: five years of days (a GPU's service life)."""


class OutOfRange(ValueError):
    """A value of the right kind outside the supported range (a reader words it differently from a typo)."""


def finite_number(value: int | float, *, maximum: float = MAX_NUMBER) -> float:
    """`value` as a float when finite and at most `maximum` in magnitude; ValueError otherwise.

    Works for integers of any size (math.isfinite raises OverflowError on a 400-digit one).
    """
    if isinstance(value, int):
        if abs(value) > maximum:
            raise OutOfRange(f"out of range (at most {maximum:g} in magnitude)")
        return float(value)
    if not math.isfinite(value):
        raise OutOfRange("not a finite number")
    if abs(value) > maximum:
        raise OutOfRange(f"out of range (at most {maximum:g} in magnitude)")
    return value


def duration_s(value: float) -> float:
    """A duration in seconds: finite, at least 0 and at most MAX_DURATION_S; ValueError otherwise."""
    if value > MAX_DURATION_S:  # first: a 30-digit integer is too long, not out of float range
        raise OutOfRange(f"longer than {MAX_DURATION_S:g} s (ten years)")
    checked = finite_number(value)
    if checked < 0:
        raise OutOfRange("a duration must not be negative")
    return checked


def time_s(value: float) -> float:
    """A Unix time in seconds inside the supported range (1900 to 2199); ValueError otherwise."""
    checked = finite_number(value)
    if not MIN_TIME_S <= checked < MAX_TIME_S:
        raise OutOfRange("outside the supported time range 1900-01-01 to 2199-12-31")
    return checked


def check_file_size(path: str | Path, maximum_bytes: int) -> None:
    """ValueError when the file at `path` is larger than `maximum_bytes` (a missing file passes: the
    reader reports that itself)."""
    try:
        size = os.stat(path).st_size
    except OSError:
        return
    if size > maximum_bytes:
        raise ValueError(f"file is {size:,} bytes, larger than the limit of {maximum_bytes:,}")
