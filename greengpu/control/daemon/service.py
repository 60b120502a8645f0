"""The daemon's control tick on a live cluster: observe, decide with the shared tick, act, account.

Each tick:
1. observe the cluster through its body (a fake cluster, Slurm, Kubernetes); when it cannot be
   observed, fail safe: every GPU back to its default limit, no node put to sleep, an alert;
2. decide with `greengpu.brain.control_tick.control_tick`, the simulator's own decision;
3. drop what this daemon must not do: job actions on a workload manager that schedules its own jobs,
   anything on an exempt node, writes backed off after a refusal, everything while paused (then the
   GPUs are released instead); limits and clocks a GPU already has are not asked for (the tick is given
   the GPUs' settings);
4. carry each action out with a journal entry written before and closed after it, and an audit line
   (steps 3 and 4: greengpu.control.daemon.daemon_actions).
Metering is a job of its own (`meter_energy`, each minute): it reads the GPU energy counters and charges the
energy since its last reading to the tenants whose jobs the last tick saw running, so the control tick
never waits on thousands of counter reads.
A restart first reconciles the journal's open entries against what it observes (`reconcile`).
"""

from __future__ import annotations

import logging
import sqlite3
import time
from collections.abc import Callable
from dataclasses import replace

from greengpu.brain.control_tick import TickResult, control_tick
from greengpu.capping.forecast_caps import ForecastCaps, offered_gpus
from greengpu.control.bodies.body import ClusterBody, Observation
from greengpu.control.daemon import status as daemon_status
from greengpu.control.daemon.agent_reports import AgentReports
from greengpu.control.daemon.audit import Alerts, AuditLog
from greengpu.control.daemon.daemon_actions import DaemonActions
from greengpu.control.daemon.daemon_meter import DaemonMeter
from greengpu.control.daemon.metrics import DaemonMetrics, TickReport, freeze_long_lived_heap
from greengpu.control.daemon.observation_checks import check_faults, set_gauges
from greengpu.control.daemon.report_effects import ReportEffects
from greengpu.control.daemon.store import DaemonStore, TickFacts
from greengpu.control.daemon.wakes import WakeWatch
from greengpu.errors import BadInput
from greengpu.forecast.reserve import DemandRiseForecaster, cluster_reserve_forecaster
from greengpu.model import (
    PowerState,
    WakeNode,
)
from greengpu.policy import Policy
from greengpu.sched.memory import SchedulerMemory
from greengpu.sleep.arrivals import RecentArrivals
from greengpu.sleep.sleep_wake import SleepObservation

log = logging.getLogger("greengpu.daemon")

RATE_WINDOW_S = 60.0
__all__ = ["Daemon", "DaemonMetrics", "TickReport", "freeze_long_lived_heap"]


class Daemon:
    """One cluster's control loop, one tick at a time (the scheduler around it calls `tick`)."""

    def __init__(self, body: ClusterBody, policy: Policy, store: DaemonStore, audit: AuditLog, alerts: Alerts,
                 *, dry_run: bool = False, clock: Callable[[], float] = time.time,
                 leader: Callable[[float], bool] | None = None, meter: DaemonMeter | None = None) -> None:
        """`leader(now_s)`: whether this replica may act now (a Kubernetes Lease; None: it always may)."""
        self.body = body
        self.meter = meter
        """Metering into the ledger (None: metrics only)."""
        self.leader = leader
        self.leading = leader is None
        self.policy = policy
        self.memory = SchedulerMemory()
        """The scheduling core's memory between ticks (greengpu.sched.memory): it lives as long as the daemon."""
        self.store = store
        self.audit = audit
        self.alerts = alerts
        self.dry_run = dry_run
        self.clock = clock
        self.metrics = DaemonMetrics()
        self.last_good_tick_s: float | None = None
        self.last_result: TickResult | None = None
        self.last_observation: Observation | None = None
        self._energy_then: dict[str, float] = {}
        self.rise_forecast: DemandRiseForecaster | None = None
        """With `sleep.use_forecast` or `warm_reserve_from_forecast`: the rise of demand (from the first tick)."""
        self.caps = ForecastCaps(policy)  # with `capping.forecast_slack` (greengpu.capping.forecast_caps)
        self.arrivals = RecentArrivals()
        """The jobs seen arriving over the last day (greengpu.sleep.arrivals: the warm reserve follows them)."""
        self.wakes = WakeWatch(policy.sleep)
        """Wake-ups in flight: retried with the simulator's backoff, alerted once given up on (`_check_wakes`)."""
        self.actions = DaemonActions(self)
        """The tick's actions filtered, journaled, carried out and audited (greengpu.control.daemon.daemon_actions)."""
        self._faulted: set[str] = set()
        """Nodes reported failed and alerted already (`check_faults`)."""
        self.energy_by_tenant_j: dict[str, float] = {}
        self.facts: TickFacts | None = None
        """What the last tick read of the store (what /v1/status says when the store is locked)."""
        self.reports = ReportEffects(AgentReports(policy.sleep.idle_util_threshold))  # POST /v1/report

    # --- start-up ------------------------------------------------------------------------------

    def reconcile(self) -> list[str]:
        """Settle the journal entries a dead daemon left open, against the cluster as it is now.

        An open limit or clock write is undone: every GPU goes back to its default before the first
        tick decides afresh. An open sleep, wake or job action is closed with what is observed now;
        a node found asleep stays asleep only if the first tick's sleep lever agrees it may (else the
        tick wakes it when work needs it, as for any sleeping node).
        """
        entries = self.store.open_entries()
        if not entries:
            return []
        now_s = self.clock()
        lines: list[str] = []
        if any(e.kind in ("set_power_limit", "lock_clocks") for e in entries):
            lines.extend(self.body.release_gpus("reconciling a write the last daemon left open"))
        try:
            seen = self.body.observe(now_s, 0, 0)
            states = {name: state.power.value for name, state in seen.snapshot.node_states.items()}
        except Exception as error:  # noqa: BLE001 - any failure to observe: reconcile what can be
            states = {}
            lines.append(f"cannot observe the cluster while reconciling: {error}")
        for entry in entries:
            found = states.get(entry.node, PowerState.AWAKE.value) if entry.node else "n/a"
            outcome = f"left open by the last daemon; {entry.node or entry.job} now {found}"
            self.store.close(entry.id, now_s, "reconciled", outcome)
            self.audit.write({"time_s": now_s, "kind": entry.kind, "node": entry.node, "gpu": entry.gpu,
                              "job": entry.job, "outcome": "reconciled", "detail": outcome})
            lines.append(f"{entry.kind} #{entry.id}: {outcome}")
        for line in lines:
            log.warning("%s", line)
        return lines

    # --- one tick ------------------------------------------------------------------------------

    def tick(self) -> TickReport:
        """One tick; whatever fails in it (the store locked by another process, a body that raises) is a
        failed tick: counted, alerted, and failed safe (GPUs back to their defaults)."""
        now_s = self.clock()
        try:
            return self._tick(now_s)
        except Exception as error:  # noqa: BLE001 - unsure what was done: fail safe, and say why
            kind = "store_failed" if isinstance(error, sqlite3.Error) else "tick_failed"
            where = f"the state {self.store.path}" if kind == "store_failed" else "the tick"
            return self._failed(now_s, f"{where} failed: {type(error).__name__}: {error}", kind)

    def _tick(self, now_s: float) -> TickReport:
        started = time.perf_counter()
        facts = self.store.tick_facts(now_s - RATE_WINDOW_S)
        self.facts = facts
        paused = facts.paused
        self.metrics.paused.set(1.0 if paused else 0.0)
        try:
            seen = self.body.observe(now_s, facts.sleeps_since, facts.wakes_since)
        except Exception as error:  # noqa: BLE001 - any failure to observe means: unsure, fail safe
            return self._failed(now_s, f"cannot observe the {self.body.name} cluster: {error}")
        seen = self.reports.merge(seen, now_s)
        self.last_observation = seen
        if self.leader is not None:
            try:
                self.leading = self.leader(now_s)
            except Exception as error:  # noqa: BLE001 - unsure who leads: act as a standby, never as a second leader
                self.leading = False
                log.warning("cannot tell whether this replica leads (%s): standing by", error)
        if self.leading:  # a standby does not alert (the leader does)
            self._check_wakes(seen, now_s)
            check_faults(self, seen, now_s)
        # Decided on every replica (the agents may ask any for what waits), carried out by the leader only.
        # The demand both forecasts observe (running + pending GPUs): summed once a tick, and only if one asks.
        sleep_policy = self.policy.sleep
        wanted = self.caps.active or (sleep_policy.enabled and sleep_policy.forecasts_demand)
        offered = offered_gpus(seen.snapshot) if wanted else 0.0
        result = control_tick(seen.snapshot, self.policy, seen.gpus, self._with_forecast(seen, now_s, offered),
                              seen.gpu_settings, seen.capacity_facts,
                              self.caps.refused_in(seen.snapshot, seen.gpus, self.arrivals.gpus(now_s), offered),
                              self.memory)
        self.last_result = result
        self.metrics.waiting.set(len(result.scheduled.waiting.job_ids))
        if not self.leading:
            report = TickReport(True, [], "standby: another replica holds the lease")
        elif paused:
            released = self.body.release_gpus("paused")
            report = TickReport(True, [("release", line, "done") for line in released], "paused")
            self.body.settle()
        else:
            report = TickReport(True)
            report.actions.extend(self.actions.carry_out(self.actions.wanted(result, seen, facts.exempt), seen, now_s))
            if self.body.schedules_jobs and result.scheduled.cycle.withdrawn and not self.dry_run:
                self.body.withdraw_preemptions(list(result.scheduled.cycle.withdrawn))
            self.body.settle()
        if self.leading:
            self.reports.after_tick(self, seen, now_s, act=not paused and not self.dry_run)
        set_gauges(self.metrics, seen)
        self.last_good_tick_s = self.clock()
        self.metrics.ticks.labels("ok").inc()
        self.metrics.last_good.set(self.last_good_tick_s)
        self.metrics.tick_seconds.observe(time.perf_counter() - started)
        return report

    def meter_energy(self) -> None:
        """Charge the GPU energy since the last reading to the tenants whose jobs ran (the metering job).

        The jobs are those the last good tick observed; the energy is read now. A standby replica
        does not meter (the leader does); a counter that cannot be read is modelled instead."""
        seen = self.last_observation
        if seen is None or not self.leading:
            return
        now_s = self.clock()
        try:
            energy_j = self.body.gpu_energy_j()
        except Exception as error:  # noqa: BLE001 - unreadable counters: the ledger models those nodes
            log.warning("cannot read the GPU energy counters (%s): modelled this minute", error)
            energy_j = {}
        metered = replace(seen, snapshot=replace(seen.snapshot, time_s=now_s), gpu_energy_j=energy_j)
        self._meter(metered)
        self._ledger(metered, now_s)

    def _with_forecast(self, seen: Observation, now_s: float, offered: float) -> SleepObservation:
        """The sleep observation with the last day's arrivals and the demand forecast's reserve (the warm reserve's).
        `offered`: the demand the snapshot shows (running + pending GPUs)."""
        snapshot = seen.snapshot
        self.arrivals.note_snapshot(now_s, snapshot)
        sleep = replace(seen.sleep, arrived_gpus=self.arrivals.gpus(now_s))
        sleep_policy = self.policy.sleep
        if not (sleep_policy.enabled and sleep_policy.forecasts_demand):
            return sleep
        if self.rise_forecast is None:
            self.rise_forecast = cluster_reserve_forecaster(sleep_policy.warm_reserve_from_forecast, snapshot.cluster)
        self.rise_forecast.observe(now_s, offered)
        return replace(sleep, forecast_headroom_gpus=self.rise_forecast.reserve_gpus(
            now_s, offered, sleep_policy.warm_reserve_from_forecast))

    def _ledger(self, seen: Observation, now_s: float) -> None:
        if self.meter is None:
            return
        reports, then_s = self.reports.reports, self.meter.last_s  # the agents' counters: measured energy
        try:
            self.meter.record(seen, reports.energy_between(then_s, now_s) if then_s is not None else {},
                              reports.checkpoint_durations(now_s))
        except (sqlite3.Error, OSError, BadInput) as error:  # a full disk must not stop the levers
            self.metrics.alerts.labels("ledger_failed").inc()
            self.alerts.raise_alert("ledger_failed", f"cannot write the ledger {self.meter.path}: {error}", now_s)

    def _check_wakes(self, seen: Observation, now_s: float) -> None:
        """A wake-up not up within `wake_timeout_s` is sent again after the simulator's backoff
        (greengpu.sleep.wake_verify); after `1 + wake_retries` attempts one `wake_failed` alert names the node."""
        for event in self.wakes.check(seen.snapshot.node_states, now_s):
            if event.kind == "send":
                self.actions.carry_out([WakeNode(event.node, event.message)], seen, now_s)
            elif event.kind == "failed":
                self.metrics.alerts.labels("wake_failed").inc()
                self.alerts.raise_alert("wake_failed", event.message, now_s, node=event.node)

    def _failed(self, now_s: float, message: str, kind: str = "observe_failed") -> TickReport:
        """A failed tick: counted, GPUs released first (fail safe), then the alert (a webhook that is slow or
        wrong must never hold the release)."""
        self.metrics.ticks.labels("failed").inc()
        self.metrics.alerts.labels(kind).inc()
        self.release_gpus("the cluster cannot be observed" if kind == "observe_failed" else f"fail safe: {kind}")
        self.alerts.raise_alert(kind, message, now_s)
        return TickReport(False, [], message)

    def stalled(self, message: str, *, alert: bool) -> TickReport:
        """A tick that hangs past its deadline (greengpu.control.daemon.tick_deadline): a failed tick, GPUs released,
        and one `tick_stalled` alert per stall (`alert`), not one per turn of the loop while it hangs."""
        now_s = self.clock()
        self.metrics.ticks.labels("failed").inc()
        self.release_gpus("fail safe: the tick stalled")
        if alert:
            self.metrics.alerts.labels("tick_stalled").inc()
            self.alerts.raise_alert("tick_stalled", message, now_s)
        else:
            log.error("tick failed: %s", message)
        return TickReport(False, [], message)

    def release_gpus(self, why: str) -> list[str]:
        """Every GPU back to its default limit (fail safe); best effort, never raises."""
        try:
            released = self.body.release_gpus(why)
        except Exception as error:  # noqa: BLE001 - fail safe is best effort; the agents fall back too
            # An error, not a note: GPUs may still be capped while nobody watches (shown under -q too).
            log.error("releasing the GPUs failed too: %s", error)
            return []
        for line in released:
            log.warning("%s", line)
        return released

    # --- accounting and gauges -----------------------------------------------------------------

    def _meter(self, seen: Observation) -> None:
        """Charge each node's GPU energy since the last tick to the tenants running there, by GPUs held."""
        share: dict[str, dict[str, float]] = {}
        for running in seen.snapshot.running:
            for name, units in running.units_by_node.items():
                node_share = share.setdefault(name, {})
                node_share[running.job.tenant] = node_share.get(running.job.tenant, 0.0) + float(units)
        for node, energy_j in seen.gpu_energy_j.items():
            before = self._energy_then.get(node)
            self._energy_then[node] = energy_j
            if before is None or energy_j < before:
                continue  # first sight, or a counter reset by a reboot
            delta = energy_j - before
            holders = share.get(node) or {"idle": 1.0}
            total = sum(holders.values())
            for tenant, held in holders.items():
                joules = delta * held / total
                self.energy_by_tenant_j[tenant] = self.energy_by_tenant_j.get(tenant, 0.0) + joules
                self.metrics.energy.labels(tenant).inc(joules)

    def waiting_signal(self) -> dict[str, object]:
        """What `GET /v1/waiting` answers (greengpu.control.daemon.status)."""
        return daemon_status.waiting_signal(self)

    def status(self) -> dict[str, object]:
        """What /v1/status answers (greengpu.control.daemon.status)."""
        return daemon_status.status(self)
