"""The daemon's checks of each tick's observation (nodes the workload manager failed) and its node and job
gauges (split from greengpu.control.daemon.service, whose state they read)."""

from __future__ import annotations

from typing import Protocol

from greengpu.control.bodies.body import ClusterBody, Observation
from greengpu.control.daemon.audit import Alerts
from greengpu.control.daemon.metrics import DaemonMetrics
from greengpu.model import PowerState
from greengpu.policy import Policy


class Checked(Protocol):
    """What the checks read and keep of the daemon (greengpu.control.daemon.service.Daemon)."""

    body: ClusterBody
    policy: Policy
    metrics: DaemonMetrics
    alerts: Alerts
    _faulted: set[str]


def check_faults(daemon: Checked, seen: Observation, now_s: float) -> None:
    """One `node_failed` alert per node the workload manager reports failed, with its reason; again only after
    the node came back."""
    for node in list(daemon._faulted):
        if node not in seen.node_faults:
            daemon._faulted.discard(node)
    for node, reason in sorted(seen.node_faults.items()):
        if node not in daemon._faulted:
            daemon._faulted.add(node)
            daemon.metrics.alerts.labels("node_failed").inc()
            daemon.alerts.raise_alert("node_failed", f"{node}: failed in {daemon.body.name} ({reason}); not slept, "
                                    "not counted as capacity until it is back", now_s, node=node, reason=reason)


def set_gauges(metrics: DaemonMetrics, seen: Observation) -> None:
    """The node and job gauges of one observation."""
    counts = dict.fromkeys((s.value for s in PowerState), 0)
    for node in seen.snapshot.cluster.nodes:
        state = seen.snapshot.node_states.get(node.name)
        counts[(state.power if state is not None else PowerState.AWAKE).value] += 1
    for name, count in counts.items():
        metrics.nodes.labels(name).set(count)
    metrics.jobs.labels("running").set(len(seen.snapshot.running))
    metrics.jobs.labels("pending").set(len(seen.snapshot.pending))
