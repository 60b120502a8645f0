"""Node sleep on Kubernetes: cordon and drain before sleep (PodDisruptionBudgets respected), wake for
pending GPU pods (the scheduling core picks the fewest nodes), uncordon after the wake is verified.

- A node with a pod that holds GPUs is never put to sleep.
- Draining is `kubectl drain`'s: DaemonSet and mirror pods stay; a bare pod (no controller would
  recreate it) or a pod with emptyDir data (lost on eviction) stops the sleep before anything is
  touched, unless forced; the others are evicted through the Eviction API, and the node is suspended
  only once every evicted pod has terminated (within `drain_timeout_s`).
- One eviction refused by a PodDisruptionBudget (HTTP 429, after bounded retries) stops the sleep,
  as does a pod still terminating at the timeout or an API failure: the node is uncordoned (it stays
  awake and usable) and nothing is forced.
- Pending pods that request `nvidia.com/gpu` and have no node are the demand. They are handed to the
  same scheduling core as every other body, on a snapshot where only sleeping and waking nodes have
  room (the kube-scheduler already found no room on the awake ones); the core's `WakeNode` actions
  are the nodes to wake: a whole free node for a pod, never two halves.
- Only nodes greengpu cordoned (annotation `greengpu.io/sleep`) are uncordoned after their wake.
- Which idle nodes sleep, and which wake beyond what pending pods need, is the control tick's sleep
  lever (`greengpu.sleep.sleep_wake`), asked with an observation built from the API and the state store
  (`observe`), the same lever the simulator asks: sleep windows, the idle timeout, the warm reserve,
  no sleep while GPU pods wait, and the suspend and wake rate limits hold on a live cluster too.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from greengpu.backends.kube_pod_sharing import holds_gpu
from greengpu.backends.kubernetes import CLASS_ANNOTATION, SLEEP_ANNOTATION, KubeApi, KubeError, PodInfo
from greengpu.brain.control_tick import Scheduled, schedule
from greengpu.control.bodies.kube_fence import ActionAborted
from greengpu.control.hooks.sleep_control import SleepControl, SuspendResult
from greengpu.model import JOB_CLASSES, Cluster, ClusterSnapshot, Job, NodeState, PendingJob, PowerState, WakeNode
from greengpu.policy import Policy
from greengpu.sleep.sleep_wake import RESERVE_REASON, SleepObservation, plan_sleep, plan_wakes
from greengpu.sleep.suspends import NodeView, idle_draw_w
from greengpu.sleep.wake_verify import WakeEvent

log = logging.getLogger("greengpu.kube")

KUBE_SUSPEND_COMMAND = "ssh -o BatchMode=yes -o ConnectTimeout=10 {node} /usr/local/bin/greengpu node-suspend"
"""Suspend to RAM (node-suspend's default): the kubelet reports Ready again after a resume by itself,
unlike Slurm's slurmd, which must register with a new boot time (docs/SLEEP.md)."""
DRAIN_TIMEOUT_S = 300.0
"""How long evicted pods may take to terminate (their grace period) before the sleep is called off."""
TERMINATION_POLL_S = 1.0
RATE_WINDOW_S = 60.0
ENDED = ("Succeeded", "Failed")


@dataclass(frozen=True)
class SleepOutcome:
    node: str
    slept: bool
    message: str


class KubeSleep:
    def __init__(self, api: KubeApi, control: SleepControl, cluster: Cluster, policy: Policy,
                 suspend: Callable[[str], SuspendResult | None], drain_timeout_s: float = DRAIN_TIMEOUT_S,
                 wait: Callable[[float], None] = time.sleep, monotonic: Callable[[], float] = time.monotonic) -> None:
        self.api = api
        self.control = control
        self.cluster = cluster
        self.policy = policy
        self._suspend = suspend
        self.drain_timeout_s = drain_timeout_s
        self._wait = wait
        self._monotonic = monotonic
        self.guard: Callable[[], None] = lambda: None
        """Called before each step that writes (cordon, each drain poll, suspend); raises `ActionAborted` to stop
        (the daemon's `KubeFence`: leadership lost, or SIGTERM)."""

    def sleep(self, node: str, reason: str, force: bool = False) -> SleepOutcome:
        """Cordon, drain (`force`: bare and emptyDir pods too) and suspend `node`, or say why not."""
        cordoned: list[str] = []
        try:
            return self._sleep(node, reason, force, cordoned)
        except ActionAborted as abort:
            if not abort.undo:
                return SleepOutcome(node, False, f"{node}: not put to sleep: {abort}; stopped at once, left as it is")
            if cordoned:  # only what this action cordoned: never a node an administrator cordoned
                self._uncordon_after_failure(node)
                return SleepOutcome(node, False, f"{node}: not put to sleep: {abort}; uncordoned, left awake")
            return SleepOutcome(node, False, f"{node}: not put to sleep: {abort}")

    def _sleep(self, node: str, reason: str, force: bool, cordoned: list[str]) -> SleepOutcome:
        self.guard()
        pods = [p for p in self.api.pods_on_node(node) if p.phase not in ENDED]
        holding = [p for p in pods if holds_gpu(p)]
        if holding:
            return SleepOutcome(node, False, f"{node}: not put to sleep: GPU pods run there "
                                             f"({', '.join(_names(holding))})")
        movable = [p for p in pods if not p.daemonset and not p.mirror]
        refusal = _unforced_refusal(movable) if not force else None
        if refusal:
            return SleepOutcome(node, False, f"{node}: not put to sleep: {refusal} (--force evicts them)")
        self.api.set_unschedulable(node, True, sleep_reason=reason)
        cordoned.append(node)
        try:
            problem, evicted = self._drain(movable)
            self.guard()  # the last moment to stop: after this the node sleeps
        except KubeError:
            self._uncordon_after_failure(node)
            raise
        if problem:
            self.api.set_unschedulable(node, False, sleep_reason=None)
            return SleepOutcome(node, False, f"{node}: not put to sleep: {problem}; uncordoned")
        self.control.suspended([node], reason)
        result = self._suspend(node)  # None: a caller's own suspend that raises when it fails
        if result is not None and not result.ok:
            # The node is awake: recorded so (never asleep), alerted with the command's own words, usable again.
            message = self.control.suspend_failed(result)
            self._uncordon_after_failure(node)
            return SleepOutcome(node, False, f"{message}; uncordoned")
        done = f" after evicting {', '.join(evicted)}" if evicted else ""
        return SleepOutcome(node, True, f"{node}: cordoned, drained and suspended{done}")

    def _drain(self, movable: list[PodInfo]) -> tuple[str | None, tuple[str, ...]]:
        """Evict, then wait until the evicted pods are gone. Returns (why the drain failed, evicted)."""
        self.guard()
        result = self.api.evict(movable)
        if result.blocked:
            return f"a PodDisruptionBudget blocks evicting {', '.join(result.blocked)}", result.evicted
        waiting = [p for p in movable if f"{p.namespace}/{p.name}" in result.evicted]
        deadline = self._monotonic() + self.drain_timeout_s
        while True:
            waiting = [p for p in waiting if not self.api.pod_gone(p)]
            if not waiting:
                return None, result.evicted
            if self._monotonic() >= deadline:
                return (f"{', '.join(_names(waiting))} still terminating {self.drain_timeout_s:g} s after "
                        "eviction", result.evicted)
            self._wait(TERMINATION_POLL_S)
            self.guard()  # renews the Lease while pods take their time; stops the drain on SIGTERM

    def _uncordon_after_failure(self, node: str) -> None:
        try:
            self.api.set_unschedulable(node, False, sleep_reason=None)
        except KubeError as error:
            log.error("%s: left cordoned: uncordon failed too: %s", node, error)

    def gpu_pods(self, node: str) -> list[PodInfo]:
        """The pods holding GPUs on `node` now (not yet ended)."""
        return [p for p in self.api.pods_on_node(node) if holds_gpu(p) and p.phase not in ENDED]

    def observe(self, now_s: float, gpu_pods: Mapping[str, list[PodInfo]] | None = None) -> SleepObservation:
        """The sleep lever's view of the cluster, built from the API and the state store (as the
        simulator builds its own from simulated nodes): idle awake nodes with the time they were first
        seen idle, asleep nodes, ready free GPUs, GPUs in use and the rate limits' last minute.

        Only Ready nodes greengpu has not put to sleep count as awake; a node the API does not report
        Ready is neither slept nor counted (when unsure, nothing changes). `gpu_pods`: the GPU pods per
        node when the caller has just listed them (`gpu_pods`), so that one tick lists each node once.
        """
        store = self.control.store
        records = {r.node: r for r in store.records()}
        waking = {t.node for t in store.open_tracks()}
        ready = self.api.ready_nodes()
        asleep: list[NodeView] = []
        awake_idle: dict[str, tuple[int, float]] = {}
        idle_w = {node.name: idle_draw_w(self.cluster.node_types[node.type_name]) for node in self.cluster.nodes}
        ready_idle_gpus = 0
        busy_gpus = 0.0
        for node in self.cluster.nodes:
            gpus = self.cluster.node_types[node.type_name].gpus
            record = records.get(node.name)
            if record is not None and record.state == "asleep":
                asleep.append(NodeView(node.name, gpus, PowerState.ASLEEP, record.since_s, False, None,
                                       idle_w[node.name]))
                continue
            listed = gpu_pods.get(node.name) if gpu_pods is not None else None
            holding = listed if listed is not None else self.gpu_pods(node.name)
            busy_gpus += sum(p.gpus for p in holding)
            if holding:
                continue
            if node.name in waking:
                ready_idle_gpus += gpus
            elif node.name in ready:
                # Awake since its verified wake, or long before greengpu first saw it.
                since = record.since_s if record is not None and record.state == "up" else 0.0
                awake_idle[node.name] = (gpus, since)
        idle_since = store.note_idle(awake_idle, now_s)
        idle_awake = tuple(NodeView(name, gpus, PowerState.AWAKE, since, False, idle_since[name], idle_w[name])
                           for name, (gpus, since) in awake_idle.items())
        ready_idle_gpus += sum(gpus for gpus, _ in awake_idle.values())
        return SleepObservation(now_s=now_s, idle_awake=idle_awake, asleep=tuple(asleep),
                                ready_idle_gpus=ready_idle_gpus, busy_gpus=busy_gpus,
                                suspends_last_minute=store.count_events("suspend", now_s - RATE_WINDOW_S),
                                wakes_last_minute=store.count_events("send", now_s - RATE_WINDOW_S),
                                timezone=self.cluster.site.timezone)

    def pending_cycle(self, now_s: float) -> Scheduled:
        """The core's cycle over the pending GPU pods, on a snapshot where only sleeping and waking nodes
        have room (the kube-scheduler already found none on the awake ones)."""
        return schedule(self.pending_cycle_snapshot(now_s), self.policy)

    def pending_cycle_snapshot(self, now_s: float) -> ClusterSnapshot:
        """The pending GPU pods as jobs, awake nodes drained (no room there), sleeping and waking ones as such."""
        pods = self.api.pending_gpu_pods()
        asleep = {r.node for r in self.control.store.records() if r.state == "asleep"}
        waking = {t.node for t in self.control.store.open_tracks()}
        states = {}
        for node in self.cluster.nodes:
            if node.name in waking:
                states[node.name] = NodeState(power=PowerState.WAKING)
            elif node.name in asleep:
                states[node.name] = NodeState(power=PowerState.ASLEEP)
            else:
                states[node.name] = NodeState(drained=True)  # awake: the kube-scheduler found no room there
        return ClusterSnapshot(time_s=now_s, cluster=self.cluster, running=(),
                               pending=tuple(PendingJob(pod_job(p, now_s)) for p in pods), node_states=states)

    def sleep_idle(self, now_s: float) -> list[SleepOutcome]:
        """Put to sleep the idle nodes the tick's sleep lever chooses now (none while GPU pods wait)."""
        if not self.policy.sleep.enabled:
            return []
        waiting = self.pending_cycle(now_s).waiting
        chosen = plan_sleep(self.observe(now_s), self.policy.sleep, waiting)
        return [self.sleep(action.node, action.reason) for action in chosen]

    def wake_for_pending(self, now_s: float) -> list[str]:
        """Wake the nodes the core needs for pending GPU pods, then any the warm reserve lacks, within the
        wake rate limit (the tick's `plan_wakes`); returns the nodes sent a wake-up."""
        scheduled = self.pending_cycle(now_s)
        asked = [a for a in scheduled.cycle.actions if isinstance(a, WakeNode)]
        wakes = plan_wakes(self.observe(now_s), self.policy.sleep, asked)
        for action in wakes:
            why = action.reason if action.reason == RESERVE_REASON else f"pending pod needs GPUs: {action.reason}"
            self.control.wake([action.node], why)
        return [a.node for a in wakes]

    def verify(self) -> list[str]:
        """One verification pass, as lines for people (`verify_events`)."""
        return [e.message for e in self.verify_events()]

    def verify_events(self) -> list[WakeEvent]:
        """Close wake-ups of nodes that report Ready, retry late ones, then uncordon what greengpu cordoned
        (an `uncordoned` event each)."""
        ready = self.api.ready_nodes()
        events = list(self.control.verify(ready))
        for event in list(events):
            if event.kind == "up" and self.api.node_annotations(event.node).get(SLEEP_ANNOTATION):
                self.api.set_unschedulable(event.node, False, sleep_reason=None)
                events.append(WakeEvent(event.node, "uncordoned", f"{event.node}: uncordoned"))
        return events


def _names(pods: list[PodInfo]) -> list[str]:
    return [f"{p.namespace}/{p.name}" for p in pods]


def _unforced_refusal(movable: list[PodInfo]) -> str | None:
    """What `kubectl drain` refuses without --force / --delete-emptydir-data, or None."""
    reasons = []
    bare = [p for p in movable if not p.controller]
    if bare:
        reasons.append(f"bare pods that nothing would recreate ({', '.join(_names(bare))})")
    local = [p for p in movable if p.empty_dir]
    if local:
        reasons.append(f"pods whose emptyDir data eviction would delete ({', '.join(_names(local))})")
    return "; ".join(reasons) or None


def pod_job(pod: PodInfo, now_s: float) -> Job:
    """A GPU pod as the core's job: namespace as tenant, `greengpu.io/class` as class, one node's GPUs."""
    wanted = pod.annotations.get(CLASS_ANNOTATION, "training")
    gpus = 1 if pod.gpu_profile else pod.gpus  # a MIG instance or replica: one device (its share is the core's)
    return Job(job_id=f"{pod.namespace}/{pod.name}", tenant=pod.namespace, gpus=gpus, duration_s=3600.0,
               submit_time_s=now_s, job_class=wanted if wanted in JOB_CLASSES else "training",
               gpus_per_node=gpus, gpu_profile=pod.gpu_profile)
