"""Stalled training jobs: a running training job whose GPU utilisation stays below half its own baseline.

The baseline is the job's own: the median of its utilisation samples over its first `baseline_s` of
run (from the first sample seen), once at least `min_samples` were taken. A fixed threshold would call
every input-bound job stalled; a job's own early behaviour says what "working" looks like for it. The
baseline is fixed once learnt (a rolling one would follow a slow stall down and never alert).

A job stalls when every sample over `sustain_s` is below `ratio` (one half) of its baseline: one alert
then, none again while it stays stalled, and a clear when a sample comes back at or above the bound.
A job whose baseline is under `min_baseline` (it never really used its GPUs) is never called stalled.

Pure: samples come in with their time; nothing here reads a clock or does I/O.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from enum import StrEnum


@dataclass(frozen=True)
class StallPolicy:
    baseline_s: float = 600.0
    """The job's first seconds of run its baseline is learnt from."""
    min_samples: int = 3
    ratio: float = 0.5
    """A sample below `ratio * baseline` is a stalled one."""
    sustain_s: float = 900.0
    """How long every sample must stay below the bound before the alert."""
    min_baseline: float = 0.1


class StallChange(StrEnum):
    STALLED = "stalled"
    RECOVERED = "recovered"


@dataclass(frozen=True)
class StallEvent:
    """A job that stalled (one alert) or recovered (the alert clears)."""

    change: StallChange
    job_id: str
    time_s: float
    utilization: float
    baseline: float
    below_since_s: float


@dataclass
class _JobTrack:
    first_s: float
    early: list[float] = field(default_factory=list)
    baseline: float | None = None
    below_since_s: float | None = None
    alerted: bool = False


class StallWatch:
    """Every running training job's baseline and stall state, fed one utilisation sample per job per report."""

    def __init__(self, policy: StallPolicy | None = None) -> None:
        self.policy = policy or StallPolicy()
        self.jobs: dict[str, _JobTrack] = {}

    def observe(self, job_id: str, time_s: float, utilization: float) -> StallEvent | None:
        """One sample of the job's utilisation (its GPUs' mean, in [0, 1]) at `time_s`; the change it makes."""
        p = self.policy
        track = self.jobs.setdefault(job_id, _JobTrack(first_s=time_s))
        if track.baseline is None:
            if time_s - track.first_s <= p.baseline_s:
                track.early.append(utilization)
                return None
            if len(track.early) < p.min_samples:
                track.first_s, track.early = time_s, [utilization]  # too few samples (gaps): learn afresh
                return None
            track.baseline = statistics.median(track.early)
        baseline = track.baseline
        if baseline < p.min_baseline:
            return None
        if utilization >= p.ratio * baseline:
            since = track.below_since_s
            track.below_since_s = None
            if track.alerted:
                track.alerted = False
                return StallEvent(StallChange.RECOVERED, job_id, time_s, utilization, baseline, since or time_s)
            return None
        if track.below_since_s is None:
            track.below_since_s = time_s
        if not track.alerted and time_s - track.below_since_s >= p.sustain_s:
            track.alerted = True
            return StallEvent(StallChange.STALLED, job_id, time_s, utilization, baseline, track.below_since_s)
        return None

    def forget_except(self, running: set[str]) -> None:
        """Drop the jobs that no longer run."""
        for job_id in set(self.jobs) - running:
            del self.jobs[job_id]


def checkpoint_text(last_checkpoint_s: float | None, now_s: float) -> str:
    """"last checkpoint N s ago (at T)" or "last checkpoint: none seen since start"."""
    if last_checkpoint_s is None:
        return "last checkpoint: none seen since start"
    return f"last checkpoint {max(0.0, now_s - last_checkpoint_s):.0f} s ago (at {last_checkpoint_s:.0f})"


def stall_line(event: StallEvent, tenant: str, node: str, last_checkpoint_s: float | None) -> str:
    """The alert's one line: job, tenant, node, utilisation against its baseline, and its last checkpoint."""
    if event.change is StallChange.RECOVERED:
        return (f"job {event.job_id} (tenant {tenant}) on {node} recovered: GPU utilisation "
                f"{event.utilization:.0%} against its baseline {event.baseline:.0%}")
    return (f"job {event.job_id} (tenant {tenant}) on {node} stalled: GPU utilisation {event.utilization:.0%}, "
            f"below half its baseline {event.baseline:.0%} for {event.time_s - event.below_since_s:.0f} s; "
            f"{checkpoint_text(last_checkpoint_s, event.time_s)}")
