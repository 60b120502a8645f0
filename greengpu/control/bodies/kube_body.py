"""The daemon's Kubernetes body: the cluster as the API server shows it, sleep as cordon, drain and suspend,
wake as a verified wake-up and uncordon (the same `KubeSleep` the `greengpu kube` commands use).

The kube-scheduler places pods; greengpu reads them: GPU pods running per node (namespace as tenant,
`greengpu.io/class` as class), pending GPU pods as the demand. A pod is pending because the
kube-scheduler found no room on the awake nodes (taints and affinities greengpu does not model
included), so in the core's snapshot only sleeping and waking nodes have room, as for `wake-pending`:
the core then says which work waits (no node sleeps meanwhile) and which sleeping nodes to wake.
"""

from __future__ import annotations

import logging

from greengpu.backends.kube_sharing import read_nodes_sharing
from greengpu.backends.kubernetes import KubeError
from greengpu.backends.sharing_live import live_partitions
from greengpu.brain.capacity_choice import ChooseCapacity
from greengpu.brain.control_tick import TickAction
from greengpu.control.bodies.body import ActionFailed, AgentsOwnTheGpus, Observation
from greengpu.control.bodies.checkpoint_marks import CHECKPOINT_KEY, checkpoint_value
from greengpu.control.bodies.kube_fence import ActionAborted
from greengpu.control.hooks.kube_sleep import KubeSleep, pod_job
from greengpu.model import (
    Cluster,
    ClusterSnapshot,
    GpuSlot,
    MigPartition,
    NodeState,
    PowerState,
    RunningJob,
    SleepNode,
    WakeNode,
)

log = logging.getLogger("greengpu.daemon")


class KubeBody(AgentsOwnTheGpus):
    """The cluster as Kubernetes reports it (a `ClusterBody`)."""

    name = "kubernetes"
    schedules_jobs = False

    def __init__(self, sleeper: KubeSleep) -> None:
        self.sleeper = sleeper
        self.cluster: Cluster = sleeper.cluster
        self.has_mig = any(self.cluster.node_types[n.type_name].mig for n in self.cluster.nodes)
        self._mig_warned: tuple[str, ...] = ()
        self.served: dict[str, str] = {}
        """Pending pods whose capacity decision the spot webhook is served, and which (the same again is no action)."""

    def observe(self, now_s: float, suspends_last_minute: int, wakes_last_minute: int) -> Observation:
        try:
            # Wake verification is part of looking: a woken node now Ready closes its wake-up (in the state
            # store's journal of wake-ups) and is uncordoned, as `greengpu kube verify` does.
            self.sleeper.verify_events()
            base = self.sleeper.pending_cycle_snapshot(now_s)
            # Each node's GPU pods, listed once a tick for the running jobs and the sleep lever alike.
            gpu_pods = {node.name: self.sleeper.gpu_pods(node.name) for node in self.cluster.nodes
                        if base.node_states.get(node.name) is None
                        or base.node_states[node.name].power is not PowerState.ASLEEP}
            running: list[RunningJob] = []
            for node in self.cluster.nodes:
                state = base.node_states.get(node.name)
                if state is not None and state.power is not PowerState.AWAKE:
                    continue  # asleep or waking: nothing runs there
                index = 0
                for pod in gpu_pods[node.name]:
                    if pod.gpu_profile or pod.gpu_problem:
                        continue  # a MIG instance or replica: the API does not say which; the node counts busy
                    # The API does not say which GPU indices a pod holds; the core needs only how many per node.
                    slots = tuple(GpuSlot(node.name, index + i) for i in range(pod.gpus))
                    index += pod.gpus
                    job = pod_job(pod, now_s)
                    running.append(RunningJob(job=job, slots=slots, start_time_s=now_s,
                                              expected_end_s=now_s + job.duration_s, last_checkpoint_s=(
                                                  checkpoint_value(pod.annotations.get(CHECKPOINT_KEY), now_s))))
            sleep = self.sleeper.observe(now_s, gpu_pods)
        except KubeError as error:
            raise RuntimeError(str(error)) from None
        states: dict[str, NodeState] = dict(base.node_states)
        snapshot = ClusterSnapshot(now_s, self.cluster, tuple(running), base.pending, states,
                                   mig_partitions=self._mig_partitions())
        waiting = {p.job.job_id for p in base.pending}
        self.served = {job: kind for job, kind in self.served.items() if job in waiting}
        return Observation(snapshot, (), sleep, {}, {}, capacity_held=dict(self.served))

    def _mig_partitions(self) -> dict[tuple[str, int], MigPartition]:
        """The MIG GPUs' partitions from the GPU Operator's node labels; unavailable where they cannot be read
        or disagree with the inventory (fail safe), with a warning once per change. PartitionGpu is refused
        here (greengpu.control.daemon.mig_actions): the MIG Manager owns the partitions."""
        if not self.has_mig:
            return {}
        try:
            readings = read_nodes_sharing(self.sleeper.api)
        except KubeError as error:
            log.warning("cannot read the nodes' GPU sharing labels: %s", error)
            readings = []
        partitions, warnings = live_partitions(self.cluster, readings)
        if tuple(warnings) != self._mig_warned:
            for line in warnings:
                log.warning("%s", line)
            self._mig_warned = tuple(warnings)
        return partitions

    def drain_node(self, node: str, reason: str) -> str:
        """Cordon `node` for a failing GPU (greengpu.health.drain decided it), without greengpu's sleep mark:
        greengpu never uncordons it; an administrator does once the GPU is repaired."""
        try:
            self.sleeper.api.set_unschedulable(node, True, sleep_reason=None)
        except KubeError as error:
            raise ActionFailed(str(error)) from None
        return f"{node}: cordoned ({reason})"

    def act(self, action: TickAction, now_s: float) -> str:
        if isinstance(action, ChooseCapacity):  # the spot webhook reads it (GET /v1/capacity/NAMESPACE/POD)
            self.served[action.job_id] = action.kind
            return f"{action.job_id}: {action.kind} in {action.pool}, served to the spot webhook"
        try:
            if isinstance(action, SleepNode):
                outcome = self.sleeper.sleep(action.node, f"greengpu: {action.reason}")
                if not outcome.slept:
                    raise ActionFailed(outcome.message)
                return outcome.message
            if isinstance(action, WakeNode):
                self.sleeper.guard()
                events = self.sleeper.control.wake([action.node], action.reason)
                return "; ".join(e.message for e in events) or f"{action.node}: already waking"
        except (KubeError, ActionAborted) as error:
            raise ActionFailed(str(error)) from None
        raise ActionFailed(f"{type(action).__name__} is not carried out on Kubernetes (the node agents cap GPUs)")
