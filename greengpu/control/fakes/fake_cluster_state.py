"""The fake cluster's state in its state directory (`fake-cluster.json`): nodes, running and pending jobs,
written when the tick settles, so a daemon killed and restarted finds the same cluster."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from greengpu.errors import BadInput
from greengpu.model import GPU_UNITS, Cluster, GpuSlot, Job, PendingJob, PowerState, RunningJob


@dataclass
class FakeNode:
    name: str
    power: str = PowerState.AWAKE.value
    since_s: float = 0.0
    idle_since_s: float | None = 0.0
    drained: bool = False
    """Drained for a failing GPU (greengpu.health.drain): no new work until someone returns it."""


def _slot(text: str) -> GpuSlot:
    """`node:index` (a whole GPU) or `node:index:milli-GPUs` (a share of one), `=instance` after a MIG instance's
    or a time-slice replica's (`n1:0:428=3g.20gb@0`)."""
    text, _, instance = text.partition("=")
    head, _, last = text.rpartition(":")
    node, _, middle = head.rpartition(":")
    if node and middle.isdigit():
        return GpuSlot(node, int(middle), int(last), instance)
    return GpuSlot(head, int(last), instance=instance)


class FakeClusterState:
    """Loading and saving the fake cluster (mixed into `FakeCluster`)."""

    cluster: Cluster
    jobs: dict[str, Job]
    state_path: Path
    nodes: dict[str, FakeNode]
    running: dict[str, RunningJob]
    pending: dict[str, PendingJob]
    finished: dict[str, float]
    next_arrival: int
    origin_s: float
    _changed: bool
    _slots_text: dict[str, str]
    paces: dict[str, list[tuple[float, float, float]]]

    def _load(self) -> None:
        if not self.state_path.exists():
            return
        try:
            self._load_saved(json.loads(self.state_path.read_text()))
        except (ValueError, KeyError, TypeError, AttributeError, OSError) as error:  # UnicodeDecodeError: ValueError
            missing = f"key {error}" if isinstance(error, KeyError) else f"{type(error).__name__}: {error}"
            raise BadInput(f"{self.state_path}: a damaged fake-cluster state, or one of another cluster or job "
                           f"stream ({missing}); move it away to start the fake cluster afresh") from None
        unknown = set(self.nodes) ^ {n.name for n in self.cluster.nodes}
        if unknown:
            raise BadInput(f"{self.state_path}: its nodes are not the inventory's (e.g. {sorted(unknown)[0]}): "
                           "the state of another cluster; give this one a --state of its own")

    def _load_saved(self, saved: dict[str, Any]) -> None:
        self.nodes = {n["name"]: FakeNode(**n) for n in saved["nodes"]}
        self.next_arrival = int(saved["next_arrival"])
        self.origin_s = float(saved.get("origin_s", self.origin_s))
        self.finished = {job_id: float(end_s) for job_id, end_s in saved.get("finished", {}).items()}
        for job_id, start_s, end_s, slots, signalled_s, preempted_for in saved["running"]:
            held = tuple(_slot(text) for text in slots.split())
            self.running[job_id] = RunningJob(job=self.jobs[job_id], slots=held, start_time_s=start_s,
                                              expected_end_s=end_s, preempt_signalled_s=signalled_s,
                                              preempted_for=preempted_for)
        self.paces = {job_id: [(float(a), float(b), float(c)) for a, b, c in paces]  # control/fakes/fake_pace.py
                      for job_id, paces in saved.get("paces", {}).items() if job_id in self.running}
        remaining = saved.get("remaining", {})
        for job_id in saved["pending"]:
            job = self.jobs[job_id]
            left = replace(job, duration_s=remaining[job_id]) if job_id in remaining else job
            self.pending[job_id] = PendingJob(left)

    def _save(self) -> None:
        if not self._changed:
            return
        self._changed = False
        state = {"nodes": [vars(n) for n in self.nodes.values()], "next_arrival": self.next_arrival,
                 "origin_s": self.origin_s,
                 "finished": self.finished,
                 "running": [[r.job.job_id, r.start_time_s, r.expected_end_s, self._slots_of(r),
                              r.preempt_signalled_s, r.preempted_for] for r in self.running.values()],
                 "paces": self.paces,
                 # Job ids, in queue order; the work left only of jobs stopped part-way (the rest have their
                 # whole duration): a queue of thousands is written every tick.
                 "pending": list(self.pending),
                 "remaining": {job_id: p.job.duration_s for job_id, p in self.pending.items()
                               if p.job is not self.jobs[job_id]}}
        tmp = self.state_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(state))
        os.replace(tmp, self.state_path)

    def _slots_of(self, running: RunningJob) -> str:
        text = self._slots_text.get(running.job.job_id)
        if text is None:
            text = self._slots_text[running.job.job_id] = " ".join(
                (f"{s.node}:{s.gpu_index}" if s.units == GPU_UNITS else f"{s.node}:{s.gpu_index}:{s.units}")
                + (f"={s.instance}" if s.instance else "") for s in running.slots)
        return text
