"""The replay's cloud nodes and the jobs on them, as sim/cloud.py keeps them; which waits may go to the cloud
(`BURST_REASONS`, the tick's: greengpu.brain.capacity_choice)."""

from __future__ import annotations

from dataclasses import dataclass, field

from greengpu.brain.capacity_choice import BURST_REASONS
from greengpu.model import PendingJob
from greengpu.spot.decide import CapacityKind

__all__ = ["BURST_REASONS", "CloudJob", "CloudNode"]


@dataclass
class CloudNode:
    name: str
    pool: str
    units: int
    requested_s: float
    ready_s: float
    free_units: int
    jobs: set[str] = field(default_factory=set)
    idle_token: int = 0
    reclaim_s: float | None = None
    """Set by an interruption's notice: no new work, and the node is gone at this time."""


@dataclass
class CloudJob:
    pending: PendingJob
    kind: CapacityKind
    units_by_node: dict[str, int]
    token: int
    start_s: float | None = None
    saved_s: float | None = None
    """Work saved by the checkpoint written in an interruption's notice (None: none written)."""
