"""What the agents' reports change in the daemon's tick (greengpu.control.daemon.agent_reports holds them).

Before the tick decides (`merge`): warning and failing GPUs go into the snapshot's node states (the core
keeps inference off warning GPUs and new work off failing nodes), drained nodes stay drained, the last
checkpoints the agents saw go to the running jobs, and the measured use of each node goes to the sleep
lever (greengpu.sleep.suspends.idle_by_use). After it (`after_tick`, the leader only): the failing nodes'
alerts, the drains the tick decided (greengpu.health.drain via greengpu.brain.control_tick), the stalled-job alerts
(greengpu.health.stalled) and the queue, failure and checkpoint metrics.
"""

from __future__ import annotations

import logging
from collections import deque
from dataclasses import replace
from typing import Protocol

from greengpu.brain.control_tick import TickResult
from greengpu.control.bodies.body import ClusterBody, Observation
from greengpu.control.daemon.agent_reports import AgentReports
from greengpu.control.daemon.audit import Alerts, AuditLog
from greengpu.control.daemon.metrics import DaemonMetrics
from greengpu.health.cluster import node_states_with_health
from greengpu.health.drain import failing_node_lines
from greengpu.health.stalled import StallChange, StallWatch, stall_line
from greengpu.model import NodeState, PowerState


class Daemon(Protocol):
    """What the reports' effects use of the daemon (greengpu.control.daemon.service.Daemon)."""

    body: ClusterBody
    metrics: DaemonMetrics
    alerts: Alerts
    audit: AuditLog
    last_result: TickResult | None


log = logging.getLogger("greengpu.daemon")

WINDOW_JOBS = 500
"""The sliding window of the queue-wait and failure figures: the last this many jobs started (or ended)."""


def quantile(values: list[float], q: float) -> float:
    """The `q` quantile of `values` (linear between order statistics, as numpy's default)."""
    ordered = sorted(values)
    at = q * (len(ordered) - 1)
    low = int(at)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (at - low)


class ReportEffects:
    """The daemon's use of the agents' reports, tick by tick."""

    def __init__(self, reports: AgentReports) -> None:
        self.reports = reports
        self.drained: set[str] = set()
        """Nodes this daemon drained for a failing GPU and still drained (the gauge)."""
        self.kept_drained: set[str] = set()
        """Nodes drained in the daemon's books only (a body without a drain of its own): kept drained in what
        the core sees. A body that drains (Slurm, Kubernetes, the fake cluster) shows its drain itself, and
        an administrator who returns the node is obeyed."""
        self.stalls = StallWatch()
        self.stalled: set[str] = set()
        self._alerted_failing: set[str] = set()
        self._seen_running: dict[str, tuple[str, ...]] = {}
        self._waits_s: deque[float] = deque(maxlen=WINDOW_JOBS)
        self._ended: deque[bool] = deque(maxlen=WINDOW_JOBS)
        self._checkpoints: dict[str, float] = {}

    def merge(self, seen: Observation, now_s: float) -> Observation:
        """The observation with what the fresh reports say (unchanged where no agent reports)."""
        health = self.reports.gpu_health(now_s)
        snapshot = seen.snapshot
        states = snapshot.node_states
        if health:
            states = node_states_with_health(states, health)
        if self.kept_drained:
            states = dict(states)
            for node in self.kept_drained:
                states[node] = replace(states.get(node, NodeState()), drained=True)
        checkpoints = self.reports.last_checkpoints(now_s)
        running = snapshot.running
        if checkpoints and any(r.job.job_id in checkpoints for r in running):
            running = tuple(replace(r, last_checkpoint_s=max(r.last_checkpoint_s or 0.0, checkpoints[r.job.job_id]))
                            if r.job.job_id in checkpoints else r for r in running)
        if states is not snapshot.node_states or running is not snapshot.running:
            snapshot = replace(snapshot, node_states=states, running=running)
        use = self.reports.node_use(now_s)
        sleep = replace(seen.sleep, use=use) if use else seen.sleep
        return replace(seen, snapshot=snapshot, sleep=sleep)

    def after_tick(self, daemon: Daemon, seen: Observation, now_s: float, act: bool) -> None:
        """Alerts, drains (when `act`: the leader, not paused, not a dry run) and metrics of one tick."""
        snapshot = seen.snapshot
        checkpoints = self.reports.last_checkpoints(now_s)
        lines = failing_node_lines(snapshot, checkpoints)
        for node in sorted(set(lines) - self._alerted_failing):
            daemon.metrics.alerts.labels("gpu_failing").inc()
            daemon.alerts.raise_alert("gpu_failing", lines[node], now_s, node=node)
        self._alerted_failing = set(lines)
        self.drained = {n for n in self.drained if n in snapshot.node_states and snapshot.node_states[n].drained}
        decided = daemon.last_result
        if act and decided is not None:  # the tick's health lever decided these (greengpu.brain.control_tick)
            self._checkpoints_asked(daemon, decided.checkpoints, now_s)
            for drain in decided.drains:
                self._drain(daemon, drain.node, drain.reason, now_s)
        daemon.metrics.drained.set(len(self.drained))
        self._stalls(daemon, seen, now_s, checkpoints)
        self._figures(daemon, seen, now_s, checkpoints)

    def _checkpoints_asked(self, daemon: Daemon, job_ids: tuple[str, ...], now_s: float) -> None:
        """Ask the jobs to checkpoint and stop, where the body carries out job actions (the fake cluster); a
        workload manager that schedules its own jobs lets them finish."""
        ask = getattr(daemon.body, "ask_checkpoint", None)
        if ask is None or not job_ids:
            return
        for job_id in job_ids:
            try:
                outcome = ask(job_id, now_s)
            except Exception as error:  # noqa: BLE001 - the job then finishes where it is; the node drains after
                daemon.metrics.actions.labels("checkpoint", "failed").inc()
                daemon.audit.write({"time_s": now_s, "kind": "checkpoint", "job": job_id, "outcome": "failed",
                                    "detail": str(error)})
                continue
            daemon.metrics.actions.labels("checkpoint", "done").inc()
            daemon.audit.write({"time_s": now_s, "kind": "checkpoint", "job": job_id, "rule": "failing GPU",
                                "outcome": "done", "detail": outcome})

    def _drain(self, daemon: Daemon, node: str, reason: str, now_s: float) -> None:
        drain = getattr(daemon.body, "drain_node", None)
        try:
            outcome = drain(node, reason) if drain is not None else f"{node}: drained in the daemon's books"
        except Exception as error:  # noqa: BLE001 - a refused drain is alerted; the node takes no work anyway
            daemon.metrics.actions.labels("drain", "failed").inc()
            daemon.alerts.raise_alert("action_failed", f"drain {node}: {error}", now_s, node=node)
            return
        if drain is None:
            self.kept_drained.add(node)
        self.drained.add(node)
        daemon.metrics.actions.labels("drain", "done").inc()
        daemon.metrics.drained.set(len(self.drained))
        daemon.audit.write({"time_s": now_s, "kind": "drain", "node": node, "rule": reason, "outcome": "done",
                            "detail": outcome})
        daemon.alerts.raise_alert("node_drained", f"{node}: drained ({reason}); return it to service once "
                                  "the GPU is repaired", now_s, node=node)

    def _stalls(self, daemon: Daemon, seen: Observation, now_s: float, checkpoints: dict[str, float]) -> None:
        fresh = self.reports.fresh(now_s)
        util: dict[str, list[float]] = {}
        where: dict[str, str] = {}
        for node, received in fresh.items():
            for gpu in received.report.gpus:
                for job_id in gpu.jobs:
                    util.setdefault(job_id, []).append(gpu.utilization)
                    where.setdefault(job_id, node)
        running = {r.job.job_id: r for r in seen.snapshot.running}
        for job_id, values in sorted(util.items()):
            found = running.get(job_id)
            if found is None or found.job.job_class != "training":
                continue
            event = self.stalls.observe(job_id, now_s, sum(values) / len(values))
            if event is None:
                continue
            last = checkpoints.get(job_id, found.last_checkpoint_s)
            line = stall_line(event, found.job.tenant, where[job_id], last)
            if event.change is StallChange.STALLED:
                self.stalled.add(job_id)
                daemon.metrics.alerts.labels("job_stalled").inc()
                daemon.alerts.raise_alert("job_stalled", line, now_s, job=job_id, tenant=found.job.tenant,
                                          node=where[job_id], utilization=round(event.utilization, 4),
                                          baseline=round(event.baseline, 4), last_checkpoint_s=last)
            else:
                self.stalled.discard(job_id)
                daemon.alerts.raise_alert("job_recovered", line, now_s, job=job_id, tenant=found.job.tenant,
                                          node=where[job_id])
        self.stalls.forget_except(set(running))
        self.stalled &= set(running)
        daemon.metrics.stalled.set(len(self.stalled))

    def _figures(self, daemon: Daemon, seen: Observation, now_s: float, checkpoints: dict[str, float]) -> None:
        """Queue wait of the jobs seen starting, failures among those seen ending, checkpoint durations."""
        snapshot = seen.snapshot
        running = {r.job.job_id: r for r in snapshot.running}
        for job_id, r in running.items():
            if job_id not in self._seen_running:
                self._waits_s.append(max(0.0, r.start_time_s - r.job.submit_time_s))
        failed_nodes = {n for n, s in snapshot.node_states.items() if s.power is PowerState.FAILED}
        failed_nodes |= set(seen.node_faults)
        for job_id, nodes in self._seen_running.items():
            if job_id not in running:
                self._ended.append(any(n in failed_nodes for n in nodes))
        self._seen_running = {job_id: r.nodes for job_id, r in running.items()}
        if self._waits_s:
            waits = list(self._waits_s)
            daemon.metrics.queue_wait.labels("0.5").set(quantile(waits, 0.5))
            daemon.metrics.queue_wait.labels("0.95").set(quantile(waits, 0.95))
        if self._ended:
            daemon.metrics.job_failure.set(sum(self._ended) / len(self._ended))
        for received in self.reports.fresh(now_s).values():
            for job_id, job in received.report.jobs.items():
                if (job.last_checkpoint_s is not None and job.checkpoint_duration_s is not None
                        and self._checkpoints.get(job_id) != job.last_checkpoint_s):
                    self._checkpoints[job_id] = job.last_checkpoint_s
                    daemon.metrics.checkpoint_seconds.observe(job.checkpoint_duration_s)
        for job_id in set(self._checkpoints) - set(running):
            del self._checkpoints[job_id]
        for node, age_s in self.reports.ages_s(now_s).items():
            daemon.metrics.report_age.labels(node).set(age_s)
