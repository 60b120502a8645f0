"""Reservations for blocked jobs, so that backfill never delays them.

A blocked job (highest first, up to `reservations` per cycle) gets the nodes on which it could
start earliest, judged from the expected ends of the jobs running there. Other jobs may use
those nodes only if they are expected to finish before the reserved start (like Slurm's
backfill, which uses time limits; here `duration_s` is the wall-time estimate).
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Collection, Iterable
from dataclasses import dataclass

from greengpu.model import GPU_UNITS, GpuSlot, Job, RunningJob
from greengpu.sched.placement import allowed_models, chunks_for
from greengpu.sched.state import ChangeLog, PlacementState


@dataclass(frozen=True)
class Reservation:
    """Nodes held back for `job_id` from `start_s` on."""

    job_id: str
    nodes: frozenset[int]
    start_s: float


_Entry = tuple[float, str, tuple[GpuSlot, ...]]


class NodeEnds:
    """Per node, the expected ends of its running jobs, earliest first (raw: overdue ends are in the past).

    Kept up to date job by job by the scheduler's remembered books, with a memo per node of when
    `count` GPUs come free for a given free-GPU vector (exact: the key holds everything the answer
    depends on besides the clock; a node's memo is dropped when its jobs change), and per (model, count)
    those times for every node (`_Scan`), brought up to date node by node from the change logs of the
    free-GPU index and of these ends: a saturated cycle reserves for the same few shapes again and again
    while almost no node changes.
    """

    def __init__(self, state: PlacementState) -> None:
        self.state = state
        """The free-GPU index the scans follow (its `changes` log)."""
        self.index = state.index
        self._model, self._size = state.model, state.size  # the layout: shared, never changed
        self.by_node: dict[int, list[_Entry]] = {}
        self.memo: dict[int, dict[tuple[int, tuple[int, ...]], float | None]] = {}
        self.sized: dict[tuple[str, int], list[int]] = {}
        """Per (model, GPUs needed on a node), the nodes of that model with that many GPUs, in index
        order (from the layout)."""
        self.scans: dict[tuple[str, int], _Scan] = {}
        self.changes = ChangeLog()
        """The nodes whose ends changed (read by the scans like the index's log)."""

    def nodes_of(self, model: str, count: int) -> list[int]:
        """The nodes of `model` with at least `count` GPUs, in index order."""
        found = self.sized.get((model, count))
        if found is None:
            models, sizes = self._model, self._size
            found = self.sized[(model, count)] = [n for n in range(len(models))
                                                  if models[n] == model and sizes[n] >= count]
        return found

    def _entries(self, job: RunningJob) -> list[tuple[int, _Entry]]:
        result: list[tuple[int, _Entry]] = []
        if job.job.gpu_profile:
            return result  # a MIG instance or replica frees no GPU whole-GPU work could use
        for name in job.nodes:
            node = self.index.get(name)
            if node is not None:
                result.append((node, (job.expected_end_s, job.job.job_id,
                                      tuple(s for s in job.slots if s.node == name))))
        return result

    def add(self, job: RunningJob) -> None:
        for node, entry in self._entries(job):
            bisect.insort(self.by_node.setdefault(node, []), entry)
            self._changed(node)

    def remove(self, job: RunningJob) -> None:
        for node, entry in self._entries(job):
            entries = self.by_node.get(node, [])
            position = bisect.bisect_left(entries, entry)
            if position < len(entries) and entries[position] == entry:
                del entries[position]
            self._changed(node)

    def _changed(self, node: int) -> None:
        self.memo.pop(node, None)
        self.changes.add((node,))


_FREE_NOW = -math.inf
"""A scan's time for a node with enough whole GPUs free already."""


class _Scan:
    """Per node of one (model, count), the raw time after which `count` GPUs are whole-free (`_FREE_NOW` when
    they are; nodes that are not schedulable, or never free that many before every job ends, are left out),
    and how far into each change log it is up to date."""

    __slots__ = ("ends_epoch", "ends_seen", "members", "state_epoch", "state_seen", "times")

    def __init__(self, members: frozenset[int]) -> None:
        self.members = members
        self.times: dict[int, float] = {}
        self.state_epoch = self.ends_epoch = -1
        self.state_seen = self.ends_seen = 0


def ends_by_node(state: PlacementState, running: Iterable[RunningJob]) -> NodeEnds:
    """The expected ends of `running`, per node of `state`."""
    ends = NodeEnds(state)
    for job in running:
        ends.add(job)
    return ends


def _raw_free_s(free_now: tuple[int, ...], whole: int, count: int, ends: list[_Entry]) -> float | None:
    """The expected end after which `count` GPUs are whole-free, or None (not before every job ends)."""
    free = list(free_now)
    for end_s, _, slots in ends:
        for slot in slots:
            free[slot.gpu_index] += slot.units
            if free[slot.gpu_index] == GPU_UNITS:
                whole += 1
        if whole >= count:
            return end_s
    return None


def reserve(state: PlacementState, job: Job, ends: NodeEnds,
            excluded: Collection[int], now_s: float, interval_s: float) -> Reservation | None:
    """The earliest nodes and start time for `job`, or None (fractional jobs need no reservation)."""
    if job.is_fractional:
        return None
    best: Reservation | None = None
    for model in allowed_models(state, job):
        chunks = chunks_for(job, state.node_size_by_model[model])
        if chunks is None:
            continue
        count = max(chunks)
        times = _free_times(state, ends, model, count, excluded, now_s, now_s + interval_s)
        if len(times) < len(chunks):
            continue
        picked = [min(times)] if len(chunks) == 1 else sorted(times)[: len(chunks)]
        candidate = Reservation(job.job_id, frozenset(n for _, n in picked), picked[-1][0])
        if best is None or candidate.start_s < best.start_s:
            best = candidate
    return best


def reservation_unchanged_until_s(state: PlacementState, job: Job, ends: NodeEnds, now_s: float,
                                  interval_s: float) -> float:
    """Until when `reserve` would give `job` the same nodes with nothing changed but the clock: a node's time is
    its raw one or the next cycle (now + `interval_s`), whichever is later, so the order of the nodes stands
    until that floor reaches the next raw time above it (greengpu.sched.steady). `ends` are those kept for
    `state` (`ends_by_node(state, ...)`), as a cycle keeps them."""
    soonest_s = now_s + interval_s
    until = math.inf
    for model in allowed_models(state, job):
        chunks = chunks_for(job, state.node_size_by_model[model])
        if chunks is None:
            continue
        count = max(chunks)
        later = [raw for raw in _scan(state, ends, model, count).values() if raw > soonest_s]
        if later:
            until = min(until, min(later) - interval_s)
    return until


def _free_times(state: PlacementState, ends: NodeEnds, model: str, count: int, excluded: Collection[int],
                now_s: float, soonest_s: float) -> list[tuple[float, int]]:
    """(when `count` GPUs come free, node) for each usable node of `model`, in no particular order; an
    overdue job is taken to end at `soonest_s`. The scheduler's hottest loop (a node per blocked job per
    cycle): the raw times are kept between calls and cycles (`_Scan`), only the clock is applied here."""
    raw_times = _scan(state, ends, model, count) if state is ends.state else _fresh_scan(state, ends, model, count)
    return [(now_s if raw == _FREE_NOW else (raw if raw > soonest_s else soonest_s), node)
            for node, raw in raw_times.items() if node not in excluded]


def _fresh_scan(state: PlacementState, ends: NodeEnds, model: str, count: int) -> dict[int, float]:
    times: dict[int, float] = {}
    for node in ends.nodes_of(model, count):
        _rescan(state, ends, node, count, times)
    return times


def _scan(state: PlacementState, ends: NodeEnds, model: str, count: int) -> dict[int, float]:
    """The raw times of (model, count), brought up to date with the nodes changed since the last call."""
    scan = ends.scans.get((model, count))
    if scan is None:
        scan = ends.scans[(model, count)] = _Scan(frozenset(ends.nodes_of(model, count)))
    state_log, ends_log = state.changes, ends.changes
    if scan.state_epoch != state_log.epoch or scan.ends_epoch != ends_log.epoch:
        scan.times = _fresh_scan(state, ends, model, count)
    elif len(state_log.nodes) > scan.state_seen or len(ends_log.nodes) > scan.ends_seen:
        changed = set(state_log.nodes[scan.state_seen:])
        changed.update(ends_log.nodes[scan.ends_seen:])
        times, members = scan.times, scan.members
        for node in changed:
            if node in members:
                _rescan(state, ends, node, count, times)
    scan.state_epoch, scan.state_seen = state_log.epoch, len(state_log.nodes)
    scan.ends_epoch, scan.ends_seen = ends_log.epoch, len(ends_log.nodes)
    return scan.times


def _rescan(state: PlacementState, ends: NodeEnds, node: int, count: int, times: dict[int, float]) -> None:
    """Set `node`'s raw time in `times` (or leave it out) from the free-GPU index and the ends as they are."""
    if not state.schedulable[node]:
        times.pop(node, None)
        return
    whole = state.free_whole[node]
    if whole >= count:
        times[node] = _FREE_NOW
        return
    free_now = tuple(state.gpu_free[node])
    memo = ends.memo.get(node)
    if memo is None:
        memo = ends.memo[node] = {}
    key = (count, free_now)
    if key in memo:
        raw = memo[key]
    else:
        raw = memo[key] = _raw_free_s(free_now, whole, count, ends.by_node.get(node, []))
    if raw is None:
        times.pop(node, None)
    else:
        times[node] = raw
