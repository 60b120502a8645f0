"""A simulated cluster for `greengpu daemon --backend fake`: the whole loop on a laptop.

Nodes from the inventory with fake GPUs behind the real NVML adapter (pynvml's seam, its errors and
constraints), nodes that take `SUSPEND_S` to sleep and their `boot_s` to wake, and a job stream (a
trace, or a seeded generator) run by a small workload manager that carries out the daemon's
placements. Its state lives in the daemon's state directory, so a daemon killed and restarted finds
the same cluster: GPUs still at the limits it set, nodes still asleep (the crash-safety tests).
"""

from __future__ import annotations

import json
import os
import random
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from greengpu.backends.fake_nvml import FakeGpu, FakeNvml
from greengpu.backends.nvml import NvmlBackend
from greengpu.control.agent import gpu_observation
from greengpu.control.body import ActionFailed, Observation
from greengpu.control.jobclass import GpuJob
from greengpu.energy.sleep import NodeView
from greengpu.model import (
    Action,
    Cluster,
    ClusterSnapshot,
    GpuSlot,
    Job,
    KillJob,
    LockClocks,
    NodeState,
    PendingJob,
    PlaceJob,
    PowerState,
    PreemptJob,
    RunningJob,
    SetPowerLimit,
    SleepNode,
    WakeNode,
)
from greengpu.tick.power import NOMINAL_MAX_CLOCK_MHZ, GpuObservation, host_share_w
from greengpu.tick.sleep import SleepObservation

SUSPEND_S = 30.0
BUSY_UTILIZATION = 0.9
CLASSES = ("training", "training", "training", "batch", "inference", "interactive")


@dataclass
class FakeNode:
    name: str
    power: str = PowerState.AWAKE.value
    since_s: float = 0.0
    idle_since_s: float | None = 0.0


def generated_jobs(cluster: Cluster, start_s: float, count: int = 2000, seed: int = 0) -> list[Job]:
    """A seeded job stream sized to the cluster: about half of its GPUs busy on average."""
    rng = random.Random(seed)
    largest = max(t.gpus for t in cluster.node_types.values())
    sizes = [g for g in (1, 2, 4, 8) if g <= largest] or [1]
    mean_gpus = sum(sizes) / len(sizes)
    mean_duration_s = 1800.0
    interarrival_s = mean_gpus * mean_duration_s / max(1.0, 0.5 * cluster.total_gpus)
    jobs, now_s = [], start_s
    for index in range(count):
        now_s += rng.expovariate(1.0 / interarrival_s)
        gpus = rng.choice(sizes)
        jobs.append(Job(job_id=f"fake-{index:05d}", tenant=rng.choice(sorted(cluster.tenants) or ["default"]),
                        gpus=gpus, duration_s=max(60.0, rng.lognormvariate(7.0, 1.0)), submit_time_s=now_s,
                        job_class=rng.choice(CLASSES), gpus_per_node=gpus, checkpoint_interval_s=600.0))
    return jobs


class FakeCluster:
    """The cluster body of `--backend fake` (a `ClusterBody`)."""

    name = "fake"
    schedules_jobs = True

    def __init__(self, cluster: Cluster, jobs: list[Job], state_dir: Path, start_s: float,
                 never_wake: frozenset[str] = frozenset()) -> None:
        self.cluster = cluster
        self.never_wake = never_wake
        """Nodes whose wake-ups are lost (a dead NIC or BMC): they stay waking (the daemon's alert tests)."""
        self.jobs = {job.job_id: job for job in jobs}
        self.arrivals = sorted(jobs, key=lambda j: (j.submit_time_s, j.job_id))
        self.state_path = state_dir / "fake-cluster.json"
        self.nodes = {n.name: FakeNode(n.name, since_s=start_s - 86_400.0, idle_since_s=start_s) for n in cluster.nodes}
        self.running: dict[str, RunningJob] = {}
        self.pending: dict[str, PendingJob] = {}
        self.finished: dict[str, float] = {}
        self.next_arrival = 0
        self._load()
        self._type_of = {n.name: n.type_name for n in cluster.nodes}
        self._taken = {(s.node, s.gpu_index) for r in self.running.values() for s in r.slots}
        self._jobs_on = dict.fromkeys(self.nodes, 0)
        for slot in (s for r in self.running.values() for s in r.slots):
            self._jobs_on[slot.node] += 1
        self.nvml: dict[str, NvmlBackend] = {}
        self.fakes: dict[str, FakeNvml] = {}
        for node in cluster.nodes:
            t = cluster.node_types[node.type_name]
            gpus = [FakeGpu(name=f"fake {t.gpu_model}", min_limit_w=t.gpu_min_limit_w, max_limit_w=t.gpu_max_w,
                            default_limit_w=t.gpu_max_w, idle_w=t.gpu_idle_w, draw_w=t.gpu_max_w,
                            max_sm_clock_mhz=t.gpu_max_clock_mhz or NOMINAL_MAX_CLOCK_MHZ,
                            uuid=f"GPU-{node.name}-{i}") for i in range(t.gpus)]
            self.fakes[node.name] = FakeNvml(gpus, state_path=state_dir / f"nvml-{node.name}.json")
            backend = NvmlBackend(lib=self.fakes[node.name])
            backend.open()
            self.nvml[node.name] = backend

    # --- persistence ---------------------------------------------------------------------------

    def _load(self) -> None:
        if not self.state_path.exists():
            return
        saved = json.loads(self.state_path.read_text())
        self.nodes = {n["name"]: FakeNode(**n) for n in saved["nodes"]}
        self.next_arrival = int(saved["next_arrival"])
        self.finished = {job_id: float(end_s) for job_id, end_s in saved.get("finished", {}).items()}
        for job_id, start_s, end_s, slots in saved["running"]:
            self.running[job_id] = RunningJob(job=self.jobs[job_id], slots=tuple(GpuSlot(n, g) for n, g in slots),
                                              start_time_s=start_s, expected_end_s=end_s)
        for job_id, duration_s in saved["pending"]:
            self.pending[job_id] = PendingJob(replace(self.jobs[job_id], duration_s=duration_s))

    def _save(self) -> None:
        state = {"nodes": [asdict(n) for n in self.nodes.values()], "next_arrival": self.next_arrival,
                 "finished": self.finished,
                 "running": [[r.job.job_id, r.start_time_s, r.expected_end_s, [[s.node, s.gpu_index] for s in r.slots]]
                             for r in self.running.values()],
                 "pending": [[p.job.job_id, p.job.duration_s] for p in self.pending.values()]}
        tmp = self.state_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(state))
        os.replace(tmp, self.state_path)

    # --- time passes ---------------------------------------------------------------------------

    def _advance(self, now_s: float) -> None:
        for node in self.nodes.values():
            if node.power == PowerState.SUSPENDING.value and now_s >= node.since_s + SUSPEND_S:
                node.power, node.since_s, node.idle_since_s = PowerState.ASLEEP.value, now_s, None
            boot_s = self.cluster.node_types[self._type(node.name)].boot_s
            if (node.power == PowerState.WAKING.value and now_s >= node.since_s + boot_s
                    and node.name not in self.never_wake):
                node.power, node.since_s, node.idle_since_s = PowerState.AWAKE.value, now_s, now_s
                for gpu in self.fakes[node.name].gpus:  # a power cycle puts NVML's limits and clocks back
                    gpu.limit_w, gpu.locked_clock_mhz = gpu.default_limit_w, None
                self.fakes[node.name].save()
        for job_id, running in list(self.running.items()):
            if running.expected_end_s <= now_s:
                self._free(job_id, now_s)
                self.finished[job_id] = running.expected_end_s
        while self.next_arrival < len(self.arrivals) and self.arrivals[self.next_arrival].submit_time_s <= now_s:
            job = self.arrivals[self.next_arrival]
            self.pending[job.job_id] = PendingJob(job)
            self.next_arrival += 1

    def _type(self, node: str) -> str:
        return self._type_of[node]

    def _free(self, job_id: str, now_s: float) -> RunningJob:
        running = self.running.pop(job_id)
        for slot in running.slots:
            self.fakes[slot.node].set_load(slot.gpu_index, 0.0, [])
            self._taken.discard((slot.node, slot.gpu_index))
            self._jobs_on[slot.node] -= 1
        for name in {s.node for s in running.slots}:
            if self._jobs_on[name] == 0:
                self.nodes[name].idle_since_s = now_s
        return running

    # --- the body ------------------------------------------------------------------------------

    def observe(self, now_s: float, suspends_last_minute: int, wakes_last_minute: int) -> Observation:
        self._advance(now_s)
        self._save()
        states = {n.name: NodeState(power=PowerState(n.power), since_s=n.since_s)
                  for n in self.nodes.values() if n.power != PowerState.AWAKE.value}
        snapshot = ClusterSnapshot(now_s, self.cluster, tuple(self.running.values()), tuple(self.pending.values()),
                                   states)
        on_gpu = {(s.node, s.gpu_index): r.job for r in self.running.values() for s in r.slots}
        busy_nodes = {node for node, _ in on_gpu}
        gpus: list[GpuObservation] = []
        energy: dict[str, float] = {}
        settings: dict[tuple[str, int], tuple[float, int | None]] = {}
        idle_awake, asleep, ready = [], [], 0
        for node in self.cluster.nodes:
            state, node_type = self.nodes[node.name], self.cluster.node_types[node.type_name]
            power = PowerState(state.power)
            if power is PowerState.ASLEEP:
                asleep.append(NodeView(node.name, node_type.gpus, power, state.since_s, False, None))
                continue
            if power is PowerState.AWAKE:
                backend = self.nvml[node.name]
                readings = [backend.read(i) for i in range(backend.gpu_count)]
                energy[node.name] = sum(r.energy_j for r in readings)
                for reading, fake in zip(readings, self.fakes[node.name].gpus, strict=True):
                    settings[(node.name, reading.index)] = (reading.limit_w, fake.locked_clock_mhz)
                    job = on_gpu.get((node.name, reading.index))
                    seen = GpuJob(job.job_id, job.job_class, job.tenant) if job else None
                    gpus.append(gpu_observation(node.name, reading, seen, False, host_share_w(node_type)))
                if node.name not in busy_nodes:
                    idle_awake.append(NodeView(node.name, node_type.gpus, power, state.since_s, False,
                                               state.idle_since_s))
            if node.name not in busy_nodes and power in (PowerState.AWAKE, PowerState.WAKING):
                ready += node_type.gpus
        sleep = SleepObservation(now_s=now_s, idle_awake=tuple(idle_awake), asleep=tuple(asleep),
                                 ready_idle_gpus=ready, busy_gpus=sum(r.job.gpus for r in self.running.values()),
                                 suspends_last_minute=suspends_last_minute, wakes_last_minute=wakes_last_minute)
        return Observation(snapshot, tuple(gpus), sleep, energy, settings)

    def act(self, action: Action, now_s: float) -> str:
        try:
            return self._act(action, now_s)
        finally:
            # Node power is saved at once (the crash tests look at it); job starts and stops are saved at the
            # next look, as a workload manager that dies loses what it had not written down.
            if isinstance(action, SleepNode | WakeNode):
                self._save()

    def _act(self, action: Action, now_s: float) -> str:
        if isinstance(action, PlaceJob):
            waiting = self.pending.get(action.job_id)
            if waiting is None or any((s.node, s.gpu_index) in self._taken for s in action.slots) or any(
                    self.nodes[s.node].power != PowerState.AWAKE.value for s in action.slots):
                raise ActionFailed(f"cannot place {action.job_id}: not pending, or its GPUs are taken or asleep")
            del self.pending[action.job_id]
            self.running[action.job_id] = RunningJob(waiting.job, action.slots, now_s, now_s + waiting.job.duration_s)
            for slot in action.slots:
                self.fakes[slot.node].set_load(slot.gpu_index, BUSY_UTILIZATION, [hash(action.job_id) % 30000 + 1])
                self.nodes[slot.node].idle_since_s = None
                self._taken.add((slot.node, slot.gpu_index))
                self._jobs_on[slot.node] += 1
            return f"{action.job_id} started on {len(action.slots)} GPU(s)"
        if isinstance(action, PreemptJob):
            return f"{action.job_id} told to checkpoint"  # the fake job checkpoints at once; the kill follows
        if isinstance(action, KillJob):
            if action.job_id not in self.running:
                raise ActionFailed(f"cannot stop {action.job_id}: not running")
            running = self._free(action.job_id, now_s)
            done_s = now_s - running.start_time_s
            self.pending[action.job_id] = PendingJob(replace(running.job, duration_s=max(
                1.0, running.job.duration_s - done_s)))
            return f"{action.job_id} stopped and requeued"
        if isinstance(action, SleepNode):
            node = self.nodes[action.node]
            if node.power != PowerState.AWAKE.value or self._jobs_on[action.node]:
                raise ActionFailed(f"{action.node}: not awake and idle, not suspended")
            node.power, node.since_s = PowerState.SUSPENDING.value, now_s
            return f"{action.node}: suspending"
        if isinstance(action, WakeNode):
            node = self.nodes[action.node]
            if node.power != PowerState.ASLEEP.value:
                raise ActionFailed(f"{action.node}: not asleep ({node.power})")
            node.power, node.since_s = PowerState.WAKING.value, now_s
            return f"{action.node}: waking"
        if isinstance(action, SetPowerLimit):
            done = self._awake_backend(action.node).set_power_limit_w(action.gpu_index, action.limit_w)
            if done is None:
                raise ActionFailed(f"{action.node} GPU {action.gpu_index}: NVML refused the limit")
            return f"{action.node} GPU {action.gpu_index}: {done:g} W"
        if isinstance(action, LockClocks):
            backend = self._awake_backend(action.node)
            if action.min_mhz is None:
                backend.reset_clocks(action.gpu_index)
                return f"{action.node} GPU {action.gpu_index}: clocks unlocked"
            if not backend.lock_clocks_mhz(action.gpu_index, action.min_mhz):
                raise ActionFailed(f"{action.node} GPU {action.gpu_index}: NVML refused the clock lock")
            return f"{action.node} GPU {action.gpu_index}: clocks locked at {action.min_mhz} MHz"
        raise ActionFailed(f"unknown action {action!r}")

    def _awake_backend(self, node: str) -> NvmlBackend:
        if self.nodes[node].power != PowerState.AWAKE.value:
            raise ActionFailed(f"{node}: not awake")
        return self.nvml[node]

    def release_gpus(self, reason: str) -> list[str]:
        lines = []
        for name, backend in self.nvml.items():
            if self.nodes[name].power != PowerState.AWAKE.value:
                continue
            for index in range(backend.gpu_count):
                reading = backend.read(index)
                if reading.limit_w != reading.constraints.default_w:
                    backend.reset_power_limit(index)
                    lines.append(f"{name} GPU {index}: back to {reading.constraints.default_w:g} W ({reason})")
                backend.reset_clocks(index)
        return lines

    def gpu_limit_w(self, node: str, index: int) -> float:
        """The limit a GPU holds now (tests)."""
        return self.nvml[node].read(index).limit_w
