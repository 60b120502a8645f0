"""`greengpu agent`: wiring of backend, class source, journal, exporter and the signal-safe loop.

Kept out of `cli.py` so the command line stays a thin layer of flags over this.

Start-up order: the metrics address is bound before any GPU is touched (a port in use is one line
and exit 1, nothing changed); systemd hears READY=1 after the first tick and WATCHDOG=1 from every
turn of the loop (Type=notify, WatchdogSec: a hung NVML call gets the agent restarted, and the
restart restores the GPUs from the journal). A tick that fails (class source or NVML unreachable)
is counted and logged in one line; once the last good tick is older than the staleness bound the
GPUs go back to their default limits until ticks work again: when unsure, nothing stays capped.
"""

from __future__ import annotations

import logging
import signal
import socket
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

from greengpu.backends.fake_nvml import FakeNvml, make_gpus
from greengpu.backends.kubernetes import KubeError
from greengpu.backends.nvml import GpuLost, NvmlBackend, NvmlUnavailable
from greengpu.backends.slurm import SlurmError
from greengpu.capping.gpu_power import host_share_w
from greengpu.control.agent.exporter import (
    LoopHealth,
    PostHandler,
    agent_metrics_server,
    parse_listen,
    sd_notify,
    watchdog_interval_s,
)
from greengpu.control.agent.health_watch import HealthWatch
from greengpu.control.agent.jobclass import (
    ClassSource,
    DaemonWaiting,
    KubernetesPods,
    LocalMap,
    SlurmJobs,
    load_class_file,
)
from greengpu.control.agent.journal import Journal
from greengpu.control.agent.node_agent import Agent
from greengpu.control.agent.report_send import ReportSender, build_report
from greengpu.control.daemon.audit import check_webhook_url
from greengpu.control.hooks.node_local_suspend import read_suspend_token
from greengpu.errors import BadInput
from greengpu.model import Cluster
from greengpu.policy import Policy

log = logging.getLogger("greengpu.agent")

FAKE_BUSY_UTILIZATION = 0.9
FAKE_PID_BASE = 40000


@dataclass(frozen=True)
class AgentOptions:
    policy: Policy
    backend: str
    fake_gpus: str
    fake_state: str | None
    fake_busy: tuple[int, ...]
    fake_not_root: bool
    classes_file: str | None
    class_source: str
    node: str | None
    kube_host: str | None
    journal: str
    listen: str
    interval_s: float
    once: bool
    dry_run: bool
    nonbinding_after_s: float
    stale_after_s: float | None = None
    pod_resources_socket: str = "/var/lib/kubelet/pod-resources/kubelet.sock"
    waiting_from: str | None = None
    """The daemon's URL: "work waits" comes from its `/v1/waiting` instead of the class source's own view."""
    cluster: Cluster | None = None
    """The inventory (`--cluster`): this node's host power counts in the efficiency pick, as in a replay."""
    suspend_token_file: str | None = None
    """Serve POST /v1/suspend (the daemon's node-local suspend, greengpu.control.hooks.node_local_suspend) with
    this token."""
    host_suspend_command: str | None = None
    """What suspends the host (default: logind's Suspend over the host's system D-Bus)."""
    report_to: str | None = None
    """The daemon's URL: a report of this node after each good tick (greengpu.control.agent.report_send)."""
    report_token_file: str | None = None
    """A last good tick older than this makes /healthz fail and the GPUs go back to default limits
    (None: 3 intervals, at least 30 s)."""


def parse_gpu_indexes(text: str) -> tuple[int, ...]:
    """`--fake-busy 0,1` -> (0, 1)."""
    indexes = []
    for part in filter(None, (p.strip() for p in text.split(","))):
        if not part.isdigit():
            raise BadInput(f"--fake-busy {text!r}: expected GPU indexes such as 0,1")
        indexes.append(int(part))
    return tuple(indexes)


def fake_backend(spec: str, busy: Sequence[int], not_root: bool = False, state: Path | None = None) -> NvmlBackend:
    """An NVML backend over fake GPUs (`--fake-gpus`), with work on the `busy` ones unless `state` already exists."""
    try:
        gpus = make_gpus(spec)
    except ValueError as error:
        raise BadInput(f"--fake-gpus {error}") from None
    fake = FakeNvml(gpus, root=not not_root, state_path=state)
    if state is None or not state.exists():
        for index in busy:
            if not 0 <= index < len(gpus):
                raise BadInput(f"--fake-busy {index}: no such GPU (--fake-gpus gives {len(gpus)})")
            fake.set_load(index, FAKE_BUSY_UTILIZATION, [FAKE_PID_BASE + index])
        fake.save()
    return NvmlBackend(lib=fake)


def build_backend(options: AgentOptions) -> NvmlBackend:
    if options.backend == "real":
        return NvmlBackend()
    return fake_backend(options.fake_gpus, options.fake_busy, options.fake_not_root,
                        Path(options.fake_state) if options.fake_state else None)


def build_class_source(options: AgentOptions) -> ClassSource:
    source = _job_source(options)
    if options.waiting_from is not None:
        return DaemonWaiting(source, options.waiting_from, stale_after_s=stale_after_s(options) * 6)
    return source


def _job_source(options: AgentOptions) -> ClassSource:
    by_gpu: dict[int, str] = {}
    by_partition: dict[str, str] = {}
    default_class = "training"
    if options.classes_file:
        by_gpu, by_partition, default_class = load_class_file(options.classes_file)
    node = node_name(options)
    if options.class_source == "slurm":
        return SlurmJobs(node, by_partition, default_class)
    if options.class_source == "kubernetes":
        from greengpu.backends.kubernetes import KubeApi, make_api_client

        api = KubeApi(make_api_client(host=options.kube_host))
        pods_by_gpu_uuid = None
        if Path(options.pod_resources_socket).exists():
            from greengpu.backends.kubernetes import PodResources

            pods_by_gpu_uuid = PodResources(options.pod_resources_socket).pods_by_device
            log.info("GPU -> pod from the kubelet's PodResources API (%s)", options.pod_resources_socket)
        else:
            log.info("no kubelet PodResources socket at %s: GPU -> pod from the processes' cgroups "
                     "(needs hostPID)", options.pod_resources_socket)
        # Only this node's pods (fieldSelector spec.nodeName), never the cluster's: a node agent has no business
        # reading every pending pod's spec (env values included), once a tick from every GPU node. What waits
        # comes from the daemon (--waiting-from, as the shipped DaemonSet sets); without it caps stay as decided.
        if options.policy.capping.relaxes_when_queued and options.waiting_from is None:
            log.warning("capping.relax_when_queued needs --waiting-from (the daemon's URL) on Kubernetes: the agent "
                        "does not list the cluster's pending pods; caps are not relaxed for queued work")
        return KubernetesPods(node, api.pods_on_node, default_class, pods_by_gpu_uuid=pods_by_gpu_uuid)
    return LocalMap(by_gpu, default_class)


def suspend_endpoints(options: AgentOptions, backend: NvmlBackend) -> dict[str, PostHandler]:
    """POST /v1/suspend when a token file is given: the daemon's way to suspend this node (docs/SLEEP.md)."""
    if options.suspend_token_file is None:
        return {}
    from greengpu.control.hooks.node_local_suspend import HOST_SUSPEND_COMMAND, SUSPEND_PATH, SuspendEndpoint

    threshold = options.policy.sleep.idle_util_threshold

    def busy() -> list[str]:
        readings = [backend.read(i) for i in range(backend.gpu_count)]
        return ([f"GPU {r.index} (pid {', '.join(map(str, r.pids))})" for r in readings if r.pids]
                + [f"GPU {r.index} ({r.utilization:.0%} busy)" for r in readings
                   if not r.pids and r.utilization >= threshold])

    endpoint = SuspendEndpoint(node_name(options), options.suspend_token_file, busy,
                               options.host_suspend_command or HOST_SUSPEND_COMMAND)
    return {SUSPEND_PATH: endpoint.handle}


def node_name(options: AgentOptions) -> str:
    return options.node or socket.gethostname().split(".")[0]


def node_host_share_w(options: AgentOptions) -> float:
    """One GPU's share of this node's idle host power, from the inventory; 0 without one."""
    if options.cluster is None:
        return 0.0
    name = node_name(options)
    node = next((n for n in options.cluster.nodes if n.name == name), None)
    if node is None:
        raise BadInput(f"--node {name}: not in the inventory given with --cluster")
    return host_share_w(options.cluster.node_types[node.type_name])


TICK_FAILURES: tuple[type[BaseException], ...] = (GpuLost, KubeError, SlurmError, OSError,
                                                 subprocess.SubprocessError, sqlite3.Error, RuntimeError, ValueError)
"""What one tick may fail with and the loop survives (the class source's errors derive from these)."""


def stale_after_s(options: AgentOptions) -> float:
    return options.stale_after_s if options.stale_after_s is not None else max(30.0, 3 * options.interval_s)


def run_agent(options: AgentOptions) -> int:
    """Run the agent until SIGTERM/SIGINT (or one tick with `once`); returns the exit code."""
    # Checked before any GPU is touched: a typo here used to make every turn "the daemon is unreachable", so every
    # cap lifted (fail safe, but silently and for good).
    check_webhook_url(options.waiting_from, "--waiting-from", example="http://greengpu-daemon:9475")
    sender = report_sender(options)
    try:
        host, port = parse_listen(options.listen)
    except ValueError as error:
        raise BadInput(f"--listen {error}") from None
    try:
        classes = build_class_source(options)
    except (KubeError, OSError) as error:
        log.error("cannot use the %s class source: %s", options.class_source, error)
        return 1
    backend = build_backend(options)
    agent = Agent(backend, options.policy.capping, classes, Journal(options.journal), dry_run=options.dry_run,
                  nonbinding_after_s=options.nonbinding_after_s, node=node_name(options),
                  host_share_w=node_host_share_w(options))
    health = LoopHealth(stale_after_s=stale_after_s(options))
    # GPU health: observe only, sampled after each good tick; never stops the loop.
    watch = HealthWatch(backend, node_name(options),
                        jobs=lambda: {i: c.job for i, c in agent.gpus.items()})
    try:
        server = agent_metrics_server(agent, host, port, health, watch,  # bound before any GPU is touched
                                      post=suspend_endpoints(options, backend))
    except OSError as error:
        log.error("cannot serve metrics on %s: %s", options.listen, error.strerror or error)
        return 1
    try:
        agent.start()
    except (NvmlUnavailable, RuntimeError) as error:
        # Closed, not stopped: stop() waits for a serve loop that never started (the agent hung here, its
        # pod Running on a node without the driver).
        log.error("%s", error)
        server.close()
        return 1
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        log.info("%s received: restoring the GPUs and stopping", signal.Signals(signum).name)
        stop.set()

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
    watchdog_s = watchdog_interval_s()
    try:
        server.start()
        bound_host, bound_port = server.address
        log.info("serving metrics on http://%s:%d/metrics (policy %s, %d GPUs%s)",
                 bound_host if ":" not in bound_host else f"[{bound_host}]", bound_port, options.policy.name,
                 backend.gpu_count, ", dry run" if options.dry_run else "")
        sys.stderr.flush()
        ready_sent = False
        released = False
        while True:
            try:
                agent.tick()
                health.tick_ok()
                released = False
                watch.tick()  # GPU health (docs/HEALTH.md)
                if sender is not None:
                    sender.send(build_report(agent.node, time.time(), agent.last_readings,
                                             {i: c.job for i, c in agent.gpus.items()}, watch.assessments))
            except TICK_FAILURES as error:
                health.tick_failed(str(error))
                log.error("tick failed: %s", error)
                if not released and health.problem() is not None:
                    log.error("no good tick for %g s: GPUs back to their default limits until ticks work",
                              health.stale_after_s)
                    try:
                        for line in agent.release("no good control tick: fail safe"):
                            log.info(line)
                        released = True
                    except TICK_FAILURES as release_error:  # a GPU gone too: try again next turn
                        log.error("could not put the GPUs back yet: %s", release_error)
            if not ready_sent:
                ready_sent = sd_notify(f"READY=1\nSTATUS=capping {backend.gpu_count} GPUs")
            sd_notify("WATCHDOG=1")
            if options.once or _wait(stop, options.interval_s, watchdog_s):
                break
    finally:
        sd_notify("STOPPING=1")
        for line in agent.stop():
            log.info(line)
        server.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return 0


def report_sender(options: AgentOptions) -> ReportSender | None:
    """The report channel to the daemon (`--report-to`), checked before any GPU is touched."""
    if options.report_to is None:
        return None
    check_webhook_url(options.report_to, "--report-to", example="http://greengpu-daemon:9475")
    try:
        token = read_suspend_token(options.report_token_file)
    except ValueError as error:
        raise BadInput(f"--report-token-file: {error}") from None
    return ReportSender(options.report_to, token)


def _wait(stop: threading.Event, interval_s: float, watchdog_s: float | None) -> bool:
    """Wait one interval (pinging the watchdog meanwhile when the interval is longer than its period);
    True when asked to stop."""
    deadline = time.monotonic() + interval_s
    while True:
        left_s = deadline - time.monotonic()
        if left_s <= 0:
            return False
        if stop.wait(min(left_s, watchdog_s) if watchdog_s else left_s):
            return True
        if watchdog_s:
            sd_notify("WATCHDOG=1")

