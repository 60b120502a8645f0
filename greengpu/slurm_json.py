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
QOS_PRIORITY = {"low": -10, "scavenger": -20, "normal": 0, "standard": 0, "high": 10, "urgent": 20, "debug": 5}
"""Slurm QOS name to greengpu priority; other names get 0 (the daemon's Slurm body and the trace readers)."""


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


def _names(value: Any, what: str) -> frozenset[str] | None:
    """A hostlist field (`node[1-2],gpu3`) as node names; None when empty. ValueError on a bad hostlist."""
    import hostlist

    text = ",".join(str(v) for v in value) if isinstance(value, list) else str(value or "")
    if not text.strip():
        return None
    try:
        return frozenset(hostlist.expand_hostlist(text.strip()))
    except hostlist.BadHostlist as error:
        raise ValueError(f"{what} {text!r} is not a hostlist: {error}") from None


FEATURE_TOKEN = re.compile(r"\s*(?:([A-Za-z0-9_.:+-]+)(?:\*\d+)?|([&,|()\[\]]))")


def feature_alternatives(text: str) -> tuple[frozenset[str], ...] | None:
    """A `--constraint` expression as alternatives of features that must all be present: `a&b|c` ->
    ({a, b}, {c}); `&` (or `,`) binds tighter than `|`; brackets and parentheses group; counts (`a*2`) are read
    as the feature alone. None for an empty expression; ValueError for one that does not parse."""
    tokens: list[tuple[str, str]] = []
    position = 0
    text = text.strip()
    while position < len(text):
        found = FEATURE_TOKEN.match(text, position)
        if not found or found.end() == position:
            raise ValueError(f"constraint {text!r}: cannot read it at {text[position:]!r}")
        tokens.append(("name", found.group(1)) if found.group(1) else ("op", found.group(2)))
        position = found.end()
    if not tokens:
        return None
    at = 0

    def either() -> list[frozenset[str]]:
        nonlocal at
        alternatives = both()
        while at < len(tokens) and tokens[at] == ("op", "|"):
            at += 1
            alternatives = alternatives + both()
        return alternatives

    def both() -> list[frozenset[str]]:
        nonlocal at
        alternatives = single()
        while at < len(tokens) and tokens[at] in (("op", "&"), ("op", ",")):
            at += 1
            right = single()
            alternatives = [left | other for left in alternatives for other in right]
        return alternatives

    def single() -> list[frozenset[str]]:
        nonlocal at
        if at >= len(tokens):
            raise ValueError(f"constraint {text!r} ends too soon")
        kind, value = tokens[at]
        at += 1
        if kind == "name":
            return [frozenset({value})]
        if value in "([":
            inner = either()
            if at >= len(tokens) or tokens[at][1] not in ")]":
                raise ValueError(f"constraint {text!r}: a bracket is not closed")
            at += 1
            return inner
        raise ValueError(f"constraint {text!r}: {value!r} where a feature was expected")

    alternatives = either()
    if at != len(tokens):
        raise ValueError(f"constraint {text!r}: cannot read it at {tokens[at][1]!r}")
    return tuple(dict.fromkeys(alternatives))


def _exclusive(record: Mapping[str, Any]) -> bool:
    """`--exclusive`: 22.05 writes `"shared": "none"`, 23.02 and later a list of flags under `shared` or
    `exclusive`."""
    shared = record.get("shared")
    flags = {str(f).lower() for f in shared} if isinstance(shared, list) else {str(shared or "").lower()}
    exclusive = record.get("exclusive")
    marks = {str(f).lower() for f in exclusive} if isinstance(exclusive, list) else {str(exclusive or "").lower()}
    return "none" in flags or bool(marks & {"true", "user", "mcs", "topo"})


def node_constraints(record: Mapping[str, Any]) -> dict[str, Any]:
    """The node constraints of a pending job record as `Job` fields (only those it sets): `required_nodes`
    (`-w`), `excluded_nodes` (`-x`), `features` (`--constraint`), `partitions` (`-p a,b`), `exclusive`.
    ValueError, naming the field, when one does not parse."""
    found: dict[str, Any] = {}
    required = _names(record.get("required_nodes"), "required_nodes")
    if required is not None:
        found["required_nodes"] = required
    excluded = _names(record.get("excluded_nodes"), "excluded_nodes")
    if excluded is not None:
        found["excluded_nodes"] = excluded
    features = record.get("features")
    if isinstance(features, str) and features.strip():
        found["features"] = feature_alternatives(features)
    partition = record.get("partition")
    names = partition if isinstance(partition, list) else str(partition or "").split(",")
    partitions = frozenset(str(p).strip() for p in names if str(p).strip())
    if partitions:
        found["partitions"] = partitions
    if _exclusive(record):
        found["exclusive"] = True
    return found
