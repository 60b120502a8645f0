"""A simulated cluster for `greengpu daemon --backend fake`: the whole loop on a laptop.

Nodes from the inventory with fake GPUs behind the real NVML adapter (pynvml's seam, its errors and
constraints), nodes that take `SUSPEND_S` to sleep and their `boot_s` to wake, and a job stream (a
trace, or a seeded generator) run by a small workload manager that carries out the daemon's placements, each
job at the pace its GPUs' limits and clocks give it, as in a replay (fake_pace.py). Its state lives in
the daemon's state directory: a daemon killed and restarted finds the same cluster.

It plays the node agents too: it rereads a node's GPUs only when something changed them (a job started or
ended, greengpu wrote a limit or a clock, the node woke), so its cached view is exact; the meter reads `gpu_energy_j`.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from greengpu.brain.capacity_choice import ChooseCapacity
from greengpu.brain.control_tick import TickAction
from greengpu.capping.gpu_power import GpuObservation
from greengpu.control.bodies.body import ActionFailed, Observation
from greengpu.control.fakes.fake_cloud import FakeCloud
from greengpu.control.fakes.fake_cluster_state import FakeClusterState, FakeNode
from greengpu.control.fakes.fake_gpus import FakeGpus
from greengpu.control.fakes.fake_jobs import first_start_s, generated_jobs
from greengpu.control.fakes.fake_mig import FakeMig
from greengpu.control.fakes.fake_node_gpus import FakeNodeGpus
from greengpu.control.fakes.fake_pace import FakePaces
from greengpu.energy.job_pace import Pace
from greengpu.model import (
    GPU_UNITS,
    Cluster,
    ClusterSnapshot,
    Job,
    KillJob,
    LockClocks,
    NodeState,
    PartitionGpu,
    PendingJob,
    PlaceJob,
    PowerState,
    PreemptionRecord,
    PreemptJob,
    RunningJob,
    SetPowerLimit,
    SleepNode,
    WakeNode,
)
from greengpu.sched.preemption import last_checkpoint_s
from greengpu.sleep.sleep_wake import SleepObservation
from greengpu.sleep.suspends import NodeView, idle_draw_w

SUSPEND_S = 30.0
__all__ = ["FakeCluster", "FakeNode", "first_start_s", "generated_jobs"]


class FakeCluster(FakePaces, FakeClusterState, FakeGpus):
    """The cluster body of `--backend fake` (a `ClusterBody`)."""

    name = "fake"
    schedules_jobs = True
    nodes: dict[str, FakeNode]

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
        self.origin_s = start_s
        self.paces: dict[str, list[Pace]] = {}
        """Each running job's paces: capped GPUs slow it by the power model, as in a replay
        (control/fakes/fake_pace.py)."""
        self._retuned_gpus: set[tuple[str, int]] = set()
        self._retuned_at_s = start_s
        self._load()
        self.cloud = FakeCloud(cluster, state_dir)
        """The inventory's cloud pools: where the tick's capacity lever sends waiting jobs (`ChooseCapacity`)."""
        self._type_of = {n.name: n.type_name for n in cluster.nodes}
        self._changed = True
        """Whether the cluster's state (jobs, nodes) changed since it was last written down."""
        self._slots_text: dict[str, str] = {}
        """Each running job's GPUs as written down (they do not change while it runs)."""
        self._jobs_on = dict.fromkeys(self.nodes, 0)
        for slot in (s for r in self.running.values() for s in r.slots):
            self._jobs_on[slot.node] += 1
        self._now_s = start_s
        """The fake cluster's time (its latest observation): the fake GPUs' energy counters run on it, so that
        under a test's manual clock they measure the cluster's time, not the wall's (the ledger's `measured`)."""
        self.node_gpus = FakeNodeGpus(cluster, state_dir, lambda: self._now_s, self.running.values())
        """The nodes' fake GPUs: NVML, load and the cached reads (greengpu.control.fakes.fake_node_gpus)."""
        self.nvml, self.fakes = self.node_gpus.nvml, self.node_gpus.fakes
        self.mig = FakeMig(cluster, self.fakes, self.nvml, state_dir)
        """The MIG GPUs, repartitioned and read through the fake NVML (greengpu.control.fakes.fake_mig)."""

    # --- time passes ---------------------------------------------------------------------------

    def _advance(self, now_s: float) -> None:
        self._now_s = max(self._now_s, now_s)
        for node in self.nodes.values():
            # Each change is stamped when it happened, not when a tick looked (as in a replay's event times).
            if node.power == PowerState.SUSPENDING.value and now_s >= node.since_s + SUSPEND_S:
                node.power, node.since_s, node.idle_since_s = PowerState.ASLEEP.value, node.since_s + SUSPEND_S, None
                self._changed = True
            boot_s = self.cluster.node_types[self._type(node.name)].boot_s
            if (node.power == PowerState.WAKING.value and now_s >= node.since_s + boot_s
                    and node.name not in self.never_wake):
                up_s = node.since_s + boot_s
                node.power, node.since_s, node.idle_since_s = PowerState.AWAKE.value, up_s, up_s
                for gpu in self.fakes[node.name].gpus:  # a power cycle puts NVML's limits and clocks back
                    gpu.limit_w, gpu.locked_clock_mhz = gpu.default_limit_w, None
                self.fakes[node.name].save()
                self.node_gpus.stale.add(node.name)
                self._changed = True
        for job_id, running in list(self.running.items()):
            if running.expected_end_s <= now_s:
                self._free(job_id, running.expected_end_s)
                self.finished[job_id] = running.expected_end_s
        for run in self.cloud.advance(now_s):
            self.finished[run.job_id] = run.end_s
            self._changed = True
        while self.next_arrival < len(self.arrivals) and self.arrivals[self.next_arrival].submit_time_s <= now_s:
            job = self.arrivals[self.next_arrival]
            self.pending[job.job_id] = PendingJob(job)
            self.next_arrival += 1
            self._changed = True

    def _type(self, node: str) -> str:
        return self._type_of[node]

    def _free(self, job_id: str, now_s: float) -> RunningJob:
        running = self.running.pop(job_id)
        self._slots_text.pop(job_id, None)
        self.paces.pop(job_id, None)
        self._changed = True
        for slot in running.slots:
            self.node_gpus.unload(slot, self.running.values())
            self._jobs_on[slot.node] -= 1
        for name in {s.node for s in running.slots}:
            if self._jobs_on[name] == 0:
                self.nodes[name].idle_since_s = now_s
        return running

    # --- the body ------------------------------------------------------------------------------

    def observe(self, now_s: float, suspends_last_minute: int, wakes_last_minute: int) -> Observation:
        self._advance(now_s)  # written down when the tick settles: a restart replays the same arrivals and ends
        self._retuned_at_s = now_s
        states = {n.name: NodeState(power=PowerState(n.power), since_s=n.since_s, drained=n.drained)
                  for n in self.nodes.values() if n.power != PowerState.AWAKE.value or n.drained}
        snapshot = ClusterSnapshot(now_s, self.cluster, tuple(self.running.values()), tuple(self.pending.values()),
                                   states, mig_partitions=self.mig.partitions())
        busy_nodes = {n for n, count in self._jobs_on.items() if count}
        on_gpu = ({(s.node, s.gpu_index): r.job for r in self.running.values() for s in r.slots}
                  if self.node_gpus.stale else {})
        gpus: list[GpuObservation] = []
        settings: dict[tuple[str, int], tuple[float, int | None]] = {}
        idle_awake, asleep, ready = [], [], 0
        for node in self.cluster.nodes:
            state, node_type = self.nodes[node.name], self.cluster.node_types[node.type_name]
            power = PowerState(state.power)
            if power is PowerState.ASLEEP:
                asleep.append(NodeView(node.name, node_type.gpus, power, state.since_s, False, None,
                                       idle_draw_w(node_type)))
                continue
            if power is PowerState.AWAKE:
                node_gpus, node_settings = self.node_gpus.view(node.name, node_type, on_gpu)
                gpus.extend(node_gpus)
                settings.update(node_settings)
                if node.name not in busy_nodes:
                    idle_awake.append(NodeView(node.name, node_type.gpus, power, state.since_s, False,
                                               state.idle_since_s, idle_draw_w(node_type)))
            if node.name not in busy_nodes and power in (PowerState.AWAKE, PowerState.WAKING):
                ready += node_type.gpus
        sleep = SleepObservation(now_s=now_s, idle_awake=tuple(idle_awake), asleep=tuple(asleep),
                                 ready_idle_gpus=ready, busy_gpus=sum(r.job.gpus for r in self.running.values()),
                                 suspends_last_minute=suspends_last_minute, wakes_last_minute=wakes_last_minute,
                                 timezone=self.cluster.site.timezone)
        return Observation(snapshot, tuple(gpus), sleep, {}, settings)

    def release_gpus(self, reason: str) -> list[str]:
        """Every GPU back to its default limit and clocks (FakeGpus): the jobs on them run uncapped from now."""
        lines = super().release_gpus(reason)
        self._retuned_gpus.update((s.node, s.gpu_index) for r in self.running.values() for s in r.slots)
        self._repace_retuned()
        return lines

    def reread_gpus(self) -> None:
        """Read every GPU through NVML again at the next observation (an agent restarted; the tests)."""
        self.node_gpus.stale.update(self.nodes)

    def act(self, action: TickAction, now_s: float) -> str:
        try:
            return self._act(action, now_s)
        finally:
            # Node power is saved at once (the crash tests look at it); job starts and stops when the tick
            # settles, as a workload manager that dies loses what it had not written down.
            if isinstance(action, SleepNode | WakeNode):
                self._save()

    def _act(self, action: TickAction, now_s: float) -> str:
        if isinstance(action, PlaceJob):
            waiting = self.pending.get(action.job_id)
            if waiting is None or any(self.node_gpus.taken.get((s.node, s.gpu_index), 0) + s.units > GPU_UNITS
                                      for s in action.slots) or any(
                    self.nodes[s.node].power != PowerState.AWAKE.value or self.nodes[s.node].drained
                    for s in action.slots):
                raise ActionFailed(f"cannot place {action.job_id}: not pending, or its GPUs are taken, asleep or "
                                   "drained")
            problem = self.mig.place_problem(action.slots, now_s)
            if problem is not None:
                raise ActionFailed(f"cannot place {action.job_id}: {problem}")
            del self.pending[action.job_id]
            self._changed = True
            self.running[action.job_id] = RunningJob(waiting.job, action.slots, now_s, now_s + waiting.job.duration_s,
                                                     preemptions=waiting.preemptions)
            self._pace_begin(action.job_id, now_s)  # at the pace its GPUs' settings give it
            for slot in action.slots:
                self.node_gpus.load(slot, waiting.job)
                self.nodes[slot.node].idle_since_s = None
                self._jobs_on[slot.node] += 1
            return f"{action.job_id} started on {len(action.slots)} GPU(s)"
        if isinstance(action, ChooseCapacity):
            return self._to_cloud(action, now_s)
        if isinstance(action, PreemptJob):
            running = self.running.get(action.job_id)
            if running is None:
                raise ActionFailed(f"cannot preempt {action.job_id}: not running")
            # The core stops it when its grace is over (KillJob); it keeps its own checkpoint schedule, as in a
            # replay (the simulator is the reference: test_differential_one_brain).
            self.running[action.job_id] = replace(running, preempt_signalled_s=now_s,
                                                  preempted_for=action.for_job_id)
            self._changed = True
            return f"{action.job_id} told to checkpoint and stop within {action.grace_s:g} s"
        if isinstance(action, KillJob):
            if action.job_id not in self.running:
                raise ActionFailed(f"cannot stop {action.job_id}: not running")
            saved_s = self._work_done_s(self.running[action.job_id], last_checkpoint_s(self.running[action.job_id],
                                                                                      now_s))
            running = self._free(action.job_id, now_s)
            # Requeued with the work its last checkpoint saved taken off, and the preemption on its record,
            # as the simulator's job runner does (sim/jobs.py `kill`).
            by = action.for_job_id or running.preempted_for
            history = running.preemptions + ((PreemptionRecord(now_s, by),) if by else ())
            self.pending[action.job_id] = PendingJob(replace(running.job, duration_s=max(
                1.0, running.job.duration_s - saved_s)), preemptions=history)
            return f"{action.job_id} stopped and requeued"
        if isinstance(action, SleepNode):
            node = self.nodes[action.node]
            if node.power != PowerState.AWAKE.value or self._jobs_on[action.node]:
                raise ActionFailed(f"{action.node}: not awake and idle, not suspended")
            node.power, node.since_s = PowerState.SUSPENDING.value, now_s
            self._changed = True
            return f"{action.node}: suspending"
        if isinstance(action, WakeNode):
            node = self.nodes[action.node]
            if node.power == PowerState.WAKING.value:  # a retry (greengpu.sleep.wake_verify): the boot goes on
                return f"{action.node}: wake-up sent again"
            if node.power != PowerState.ASLEEP.value:
                raise ActionFailed(f"{action.node}: not asleep ({node.power})")
            node.power, node.since_s = PowerState.WAKING.value, now_s
            self._changed = True
            return f"{action.node}: waking"
        if isinstance(action, SetPowerLimit | LockClocks):
            try:
                return self._write(action)
            finally:
                gpu = self.fakes[action.node].gpus[action.gpu_index]
                self.node_gpus.note_setting(action.node, action.gpu_index, gpu.limit_w, gpu.locked_clock_mhz)
                self._retuned(action.node, action.gpu_index, now_s)
        raise ActionFailed(f"unknown action {action!r}")

    def partition_gpu(self, action: PartitionGpu, now_s: float) -> str:
        """Repartition a MIG GPU through the fake NVML (greengpu.control.fakes.fake_mig; the daemon's MIG hook)."""
        return self.mig.partition(action, now_s, self.running.values())

    def ask_checkpoint(self, job_id: str, now_s: float) -> str:
        """Ask a job to checkpoint and stop for no other job (its node is failing): the fake job checkpoints at
        once, and the core stops it when its grace is over (KillJob), which requeues it."""
        running = self.running.get(job_id)
        if running is None:
            raise ActionFailed(f"cannot ask {job_id} to checkpoint: not running")
        self.running[job_id] = replace(running, preempt_signalled_s=now_s, preempted_for=None,
                                       last_checkpoint_s=now_s)
        self._changed = True
        return f"{job_id} told to checkpoint and stop (failing GPU)"

    def drain_node(self, node: str, reason: str) -> str:
        """Drain `node` (greengpu.health.drain): it takes no new work, written down at once."""
        self.nodes[node].drained = True
        self._changed = True
        self._save()
        return f"{node}: drained ({reason})"

    def _to_cloud(self, action: ChooseCapacity, now_s: float) -> str:
        waiting = self.pending.get(action.job_id)
        if waiting is None or action.kind == "wait" or action.pool is None:
            raise ActionFailed(f"cannot send {action.job_id} to the cloud: not pending, or nowhere to go")
        try:
            run = self.cloud.start(waiting.job, action.kind, action.pool, now_s)
        except ValueError as error:
            raise ActionFailed(f"cannot send {action.job_id} to {action.kind}: {error}") from None
        del self.pending[action.job_id]
        self._changed = True
        return f"{action.job_id} sent to {action.kind} pool {action.pool} on {', '.join(run.nodes)}"

    def withdraw_preemptions(self, job_ids: list[str]) -> None:
        """Jobs asked to stop for a job that no longer waits keep running: their signal is cleared."""
        for job_id in job_ids:
            running = self.running.get(job_id)
            if running is not None and running.preempt_signalled_s is not None:
                self.running[job_id] = replace(running, preempt_signalled_s=None, preempted_for=None)
                self._changed = True

    def settle(self) -> None:
        """Write down the job starts and stops of the tick (node power was written at once)."""
        self._repace_retuned()
        self.cloud.save()
        self._save()
