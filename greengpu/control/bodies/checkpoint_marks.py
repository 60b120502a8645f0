"""A job's last checkpoint as its workload manager carries it: `greengpu.io/last-checkpoint=<Unix seconds>` in a
Slurm job's comment (the job's own script sets it: `scontrol update job=$SLURM_JOB_ID comment=...`), or the
`greengpu.io/last-checkpoint` annotation of a pod (the training loop patches its own pod).

A mark that is not a finite time after 2000-01-01 and not ahead of the observation by more than a minute is
ignored (a typo must not make a job look freshly checkpointed, and then cheap to preempt).
"""

from __future__ import annotations

import math
import re

CHECKPOINT_KEY = "greengpu.io/last-checkpoint"
_IN_COMMENT = re.compile(r"greengpu\.io/last-checkpoint=([0-9]{1,12}(?:\.[0-9]{1,6})?)(?![0-9.])")
EARLIEST_S = 946_684_800.0
AHEAD_S = 60.0


def checkpoint_value(text: str | None, now_s: float) -> float | None:
    """The mark's time, or None when absent or not believable."""
    if not text:
        return None
    try:
        value = float(text.strip())
    except ValueError:
        return None
    if not math.isfinite(value) or value < EARLIEST_S or value > now_s + AHEAD_S:
        return None
    return value


def checkpoint_in_comment(comment: str | None, now_s: float) -> float | None:
    """The `greengpu.io/last-checkpoint=T` mark of a Slurm comment (the last one when several)."""
    found = _IN_COMMENT.findall(comment or "")
    return checkpoint_value(found[-1], now_s) if found else None
