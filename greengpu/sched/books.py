"""Keep the scheduler's free-GPU index and quota ledger between cycles, updated by differences.

Rebuilding both from the snapshot costs O(running jobs + GPUs) per cycle, which dominates a
64,000-job replay where each cycle changes one or two jobs. The books are a memo of a pure
function: they remember which running jobs (and which schedulable nodes) they currently hold,
and each new snapshot is reached by releasing what is gone and allocating what is new. The result
is identical to a fresh build (a property test checks this); any exception drops the memo.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from greengpu.model import Cluster, ClusterSnapshot, RunningJob
from greengpu.sched.backfill import NodeEnds
from greengpu.sched.pending_index import PendingIndex
from greengpu.sched.quota import QuotaLedger
from greengpu.sched.state import PlacementState, cluster_layout
from greengpu.sched.waits import Wait

if TYPE_CHECKING:
    from greengpu.sched.memory import SchedulerMemory


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
    ends: NodeEnds | None = None
    """Expected ends per node for backfill reservations: built on first use, then kept up to date."""
    last_states: object = None
    """The snapshot's node_states mapping last applied (skip the walk when the same object comes back;
    callers replace the mapping rather than change it in place, as ClusterSnapshot asks)."""
    by_id: dict[int, RunningJob] = field(default_factory=dict)
    """The RunningJob objects in `running` by id() (they are kept alive, so ids stay unique)."""
    wait_memo: dict[tuple[object, ...], Wait] = field(default_factory=dict)
    """Typed waits by everything they record (one object for jobs alike: the slack rule visits each once)."""
    reserved_wait_memo: dict[tuple[Wait, frozenset[int]], Wait] = field(default_factory=dict)
    """A reservation's wait (the job's capacity wait naming the reserved nodes) by that wait and those nodes: a
    saturated queue's head is given the same reservation cycle after cycle."""
    kinds: dict[tuple[object, ...], tuple[Wait, int, object]] = field(default_factory=dict)
    """Per kind of waiting job, a verdict that outlives its cycle (greengpu.sched.cycle `_carry_kinds`): its wait,
    its tenant's usage version, and None (a quota verdict) or that every free node was owed."""
    queue_ahead: list[object] = field(default_factory=list)
    """The victim finder's view of the last queue it weighed (greengpu.sched.preemption `_ahead`)."""
    signalled: set[int] = field(default_factory=set)
    """id() of the held running jobs asked to stop (preempt_signalled_s set): most cycles have none."""
    pending: PendingIndex | None = None
    """The pending queue as of the last cycle (greengpu.sched.pending_index), built on first use."""
    standings: dict[tuple[object, ...], tuple[int, Wait | None, Wait | None, tuple[str, ...]]] = \
        field(default_factory=dict)
    """Per kind of waiting job, what the cycle's `refused_wait` read of its tenant, by the tenant's usage version
    (greengpu.sched.cycle.alike `_standing_of`); kept while `standings_key` holds."""
    vouched: dict[tuple[object, ...], tuple[int, Wait]] = field(default_factory=dict)
    """Per kind with no memo, the wait the walk gives it without asking (greengpu.sched.cycle.known_kinds `_vouch`)."""
    vouched_refused: dict[tuple[str, ...], set[tuple[object, ...]]] = field(default_factory=dict)
    """Per set of models, the vouched kinds that are refusals by the lending rule."""
    standings_key: object = None
    """What the three above read besides the ledger: whether the lending rule applies, and the nodes that could
    wake (greengpu.sched.cycle.walk `_keep_standings`)."""
    priorities: dict[int, int] = field(default_factory=dict)
    """How many held running jobs have each priority (the victim search asks for the lowest every cycle)."""
    grouped: list[object] = field(default_factory=list)
    """The victim finder's last running tuple grouped by tenant (greengpu.sched.preemption.eligibility)."""
    on_node: dict[int, dict[str, RunningJob]] = field(default_factory=dict)
    """Per node index, the held running jobs on it by job id (the lending check reads a node's jobs)."""

    def lowest_priority(self) -> float:
        """The lowest priority among the held running jobs; infinite when none runs."""
        return min(self.priorities, default=math.inf)

    def _track(self, running: RunningJob, sign: int) -> None:
        """Add (`sign` 1) or take away (-1) a held job in the per-priority counts and the per-node index."""
        priority = running.job.priority
        left = self.priorities.get(priority, 0) + sign
        if left:
            self.priorities[priority] = left
        else:
            del self.priorities[priority]
        index, job_id = self.state.index, running.job.job_id
        for name in running.nodes:
            node = index.get(name)
            if node is None:
                continue
            if sign > 0:
                self.on_node.setdefault(node, {})[job_id] = running
            else:
                jobs = self.on_node.get(node, {})
                jobs.pop(job_id, None)
                if not jobs:
                    self.on_node.pop(node, None)

    def commit(self, started: list[RunningJob], stopped: list[str]) -> None:
        """Record the jobs a cycle placed and killed (it already changed the state and ledger)."""
        for job_id in stopped:
            gone = self.running.pop(job_id, None)
            if gone is not None:
                self._track(gone, -1)
                self.by_id.pop(id(gone), None)
                self.signalled.discard(id(gone))
                if self.ends is not None:
                    self.ends.remove(gone)
        for running in started:
            known = self.running.get(running.job.job_id)
            if known is not None:
                self._track(known, -1)
            self._track(running, 1)
            self.running[running.job.job_id] = running
            self.by_id[id(running)] = running
            if self.ends is not None:
                self.ends.add(running)
        if started or stopped:
            self.version += 1
            self.last_running = None


def fresh_books(snapshot: ClusterSnapshot, borrow_non_interruptible: bool,
                memory: SchedulerMemory | None = None) -> Books:
    """Books built from scratch for `snapshot` (the cluster's layout taken from `memory` when it has it)."""
    cluster = snapshot.cluster
    layout = cluster_layout(cluster, memory)
    state = PlacementState(snapshot, memory)
    ledger = QuotaLedger(cluster, layout.model_of_node, layout.memory_of_node, borrow_non_interruptible)
    running: dict[str, RunningJob] = {}
    for job in snapshot.running:
        ledger.charge(job)
        running[job.job.job_id] = job
    unschedulable = {i for i, ok in enumerate(state.schedulable) if not ok}
    books = Books(cluster, borrow_non_interruptible, state, ledger, running, unschedulable)
    books.by_id = {id(r): r for r in running.values()}
    for held in running.values():
        books._track(held, 1)
    books.signalled = {id(r) for r in running.values() if r.preempt_signalled_s is not None}
    return books


def books_for(snapshot: ClusterSnapshot, borrow_non_interruptible: bool, memory: SchedulerMemory,
              incremental: bool = True, purpose: str = "main") -> Books:
    """Books for `snapshot`: the ones `memory` keeps brought up to date, or fresh ones (then kept there).

    `purpose` keeps separate books for callers whose snapshots differ systematically (what-if cycles,
    e.g. with some nodes taken as up), so they do not undo each other's work.
    """
    cluster = snapshot.cluster
    if not incremental:
        return fresh_books(snapshot, borrow_non_interruptible, memory)
    books = memory.books.get(purpose)
    if books is None or books.cluster is not cluster or books.borrow_non_interruptible != borrow_non_interruptible:
        books = memory.books[purpose] = fresh_books(snapshot, borrow_non_interruptible, memory)
        return books
    state = books.state
    if snapshot.running is not books.last_running:
        _update_running(books, snapshot.running)
    states = snapshot.node_states
    if states is books.last_states:
        return books
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
    books.last_states = states
    return books


def _update_running(books: Books, running: tuple[RunningJob, ...]) -> None:
    """Bring the books to `running` by object identity: set differences in C, Python work per change only.

    Held objects stay referenced by the books, so their ids cannot be reused while they are compared.
    """
    state, ledger = books.state, books.ledger
    held_jobs = books.running
    by_id = books.by_id
    current = dict(zip(map(id, running), running, strict=True))  # built in C: no Python step per job
    gone_ids = by_id.keys() - current.keys()
    new_ids = current.keys() - by_id.keys()
    if gone_ids or new_ids:
        books.signalled -= gone_ids
        books.signalled.update(obj_id for obj_id in new_ids if current[obj_id].preempt_signalled_s is not None)
        arriving = {current[obj_id].job.job_id: current[obj_id] for obj_id in new_ids}
        for obj_id in gone_ids:
            held = by_id.pop(obj_id)
            job_id = held.job.job_id
            now = arriving.get(job_id)
            if now is not None and now.slots == held.slots and now.job.units == held.job.units:
                if books.ends is not None and now.expected_end_s != held.expected_end_s:
                    books.ends.remove(held)
                    books.ends.add(now)
                continue  # the same allocation in a new object (e.g. a preemption signal): swapped below
            state.release(held.slots)
            ledger.charge(held, -1)
            if books.ends is not None:
                books.ends.remove(held)
            del held_jobs[job_id]
            books._track(held, -1)
            books.version += 1
        for job_id, now in arriving.items():
            if job_id not in held_jobs:
                state.allocate(now.slots)
                ledger.charge(now)
                if books.ends is not None:
                    books.ends.add(now)
                books.version += 1
                books._track(now, 1)
            else:  # the same allocation in a new object: the indexes hold the new one
                books._track(held_jobs[job_id], -1)
                books._track(now, 1)
            held_jobs[job_id] = now
            by_id[id(now)] = now
    books.last_running = running

