"""Reservations for blocked jobs, so that backfill never delays them.

A blocked job (highest first, up to `reservations` per cycle) gets the nodes on which it could
start earliest, judged from the expected ends of the jobs running there. Other jobs may use
those nodes only if they are expected to finish before the reserved start (like Slurm's
backfill, which uses time limits; here `duration_s` is the wall-time estimate).
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from greengpu.model import GPU_UNITS, GpuSlot, Job, RunningJob
from greengpu.sched.placement import allowed_models, chunks_for
from greengpu.sched.state import PlacementState


@dataclass(frozen=True)
class Reservation:
    """Nodes held back for `job_id` from `start_s` on."""

    job_id: str
    nodes: frozenset[int]
    start_s: float


def ends_by_node(state: PlacementState,
                 running: Collection[RunningJob]) -> dict[int, list[tuple[float, tuple[GpuSlot, ...]]]]:
    """Per node, the expected ends of its running jobs, earliest first (raw: overdue ends are in the past)."""
    result: dict[int, list[tuple[float, tuple[GpuSlot, ...]]]] = {}
    for job in running:
        end_s = job.expected_end_s
        for name in job.nodes:
            node = state.index.get(name)
            if node is not None:
                result.setdefault(node, []).append((end_s, tuple(s for s in job.slots if s.node == name)))
    for ends in result.values():
        ends.sort(key=lambda e: e[0])
    return result


def _earliest_free_s(state: PlacementState, node: int, count: int, now_s: float, soonest_s: float,
                     ends: list[tuple[float, tuple[GpuSlot, ...]]]) -> float | None:
    """When `count` GPUs of `node` are free; an overdue job is taken to end at `soonest_s`."""
    whole = state.free_whole[node]
    if whole >= count:
        return now_s
    free = list(state.gpu_free[node])
    for end_s, slots in ends:
        for slot in slots:
            free[slot.gpu_index] += slot.units
            if free[slot.gpu_index] == GPU_UNITS:
                whole += 1
        if whole >= count:
            return max(end_s, soonest_s)  # ends are sorted, so clamping keeps the order
    return None


def reserve(state: PlacementState, job: Job, ends: dict[int, list[tuple[float, tuple[GpuSlot, ...]]]],
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
        times: list[tuple[float, int]] = []
        for node in range(len(state.names)):
            if state.model[node] != model or not state.schedulable[node] or node in excluded:
                continue
            if state.size[node] < count:
                continue
            start_s = _earliest_free_s(state, node, count, now_s, now_s + interval_s, ends.get(node, []))
            if start_s is not None:
                times.append((start_s, node))
        if len(times) < len(chunks):
            continue
        times.sort()
        picked = times[: len(chunks)]
        candidate = Reservation(job.job_id, frozenset(n for _, n in picked), picked[-1][0])
        if best is None or candidate.start_s < best.start_s:
            best = candidate
    return best
