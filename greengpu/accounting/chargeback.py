"""Chargeback: GPU-hours billed per row at a price per GPU-hour by GPU model, or per instance-hour by MIG
instance profile (docs/REPORT.md, report settings `chargeback:`).

Pure. The rules: a job segment of a job that ran on a MIG instance (its `gpu_profile`) is billed its hours in
the month at the profile's `per_instance` rate (one instance per segment); any other segment its GPU-hours in
the month at the `per_gpu_hour` rate of its GPU model, else at `default`. Only allocated GPU-hours are billed:
the idle row's chargeback is 0, so the rows add up to the total.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

DEFAULT = "default"


@dataclass(frozen=True)
class ChargebackRates:
    per_gpu_hour: Mapping[str, float]
    """GPU model -> price per GPU-hour; `default` for models not named."""
    per_instance: Mapping[str, float]
    """MIG instance profile (e.g. 1g.5gb) -> price per instance-hour."""


@dataclass(frozen=True)
class ChargeSegment:
    """What chargeback needs of one job segment."""

    key: str
    start_s: float
    end_s: float
    gpus: float
    gpu_model: str
    gpu_profile: str


class NoRate(ValueError):
    """A segment has no rate: its model is not named and there is no default (or its profile is not named)."""


def rate_for(rates: ChargebackRates, gpu_model: str, gpu_profile: str) -> tuple[float, bool]:
    """(price, per instance?) for a segment."""
    if gpu_profile:
        if gpu_profile in rates.per_instance:
            return rates.per_instance[gpu_profile], True
        raise NoRate(f"per_instance: no rate for MIG instance profile {gpu_profile[:40]!r}")
    if gpu_model in rates.per_gpu_hour:
        return rates.per_gpu_hour[gpu_model], False
    if DEFAULT in rates.per_gpu_hour:
        return rates.per_gpu_hour[DEFAULT], False
    raise NoRate(f"per_gpu_hour: no rate for GPU model {gpu_model[:40] or '(not recorded)'!r} and no default")


def chargeback(segments: Iterable[ChargeSegment], rates: ChargebackRates, start_s: float, end_s: float
               ) -> dict[str, float]:
    """Per row key, what its segments' time in [start_s, end_s) is billed (unrounded)."""
    out: dict[str, float] = {}
    for segment in segments:
        seconds = min(segment.end_s, end_s) - max(segment.start_s, start_s)
        if seconds <= 0 or not math.isfinite(seconds):
            continue
        price, per_instance = rate_for(rates, segment.gpu_model, segment.gpu_profile)
        hours = seconds / 3600.0 * (1.0 if per_instance else segment.gpus)
        out[segment.key] = out.get(segment.key, 0.0) + hours * price
    return out
