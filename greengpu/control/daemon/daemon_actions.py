"""What the daemon does with the actions its tick decided: drop those it must not carry out (job actions on a
workload manager that schedules its own jobs, anything on an exempt node, writes backed off after a refusal),
then carry each one out with a journal entry written before and closed after it, a metric and an audit line.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from greengpu.brain.capacity_choice import ChooseCapacity
from greengpu.brain.control_tick import TickAction, TickResult
from greengpu.control.bodies.body import ActionFailed, Observation
from greengpu.control.daemon.mig_actions import PartitionRefused, carry_out_partition
from greengpu.json_types import JsonObject
from greengpu.model import (
    KillJob,
    LockClocks,
    PartitionGpu,
    PlaceJob,
    PreemptJob,
    SetPowerLimit,
    SleepNode,
    WakeNode,
)
from greengpu.sched.preemption import last_checkpoint_s

if TYPE_CHECKING:
    from greengpu.control.daemon.service import Daemon

REFUSED_BACKOFF_S = 900.0
"""A sleep, limit or clock write or a MIG repartition that was refused (a PodDisruptionBudget, NVML without root,
a body whose MIG partitions another owns) is not tried again on that node or GPU for this long: one alert, not
one a tick. Wakes and job actions are always
retried (a job must not wait on a backoff)."""
BACKED_OFF = (SleepNode, SetPowerLimit, LockClocks, PartitionGpu)
KIND = {PlaceJob: "place", PreemptJob: "preempt", KillJob: "kill", SleepNode: "sleep", WakeNode: "wake",
        SetPowerLimit: "set_power_limit", LockClocks: "lock_clocks", ChooseCapacity: "choose_capacity",
        PartitionGpu: "partition_gpu"}
JOB_ACTIONS = (PlaceJob, PreemptJob, KillJob)


class DaemonActions:
    """Filters, journals, carries out and audits one daemon's actions, and remembers the refused writes."""

    def __init__(self, daemon: Daemon) -> None:
        self.daemon = daemon
        self._refused_until: dict[tuple[str, str, int | None], float] = {}
        """Per (kind, node, GPU): until when a refused write is not tried again (`REFUSED_BACKOFF_S`)."""

    def wanted(self, result: TickResult, seen: Observation, exempt: set[str]) -> list[TickAction]:
        """The tick's actions this daemon carries out: none of a workload manager's own jobs, a capacity choice
        already steered, nothing on an exempt node but wakes, no write backed off after a refusal."""
        wanted: list[TickAction] = []
        for action in result.actions:
            if isinstance(action, JOB_ACTIONS) and not self.daemon.body.schedules_jobs:
                continue  # the workload manager schedules its own jobs
            if isinstance(action, ChooseCapacity) and seen.capacity_held.get(action.job_id) == action.kind:
                continue  # steered so already
            node = getattr(action, "node", "")
            if node in exempt and not isinstance(action, WakeNode):
                continue
            if isinstance(action, BACKED_OFF) and self._refused_until.get(
                    (KIND[type(action)], node, getattr(action, "gpu_index", None)), 0.0) > seen.snapshot.time_s:
                continue
            wanted.append(action)
        return wanted

    def carry_out(self, actions: list[TickAction], seen: Observation, now_s: float) -> list[tuple[str, str, str]]:
        """Journal every action of the tick (one transaction, before any is carried out), carry them out in
        order, then close the entries (one transaction) and write the audit lines. A daemon that dies in
        between leaves open entries, which the next start reconciles."""
        if not actions:
            return []
        named = {getattr(a, "job_id", "") for a in actions} - {""}
        running = {r.job.job_id: r for r in seen.snapshot.running if r.job.job_id in named}
        pending = {p.job.job_id: p.job for p in seen.snapshot.pending if p.job.job_id in named}
        planned = []
        for action in actions:
            job_id = getattr(action, "job_id", "")
            detail: JsonObject = {"reason": getattr(action, "reason", ""),
                                      **{k: v for k, v in vars(action).items() if k not in ("reason", "slots")}}
            job = running[job_id].job if job_id in running else pending.get(job_id)
            if isinstance(action, PreemptJob | KillJob) and job_id in running:
                detail["last_checkpoint_s"] = last_checkpoint_s(running[job_id], now_s)
            planned.append((KIND[type(action)], detail, getattr(action, "node", ""),
                            getattr(action, "gpu_index", None), job_id, job.tenant if job is not None else ""))
        entries = self.daemon.store.begin_many(now_s, [(k, d, n, g, j) for k, d, n, g, j, _ in planned])
        closed: list[tuple[int, str, str]] = []
        records: list[JsonObject] = []
        done: list[tuple[str, str, str]] = []
        for action, (kind, detail, node, gpu, job_id, tenant), entry in zip(actions, planned, entries, strict=True):
            state, counted, outcome = self._act(action, kind, node, job_id, tenant, now_s)
            closed.append((entry, state, outcome))
            self.daemon.metrics.actions.labels(kind, counted).inc()
            records.append({"time_s": now_s, "kind": kind, "node": node, "gpu": gpu, "job": job_id, "tenant": tenant,
                            "rule": detail["reason"], "outcome": counted, "detail": outcome,
                            **({"last_checkpoint_s": detail["last_checkpoint_s"]}
                               if "last_checkpoint_s" in detail else {})})
            done.append((kind, f"{node} GPU {gpu}" if gpu is not None else node or job_id, counted))
        self.daemon.store.close_many(self.daemon.clock(), closed)
        self.daemon.audit.write_many(records)
        return done

    def _act(self, action: TickAction, kind: str, node: str, job_id: str, tenant: str,
             now_s: float) -> tuple[str, str, str]:
        """(journal state, metric outcome, what happened) of carrying out one action."""
        if self.daemon.dry_run:
            return "done", "dry_run", "dry run: not carried out"
        try:
            outcome = (carry_out_partition(self.daemon.body, action, now_s) if isinstance(action, PartitionGpu)
                       else self.daemon.body.act(action, now_s))
        except ActionFailed as error:
            failed = "refused" if isinstance(error, PartitionRefused) else "failed"  # refused: nothing changed
            if isinstance(action, BACKED_OFF):
                self._refused_until[(kind, node, getattr(action, "gpu_index", None))] = now_s + REFUSED_BACKOFF_S
            alert = "partition_refused" if failed == "refused" else "action_failed"
            self.daemon.metrics.alerts.labels(alert).inc()
            self.daemon.alerts.raise_alert(alert, f"{kind} {node or job_id}: {error}", now_s,
                                    node=node, job=job_id, tenant=tenant)
            return failed, failed, str(error)
        if isinstance(action, WakeNode):
            self.daemon.wakes.sent(action.node, now_s, action.reason)
        if isinstance(action, ChooseCapacity):
            self.daemon.metrics.cloud_placements.labels(action.kind, action.pool or "").inc()
        return "done", "done", outcome
