"""Keep the scheduler's free-GPU index and quota ledger between cycles, updated by differences.

Rebuilding both from the snapshot costs O(running jobs + GPUs) per cycle, which dominates a
64,000-job replay where each cycle changes one or two jobs. The books are a memo of a pure
function: they remember which running jobs (and which schedulable nodes) they currently hold,
and each new snapshot is reached by releasing what is gone and allocating what is new. The result
is identical to a fresh build (a property test checks this); any exception drops the memo.
"""

from __future__ import annotations

from dataclasses import dataclass

from greengpu.model import Cluster, ClusterSnapshot, GpuSlot, RunningJob
from greengpu.sched.quota import QuotaLedger
from greengpu.sched.state import PlacementState, cluster_layout


@dataclass
class Books:
    """A PlacementState and QuotaLedger plus the running jobs they hold."""

    cluster: Cluster
    borrow_non_interruptible: bool
    state: PlacementState
    ledger: QuotaLedger
    running: dict[str, RunningJob]
    unschedulable: set[int]
    version: int = 0
    """Bumped whenever the held running jobs change (caches derived from them check it)."""
    last_running: tuple[RunningJob, ...] | None = None
    """The snapshot tuple the books were last brought up to date with (skip the diff when reused)."""
    ends_cache: tuple[int, dict[int, list[tuple[float, tuple[GpuSlot, ...]]]]] | None = None

    def commit(self, started: list[RunningJob], stopped: list[str]) -> None:
        """Record the jobs a cycle placed and killed (it already changed the state and ledger)."""
        for job_id in stopped:
            self.running.pop(job_id, None)
        for running in started:
            self.running[running.job.job_id] = running
        if started or stopped:
            self.version += 1
            self.last_running = None


_BOOKS: dict[tuple[int, str], Books] = {}


def fresh_books(snapshot: ClusterSnapshot, borrow_non_interruptible: bool) -> Books:
    """Books built from scratch for `snapshot`."""
    cluster = snapshot.cluster
    layout = cluster_layout(cluster)
    state = PlacementState(snapshot)
    ledger = QuotaLedger(cluster, layout.model_of_node, layout.memory_of_node, borrow_non_interruptible)
    running: dict[str, RunningJob] = {}
    for job in snapshot.running:
        ledger.charge(job)
        running[job.job.job_id] = job
    unschedulable = {i for i, ok in enumerate(state.schedulable) if not ok}
    return Books(cluster, borrow_non_interruptible, state, ledger, running, unschedulable)


def books_for(snapshot: ClusterSnapshot, borrow_non_interruptible: bool, incremental: bool = True,
              purpose: str = "main") -> Books:
    """Books for `snapshot`: the remembered ones brought up to date, or fresh ones.

    `purpose` keeps separate books for callers whose snapshots differ systematically (the wake
    planner's what-if cycles see sleeping nodes as up), so they do not undo each other's work.
    """
    cluster = snapshot.cluster
    if not incremental:
        return fresh_books(snapshot, borrow_non_interruptible)
    books = _BOOKS.get((id(cluster), purpose))
    if books is None or books.cluster is not cluster or books.borrow_non_interruptible != borrow_non_interruptible:
        books = fresh_books(snapshot, borrow_non_interruptible)
        if len(_BOOKS) > 16:
            _BOOKS.clear()
        _BOOKS[(id(cluster), purpose)] = books
        return books
    state = books.state
    if snapshot.running is not books.last_running:
        _update_running(books, snapshot.running)
    states = snapshot.node_states
    index = state.index
    candidates = books.unschedulable | {index[name] for name in states if name in index}
    names = state.names
    for node in candidates:
        name = names[node]
        flag = states[name].schedulable if name in states else True
        state.set_schedulable(node, flag)
        if flag:
            books.unschedulable.discard(node)
        else:
            books.unschedulable.add(node)
    return books


def _update_running(books: Books, running: tuple[RunningJob, ...]) -> None:
    state, ledger = books.state, books.ledger
    current = {r.job.job_id: r for r in running}
    held_jobs = books.running
    for job_id, held in list(held_jobs.items()):
        now = current.get(job_id)
        if now is held:
            continue
        if now is None or now.slots != held.slots or now.job.units != held.job.units:
            state.release(held.slots)
            ledger.charge(held, -1)
            del held_jobs[job_id]
            books.version += 1
    if len(held_jobs) != len(current) or any(held_jobs.get(k) is not v for k, v in current.items()):
        for job_id, now in current.items():
            if job_id not in held_jobs:
                state.allocate(now.slots)
                ledger.charge(now)
                books.version += 1
            held_jobs[job_id] = now  # same slots: keep the newest object (its other fields may differ)
    books.last_running = running


def forget_books(cluster: Cluster) -> None:
    """Drop the remembered books of `cluster` (after an error, or to force a fresh build)."""
    for key in [k for k in _BOOKS if k[0] == id(cluster)]:
        del _BOOKS[key]
