"""Why a pending job waits, typed: what the scheduling core distinguishes, and what would free its way.

Each waiting job gets one `Wait`. Its `reason` says what kind of thing stands in the way; the other
fields say which part of the cluster would let it start sooner, in terms any body can resolve
against its own inventory and running set (node names, GPU models, tenants: nothing body-specific).
`Wait.text` is the one-line reason the JSON outputs and logs have always carried; the strings are
part of the user-facing contract and do not change.

The energy levers read these results (greengpu.energy.slack): a lever may spend slack, never queue
time, so caps are lifted on exactly the running jobs whose completion frees a waiting job's way,
and no node a waiting job could use is put to sleep.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum

WAIT_NO_MODEL = "no GPU of an allowed model in the cluster"
WAIT_QUOTA = "quota"
WAIT_CAPACITY = "no free GPUs that fit"
WAIT_PREEMPTING = "waiting for preempted jobs to checkpoint and stop"
WAIT_WAKE = "waiting for sleeping nodes to wake"


class WaitReason(StrEnum):
    """What stands between a pending job and its start."""

    NO_MODEL = "no-model"
    """No GPU of a model the job allows exists: nothing running or asleep is in its way."""
    QUOTA = "quota"
    """Its tenant is at its quota (plus borrowing limit) or memory cap: only the tenant's own running
    jobs ending lets it start; another free node would not."""
    PREEMPTING = "preempting"
    """Victims were asked to checkpoint and stop for it; it starts when their grace is over."""
    WAKE = "wake"
    """Sleeping or booting nodes can hold it; it starts when they are up (or when awake GPUs free)."""
    CAPACITY = "capacity"
    """No free GPUs that fit (a job on one node): any usable node's jobs ending lets it start."""
    GANG = "gang"
    """A job spanning several nodes that cannot assemble: the jobs on the nodes it could use are in its way."""
    RESERVATION = "reservation"
    """Blocked for capacity and holding a reservation: the jobs on the reserved nodes are in its way."""


CAPACITY_REASONS = frozenset({WaitReason.CAPACITY, WaitReason.GANG, WaitReason.RESERVATION, WaitReason.WAKE})
"""Waits that more or faster capacity of the right shape would shorten."""


@dataclass(frozen=True)
class Wait:
    """Why one pending job waits, and what would let it start sooner."""

    reason: WaitReason
    tenant: str
    """The job's tenant (a quota wait is freed by this tenant's own running jobs)."""
    models: tuple[str, ...] = ()
    """GPU models the job may run on (capacity, gang, wake and quota waits)."""
    node_gpus: int = 0
    """Fewest GPUs a node needs to hold a piece of the job (its largest per-node chunk); 0: any node."""
    nodes: frozenset[str] = frozenset()
    """Specific nodes in its way: a reservation's nodes, or the nodes held for a preempting job."""
    detail: str = ""
    """Extra words for the text (a quota wait's problem)."""

    @property
    def text(self) -> str:
        """The one-line reason of the JSON outputs (unchanged wording)."""
        reason = self.reason
        if reason is WaitReason.QUOTA:
            return f"{WAIT_QUOTA}: {self.detail}" if self.detail else WAIT_QUOTA
        if reason is WaitReason.WAKE:
            return WAIT_WAKE
        if reason is WaitReason.PREEMPTING:
            return WAIT_PREEMPTING
        if reason is WaitReason.NO_MODEL:
            return WAIT_NO_MODEL
        return WAIT_CAPACITY

    @property
    def capacity_bound(self) -> bool:
        """Whether more or faster capacity of the right shape would let it start sooner."""
        return self.reason in CAPACITY_REASONS


def distinct_of(waits: Mapping[str, Wait] | Iterable[Wait]) -> Collection[Wait]:
    """The distinct Wait objects of a cycle's waits (or of some waits): jobs alike share one object, so a
    queue thousands deep has a few. A mapping that knows them already (`distinct_waits`) is not walked;
    otherwise the walk runs in C."""
    known = getattr(waits, "distinct_waits", None)
    if known is not None:
        return known  # type: ignore[no-any-return]
    values = waits.values() if isinstance(waits, Mapping) else list(waits)
    return dict(zip(map(id, values), values, strict=True)).values()
