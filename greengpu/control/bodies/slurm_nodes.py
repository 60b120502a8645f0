"""Node records of `sinfo --json` in the core's terms: power state, failed or drained, features and partitions.

Slurm's power-save states (22.05): `idle~` is `POWERED_DOWN` (asleep), `idle#` `POWERING_UP`, `idle%`
`POWERING_DOWN`. A node that did not register within ResumeTimeout becomes `down~` (state `down` with
`POWERED_DOWN`, reason "ResumeTimeout reached"): it is no sleeping node that a wake would bring back but a
failed one, and so is a powered-down node Slurm marks `NOT_RESPONDING`. Failed and drained nodes are never
slept, never woken for work and never counted as capacity.
"""

from __future__ import annotations

from collections.abc import Mapping

from greengpu.json_types import JsonValue
from greengpu.model import NodeState, PowerState

FAILED_STATES = frozenset({"down", "fail", "failing"})
FAILED_FLAGS = frozenset({"DOWN", "FAIL"})
DRAINED_FLAGS = frozenset({"DRAIN", "DRAINED", "DRAINING", "NOT_RESPONDING", "MAINTENANCE", "RESERVED"})
"""Flags of an up node that Slurm will not give new work (NOT_RESPONDING alone: slurmd silent for now, not yet
DOWN after SlurmdTimeout)."""


def node_power(state: str, flags: set[str] | frozenset[str]) -> NodeState | None:
    """A node's state as the core takes it from `sinfo --json`'s state and flags (None: awake and usable)."""
    if state in FAILED_STATES or flags & FAILED_FLAGS:
        return NodeState(power=PowerState.FAILED, drained=True)
    if "POWERED_DOWN" in flags:
        if "NOT_RESPONDING" in flags:
            return NodeState(power=PowerState.FAILED, drained=True)
        return NodeState(power=PowerState.ASLEEP, drained=bool(flags & {"DRAIN", "DRAINED", "DRAINING"}))
    if "POWERING_DOWN" in flags or "POWER_DOWN" in flags:
        return NodeState(power=PowerState.SUSPENDING)
    if "POWERING_UP" in flags:
        return NodeState(power=PowerState.WAKING)
    if state in ("future", "unknown") or flags & DRAINED_FLAGS:
        return NodeState(drained=True)
    if state == "allocated":
        # Every CPU taken, or a job holds it whole (--exclusive): Slurm starts nothing more there, whatever GPUs
        # its jobs leave free, so the core must not count them (it would plan no wake for work that needs one).
        return NodeState(drained=True)
    return None


def fault_reason(record: Mapping[str, JsonValue], found: NodeState | None) -> str | None:
    """Why a failed node failed, in Slurm's words (`sinfo`'s reason, else its state), for the alert; None when
    the node has not failed."""
    if found is None or found.power is not PowerState.FAILED:
        return None
    found_flags = record.get("state_flags")
    flags = "+".join(str(f) for f in found_flags) if isinstance(found_flags, list) else ""
    state = f"{str(record.get('state', '')).upper()}{'+' + flags if flags else ''}"
    reason = str(record.get("reason") or "").strip()
    return f"{state}: {reason}" if reason else state


def _words(value: object) -> frozenset[str]:
    """`a,b` or `["a", "b"]` as a set of words."""
    items = value if isinstance(value, list) else str(value or "").split(",")
    return frozenset(str(item).strip() for item in items if str(item).strip())


def node_features(record: Mapping[str, JsonValue]) -> frozenset[str]:
    """The features jobs may ask of a node: those it has (`features`), which a powered-down node keeps too."""
    return _words(record.get("features")) | _words(record.get("active_features"))


def node_partitions(record: Mapping[str, JsonValue]) -> frozenset[str]:
    """The partitions a node belongs to."""
    return _words(record.get("partitions"))
