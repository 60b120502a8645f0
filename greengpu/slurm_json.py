"""Job records of `squeue --json` as Slurm 22.05 and 23.02+ print them: pure reading, no I/O.

Slurm 23.02 changed the JSON: `job_state` became a list of flags, numbers became
`{"set": true, "infinite": false, "number": N}`, and GPU requests are written `gres/gpu:4` or
`gres/gpu=8` instead of `gres:gpu:4`. The daemon's Slurm body and spot steering both read job records
through these, so they see the same jobs on either version.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

GPUS_ASKED = re.compile(r"gres[:/]gpu(?::[^:,=]+)?[:=](\d+)")
"""GPUs in a `tres_per_node` or `tres_per_job` string: `gres:gpu:4`, `gres:gpu:a100:4` (22.05),
`gres/gpu:4`, `gres/gpu=8` (23.02 and later)."""


def json_number(value: Any) -> float | None:
    """A number of `squeue --json`: a plain number (22.05) or `{"set": true, "number": N}` (23.02 and later);
    None when unset, infinite or not a finite number."""
    if isinstance(value, Mapping):
        if not value.get("set", True) or value.get("infinite"):
            return None
        value = value.get("number")
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return float(value)


def job_states(record: Mapping[str, Any]) -> frozenset[str]:
    """A job record's states: `job_state` is one string up to 22.05 and a list of flags from 23.02."""
    state = record.get("job_state")
    if isinstance(state, list):
        return frozenset(str(flag) for flag in state)
    return frozenset({str(state)}) if state else frozenset()


def gpus_asked(record: Mapping[str, Any]) -> tuple[float, int | None] | None:
    """(GPUs in all, GPUs per node or None) a job record asks: `tres_per_node` times its node count, else
    `tres_per_job`; None for a job that asks no GPU."""
    nodes = int(json_number(record.get("node_count")) or 1)
    per_node = GPUS_ASKED.search(str(record.get("tres_per_node") or ""))
    if per_node:
        count = int(per_node.group(1))
        return (float(count * max(1, nodes)), count) if count > 0 else None
    per_job = GPUS_ASKED.search(str(record.get("tres_per_job") or ""))
    if per_job and int(per_job.group(1)) > 0:
        return float(per_job.group(1)), None
    return None
