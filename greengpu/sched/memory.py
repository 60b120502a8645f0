"""What the scheduling core remembers between cycles: one object that a body creates, owns and passes in.

The core is a pure function of a snapshot and a policy; the memory only makes it cheaper. Everything in it is a
memo of that pure function, checked by identity against the inputs it was found from (the Cluster object, the
running and pending tuples, the node-state mapping), so a cycle decides exactly the same with a fresh memory
as with a kept one, only slower (the books are rebuilt, every kind of job asked again).

Lifetime: a body that runs cycles one after another on snapshots of one cluster (the daemon's brain, one
replay) creates one `SchedulerMemory` with itself, passes it to every `schedule_cycle` (and to
`greengpu.sched.slack.queue_guard`), and drops it with itself. `schedule_cycle` called without one makes a
fresh one that lives for that call. A memory holds the last cluster, running and pending tuples it met alive
(a few hundred MB for a 100,000-job queue); it is not shared between threads, nor between bodies that
schedule different clusters at once (each would evict the other's books). Any exception within a cycle
drops the memory's books (`forget`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from greengpu.model import Cluster, PendingJob
    from greengpu.sched.books import Books
    from greengpu.sched.shared_gpus import SharedGpu
    from greengpu.sched.slack import NodeShapes
    from greengpu.sched.state import ClusterLayout


@dataclass
class SchedulerMemory:
    """The state kept between scheduling cycles (see the module's docstring for its lifetime)."""

    books: dict[str, Books] = field(default_factory=dict)
    """The free-GPU index, quota ledger and per-kind verdicts, by purpose (greengpu.sched.books)."""
    layout: tuple[Cluster, ClusterLayout] | None = None
    """The last cluster's node layout (greengpu.sched.state.cluster_layout)."""
    shapes: NodeShapes | None = None
    """The last cluster's nodes by shape and the queue guards found (greengpu.sched.slack)."""
    shared_gpus: tuple[Cluster, tuple[SharedGpu, ...]] | None = None
    """The last cluster's MIG and time-sliced GPUs (greengpu.sched.shared_gpus)."""
    kept_pending: tuple[tuple[PendingJob, ...], tuple[PendingJob, ...]] | None = None
    """The last queue and its whole-GPU part (greengpu.sched.shared_cycle.split_shared)."""

    def forget(self) -> None:
        """Drop the books (after an error within a cycle, or to force a fresh build)."""
        self.books.clear()
