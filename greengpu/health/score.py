"""The fault-risk score of one GPU: each signal's trend over the window turned into a hazard, the hazards
added, and the sum mapped to a probability-like score in [0, 1].

The model is an additive hazard, the form survival analyses of GPU and DRAM failures take
(docs/HEALTH.md): every signal adds `h_i = H_warn * max(0, x_i - ok_i) / (warn_i - ok_i)` to the
GPU's hazard, where `x_i` is the signal's value over the window, `ok_i` the level a healthy GPU shows
and `warn_i` the level at which that signal *alone* is enough for a warning; `H_warn` is the hazard at
the warning threshold, so a signal at its `warn_i` and nothing else puts the score exactly on it. The
score is `1 - exp(-sum h_i)`: 0 for a quiet GPU, rising towards 1 as evidence adds up, and two signals
each half-way to their warning level together reach it. Each signal's `contribution` is its share of
the score (`score * h_i / sum h`); the contributions add up to the score.

Critical events (signals.py) make the GPU `failing` whatever the trends say; the score is then 1.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import StrEnum

from greengpu.health.signals import SLOWDOWN_REASON_BITS, CriticalEvent, GpuHealthSample, counter_increase

DAY_S = 86400.0


class HealthState(StrEnum):
    HEALTHY = "healthy"
    WARNING = "warning"
    FAILING = "failing"


@dataclass(frozen=True)
class SignalLevels:
    """Where a signal stops being normal (`ok`) and where it alone is worth a warning (`warn`)."""

    ok: float
    warn: float

    def __post_init__(self) -> None:
        if not (math.isfinite(self.ok) and math.isfinite(self.warn) and self.warn > self.ok >= 0):
            raise ValueError(f"signal levels need 0 <= ok < warn, got ok={self.ok!r} warn={self.warn!r}")


@dataclass(frozen=True)
class HealthPolicy:
    """Thresholds of the health score (docs/HEALTH.md says where each default comes from)."""

    window_s: float = DAY_S
    """Trends are taken over this window: counts in it, divided by its length."""
    warning_score: float = 0.7
    failing_score: float = 0.95
    """About 2.5 times one signal's warning level (hazards add): 25 single-bit errors a day alone."""
    sbe_per_day: SignalLevels = SignalLevels(ok=0.0, warn=10.0)
    """Single-bit (corrected) ECC errors per day."""
    memory_temp_spread_c: SignalLevels = SignalLevels(ok=5.0, warn=15.0)
    """Spread between the GPU's temperature sensors, mean over the window."""
    pcie_replays_per_min: SignalLevels = SignalLevels(ok=0.0, warn=8.0)
    """PCIe replays (link-level retransmissions) per minute."""
    retired_rows_per_day: SignalLevels = SignalLevels(ok=0.0, warn=1.0)
    """Pages retired or rows remapped after correctable errors, per day."""
    slowdown_fraction: SignalLevels = SignalLevels(ok=0.0, warn=0.5)
    """Share of samples with a hardware slowdown (thermal, power brake) clock event reason set."""

    def __post_init__(self) -> None:
        if not 0 < self.warning_score < self.failing_score < 1:
            raise ValueError(f"need 0 < warning_score < failing_score < 1, got {self.warning_score!r} "
                             f"and {self.failing_score!r}")
        if not (math.isfinite(self.window_s) and self.window_s > 0):
            raise ValueError(f"window_s must be positive, got {self.window_s!r}")

    @property
    def warning_hazard(self) -> float:
        """The summed hazard at which the score reaches `warning_score`."""
        return -math.log(1.0 - self.warning_score)


@dataclass(frozen=True)
class SignalScore:
    """One signal's value over the window and what it adds to the score."""

    signal: str
    value: float
    unit: str
    warn_level: float
    hazard: float
    contribution: float


@dataclass(frozen=True)
class HealthAssessment:
    """A GPU's score, state, each signal's part, and the critical events behind a `failing` state."""

    score: float
    state: HealthState
    signals: tuple[SignalScore, ...]
    critical: tuple[CriticalEvent, ...] = ()

    def top_signals(self, count: int = 3) -> tuple[SignalScore, ...]:
        """The signals that contribute most (ties in signal order), only those contributing."""
        ranked = sorted((s for s in self.signals if s.contribution > 0), key=lambda s: -s.contribution)
        return tuple(ranked[:count])


def signal_values(samples: tuple[GpuHealthSample, ...], now_s: float, window_s: float) -> dict[str, float | None]:
    """Each trend signal's value over the window ending at `now_s` (None: the GPU does not report it)."""
    inside = [s for s in samples if s.time_s >= now_s - window_s]
    # Growth is counted from the last sample before the window (the baseline), if there is one.
    baseline = [s for s in samples if s.time_s < now_s - window_s][-1:]
    counted = baseline + inside
    days = window_s / DAY_S
    minutes = window_s / 60.0

    def grown(pick: str) -> int | None:
        return counter_increase([(s.time_s, getattr(s, pick)) for s in counted])

    sbe = grown("ecc_corrected_total")
    replays = grown("pcie_replays_total")
    retired = grown("retired_pages_sbe")
    remapped = grown("remapped_rows_correctable")
    rows = None if retired is None and remapped is None else (retired or 0) + (remapped or 0)
    spreads = [max(s.temperatures_c) - min(s.temperatures_c) for s in inside if len(s.temperatures_c) >= 2]
    reasons = [s.clock_event_reasons for s in inside if s.clock_event_reasons is not None]
    return {
        "sbe_per_day": None if sbe is None else sbe / days,
        "memory_temp_spread_c": sum(spreads) / len(spreads) if spreads else None,
        "pcie_replays_per_min": None if replays is None else replays / minutes,
        "retired_rows_per_day": None if rows is None else rows / days,
        "slowdown_fraction": (sum(1 for r in reasons if r & SLOWDOWN_REASON_BITS) / len(reasons)) if reasons else None,
    }


UNITS = {
    "sbe_per_day": "errors/day",
    "memory_temp_spread_c": "C",
    "pcie_replays_per_min": "replays/min",
    "retired_rows_per_day": "rows/day",
    "slowdown_fraction": "share of samples",
}


def assess(samples: tuple[GpuHealthSample, ...], critical: tuple[CriticalEvent, ...], now_s: float,
           policy: HealthPolicy = HealthPolicy()) -> HealthAssessment:
    """The health of one GPU at `now_s` from its samples and latched critical events."""
    values = signal_values(samples, now_s, policy.window_s)
    h_warn = policy.warning_hazard
    hazards: list[tuple[str, float, SignalLevels, float]] = []
    for name, value in values.items():
        if value is None:
            continue
        levels: SignalLevels = getattr(policy, name)
        hazard = h_warn * max(0.0, value - levels.ok) / (levels.warn - levels.ok)
        hazards.append((name, value, levels, hazard))
    total = sum(h for *_, h in hazards)
    if critical:
        score = 1.0
        state = HealthState.FAILING
    else:
        score = 1.0 - math.exp(-total)
        state = (HealthState.FAILING if score > policy.failing_score
                 else HealthState.WARNING if score > policy.warning_score else HealthState.HEALTHY)
    signals = []
    for name, value, levels, hazard in hazards:
        # With a critical event the whole score is the event's: the trends then only say what led to it.
        share = 0.0 if critical or total == 0 else score * hazard / total
        signals.append(SignalScore(name, value, UNITS[name], levels.warn, hazard, share))
    return HealthAssessment(score=score, state=state, signals=tuple(signals), critical=critical)
