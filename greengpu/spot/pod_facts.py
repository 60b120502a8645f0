"""A Kubernetes pod's facts for the spot decision, read from its annotations (docs/SPOT-LIVE.md).

Pure: a pod is the JSON object an AdmissionReview carries; nothing here talks to the API server or reads
a clock (the caller passes the time). The facts have the shape of the spot decision's `SpotJobFacts`
(greengpu.spot.decide); the webhook takes the decision as a plain callable: `Decide`, the decision with
its prices and policy bound.

Annotations (labels are read too, annotations win):

| key | meaning | default |
|---|---|---|
| `greengpu.io/class` | job class (`training`, `inference`, `interactive`, `batch`, ...) | `default` |
| `greengpu.io/interruptible` | `true` when the job survives being stopped and restarted | `false` |
| `greengpu.io/checkpoint-interval` | time between checkpoints (`1800`, `30m`, `2h`) | none: no checkpoints |
| `greengpu.io/checkpoint-cost` | time one checkpoint takes | `0` |
| `greengpu.io/expected-runtime` | how long the job runs | the pod's `activeDeadlineSeconds`, else 1 h |
| `greengpu.io/deadline` | when it must be done, RFC 3339 (`2026-12-01T06:00:00Z`) | none |
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable
from datetime import UTC, datetime

from greengpu.json_types import JsonValue
from greengpu.spot.decide import CapacityKind, SpotJobFacts

__all__ = ["CapacityKind", "Decide", "SpotJobFacts", "pod_facts"]

GPU_RESOURCE = "nvidia.com/gpu"
PREFIX = "greengpu.io/"
CLASS_KEY = PREFIX + "class"
INTERRUPTIBLE_KEY = PREFIX + "interruptible"
CHECKPOINT_INTERVAL_KEY = PREFIX + "checkpoint-interval"
CHECKPOINT_COST_KEY = PREFIX + "checkpoint-cost"
EXPECTED_RUNTIME_KEY = PREFIX + "expected-runtime"
DEADLINE_KEY = PREFIX + "deadline"
DEFAULT_CLASS = "default"
DEFAULT_RUNTIME_S = 3600.0
"""Expected run time of a pod that says nothing about it: the spot and on-demand costs both grow with the
run time, so the choice depends little on it; an hour keeps checkpoint overheads in proportion."""
MAX_DURATION_S = 10 * 366 * 86_400.0
_DURATION_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(s|m|h|d)?\s*$")
_UNIT_S = {None: 1.0, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86_400.0}


Decide = Callable[[SpotJobFacts], CapacityKind | None]
"""The spot decision with prices and policy bound: which capacity a job goes to (None: no preference)."""


class BadAnnotation(ValueError):
    """An annotation greengpu reads holds something it cannot use; the message names the key."""


def json_get(value: JsonValue, key: str, default: JsonValue = None) -> JsonValue:
    """`value.get(key, default)` of a JSON object; AttributeError, as `.get` raises, for any other value
    (a pod the API server has not validated yet may hold anything)."""
    if not isinstance(value, dict):
        raise AttributeError(f"{type(value).__name__!r} object has no attribute 'get'")
    return value.get(key, default)


def json_items(value: JsonValue) -> Iterable[JsonValue]:
    """What `for item in value` walks in a JSON value (a list's items, an object's keys, a string's
    characters); TypeError, as Python's, for a number, a boolean or null."""
    if not isinstance(value, list | dict | str):
        raise TypeError(f"{type(value).__name__!r} object is not iterable")
    return value


def pod_gpus(pod: JsonValue) -> float:
    """GPUs the pod asks for, as the scheduler counts them: the containers' limits (requests when no limit)
    added up, or the largest init container's, whichever is more."""
    spec = json_get(pod, "spec") or {}

    def gpus(container: JsonValue) -> float:
        resources = (container.get("resources") or {}) if isinstance(container, dict) else {}
        for section in ("limits", "requests"):
            value = json_get(json_get(resources, section) or {}, GPU_RESOURCE)
            if value is not None:
                try:
                    number = float(str(value))
                except ValueError:
                    number = math.nan
                if not math.isfinite(number) or number < 0:
                    raise BadAnnotation(f"{GPU_RESOURCE}: not a GPU count: {value!r}")
                return number
        return 0.0

    running = sum(gpus(c) for c in json_items(json_get(spec, "containers") or []))
    init = max((gpus(c) for c in json_items(json_get(spec, "initContainers") or [])), default=0.0)
    return max(running, init)


def _metadata_value(pod: JsonValue, key: str) -> str | None:
    metadata = json_get(pod, "metadata") or {}
    for section in ("annotations", "labels"):
        value = json_get(json_get(metadata, section) or {}, key)
        if value is not None:
            return str(value)
    return None


def parse_duration_s(key: str, text: str) -> float:
    """`1800`, `90s`, `30m`, `2h`, `1d` -> seconds; BadAnnotation naming `key` otherwise."""
    match = _DURATION_RE.match(text)
    if not match:
        raise BadAnnotation(f"{key}: not a duration (seconds, or a number with s, m, h or d): {text[:40]!r}")
    value = float(match.group(1)) * _UNIT_S[match.group(2)]
    if value > MAX_DURATION_S:
        raise BadAnnotation(f"{key}: longer than ten years: {text[:40]!r}")
    return value


def parse_boolean(key: str, text: str) -> bool:
    """`true`/`yes`/`1` or `false`/`no`/`0` (any case); BadAnnotation naming `key` otherwise."""
    lowered = text.strip().lower()
    if lowered in ("true", "yes", "1"):
        return True
    if lowered in ("false", "no", "0"):
        return False
    raise BadAnnotation(f"{key}: expected true or false, got {text[:40]!r}")


def _deadline_remaining_s(text: str, now_s: float) -> float:
    try:
        stamp = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise BadAnnotation(f"{DEADLINE_KEY}: not an RFC 3339 time: {text[:40]!r}") from None
    if stamp.tzinfo is None:
        stamp = stamp.replace(tzinfo=UTC)
    return max(0.0, stamp.timestamp() - now_s)


def pod_facts(pod: JsonValue, now_s: float) -> SpotJobFacts:
    """The pod's facts; BadAnnotation (naming the key) when an annotation cannot be read."""
    interruptible = _metadata_value(pod, INTERRUPTIBLE_KEY)
    interval = _metadata_value(pod, CHECKPOINT_INTERVAL_KEY)
    cost = _metadata_value(pod, CHECKPOINT_COST_KEY)
    runtime = _metadata_value(pod, EXPECTED_RUNTIME_KEY)
    deadline = _metadata_value(pod, DEADLINE_KEY)
    active_deadline = json_get(json_get(pod, "spec") or {}, "activeDeadlineSeconds")
    if runtime is not None:
        remaining_s = parse_duration_s(EXPECTED_RUNTIME_KEY, runtime)
    elif isinstance(active_deadline, int) and not isinstance(active_deadline, bool) and active_deadline > 0:
        remaining_s = float(min(active_deadline, MAX_DURATION_S))
    else:
        remaining_s = DEFAULT_RUNTIME_S
    interval_s = parse_duration_s(CHECKPOINT_INTERVAL_KEY, interval) if interval is not None else None
    return SpotJobFacts(
        job_class=(_metadata_value(pod, CLASS_KEY) or DEFAULT_CLASS).strip() or DEFAULT_CLASS,
        interruptible=parse_boolean(INTERRUPTIBLE_KEY, interruptible) if interruptible is not None else False,
        checkpoint_interval_s=interval_s if interval_s else None,
        checkpoint_cost_s=parse_duration_s(CHECKPOINT_COST_KEY, cost) if cost is not None else 0.0,
        remaining_s=remaining_s,
        deadline_remaining_s=_deadline_remaining_s(deadline, now_s) if deadline is not None else None,
        gpus=pod_gpus(pod),
    )
