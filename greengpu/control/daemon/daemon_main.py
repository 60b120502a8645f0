"""`greengpu daemon` wiring: state lock, body, reconcile, HTTP, and the loop on APScheduler 3.

Start-up order: the state directory's lock first (a second daemon on the same state is one line and
exit 1, nothing touched), the HTTP address next (in use: one line, exit 1), then the journal is
reconciled, then the loop starts. systemd hears READY=1 after the first good tick and WATCHDOG=1
after every tick while the last good tick is recent (Type=notify, WatchdogSec): a daemon whose every
tick fails or hangs stops feeding it and is restarted. The control tick runs on a `BlockingScheduler`
job, coalesced with at most one instance: a slow tick delays the next one, never overlaps it, and a
tick past its deadline (`--tick-deadline-s`) is a failed one (greengpu.control.daemon.tick_deadline).
"""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING

from greengpu.accounting.ledger_url import Ledger
from greengpu.config.inventory import load_cluster
from greengpu.control.agent.exporter import parse_listen, sd_notify
from greengpu.control.bodies.body import ClusterBody
from greengpu.control.daemon.audit import Alerts, AuditLog, check_webhook_url
from greengpu.control.daemon.daemon_meter import DaemonMeter
from greengpu.control.daemon.http_api import DaemonServer
from greengpu.control.daemon.service import Daemon, TickReport, freeze_long_lived_heap
from greengpu.control.daemon.state_checks import read_token
from greengpu.control.daemon.store import DaemonLocked, DaemonStore
from greengpu.control.daemon.tick_deadline import DeadlineTicks, default_deadline_s
from greengpu.errors import BadInput
from greengpu.model import Job
from greengpu.policy import Policy

if TYPE_CHECKING:
    from greengpu.backends.kube_lease import LeaseElection

METER_INTERVAL_S = 60.0
"""The metering job's period: GPU energy counters read and charged to tenants once a minute."""
STOP_WAIT_S = 30.0
"""At SIGTERM, how long a tick in flight may finish before the GPUs are released (the unit's TimeoutStopSec
is 60 s)."""


def meter_interval_s() -> float:
    """The metering period: METER_INTERVAL_S, or GREENGPU_METER_INTERVAL_S (0.2 to 3600) where a test needs many
    periods in a few seconds (the fleet ledger's kill test)."""
    text = os.environ.get("GREENGPU_METER_INTERVAL_S")
    if text is None:
        return METER_INTERVAL_S
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 0.2 <= value <= 3600.0:
        raise BadInput(f"GREENGPU_METER_INTERVAL_S: {text[:40]!r} is not a number of seconds from 0.2 to 3600")
    return value


log = logging.getLogger("greengpu.daemon")


TraceJobs = Callable[[str, str], Sequence[Job]]
"""A trace file's jobs by submit time, from its path and format."""
MonthlyReports = Callable[[Ledger, int | None, Path, datetime], list[Path]]
"""Last month's report from a ledger and run, in every format, written into a folder at a time: the paths."""


@dataclass(frozen=True)
class DaemonOptions:
    cluster_file: str
    policy: Policy
    source: str
    backend: str
    once: bool
    dry_run: bool
    listen: str
    state_dir: str
    interval_s: float
    token_file: str | None
    webhook_url: str | None
    trace_file: str | None
    trace_format: str
    seed: int
    kube_host: str | None = None
    suspend_command: str | None = None
    lease_namespace: str | None = None
    lease_name: str = "greengpu-daemon"
    ledger_file: str | None = None
    """Where metering goes (default: ledger.db in the state directory)."""
    agent_token_file: str | None = None
    """Kubernetes without --suspend-command: the token of the agents' POST /v1/suspend (node-local suspend)."""
    agent_port: int = 9474
    tick_deadline_s: float | None = None
    """A tick that has not returned after this long is a failed one (None: `default_deadline_s`)."""
    cloud_partition: str | None = None
    """Slurm with cloud pools: the cloud nodes' partition, added to a steered job's
    (greengpu.control.cloud.spot_steer)."""
    trace_jobs: TraceJobs | None = None
    """With --trace: reads the trace's jobs (the command passes the simulator's reader; None: --trace refused)."""
    write_reports: MonthlyReports | None = None
    """Writes last month's reports on the first of each month (the command passes greengpu.report's; None: none)."""


def stale_after_s(interval_s: float) -> float:
    """A last good tick older than this fails /healthz: three intervals, at least 30 s."""
    return max(30.0, 3 * interval_s)


def build_body(options: DaemonOptions, state_dir: Path) -> ClusterBody:
    cluster = load_cluster(options.cluster_file)
    if options.backend == "fake" or options.source == "fake":
        from greengpu.control.fakes.fake_cluster import FakeCluster, first_start_s, generated_jobs

        now_s = first_start_s(state_dir, time.time())  # a restart keeps the stream's clock
        if options.trace_file is not None:
            if options.trace_jobs is None:
                raise BadInput(f"{options.trace_file}: --trace needs a trace reader, and this command has none")
            trace_jobs = options.trace_jobs(options.trace_file, options.trace_format)
            # The trace replays from the cluster's first start on, its gaps kept.
            shift = now_s - trace_jobs[0].submit_time_s if trace_jobs else 0.0
            jobs = [replace(job, submit_time_s=job.submit_time_s + shift) for job in trace_jobs]
        else:
            jobs = generated_jobs(cluster, now_s, seed=options.seed)
        return FakeCluster(cluster, jobs, state_dir, start_s=now_s)
    if options.source == "slurm":
        from greengpu.control.bodies.slurm_body import SlurmBody
        from greengpu.control.cloud.spot_steer import SlurmCapacity

        steer = (SlurmCapacity(options.policy.spot.checkpoint_cost_s, options.cloud_partition, dry_run=options.dry_run)
                 if cluster.pools else None)
        return SlurmBody(cluster, capacity=steer)
    from greengpu.backends.kubernetes import KubeApi, make_api_client
    from greengpu.backends.wol import Waker
    from greengpu.control.bodies.kube_body import KubeBody
    from greengpu.control.hooks.kube_sleep import KubeSleep
    from greengpu.control.hooks.sleep_control import SleepControl, SuspendResult, run_suspend
    from greengpu.control.hooks.state_store import StateStore

    control = SleepControl(StateStore(state_dir / "sleep.db"), Waker(cluster), options.policy.sleep)
    api = KubeApi(make_api_client(host=options.kube_host))
    suspend: Callable[[str], SuspendResult]
    if options.suspend_command is not None:
        template = options.suspend_command
        suspend = lambda node: run_suspend(template, node)  # noqa: E731
    else:  # node-local: the node's agent suspends its own host (docs/SLEEP.md)
        from greengpu.control.hooks.node_local_suspend import AgentSuspender

        suspend = AgentSuspender(api.node_internal_ip, options.agent_token_file, options.agent_port)
    return KubeBody(KubeSleep(api, control, cluster, options.policy, suspend))


def lease_election(options: DaemonOptions, body: ClusterBody) -> LeaseElection | None:
    """On Kubernetes, the Lease that elects the one replica that acts (identity: the pod's name), and the
    fence every action of the body checks (leadership kept through a whole drain, SIGTERM obeyed at once)."""
    if options.source != "kubernetes" or options.backend != "real":
        return None
    from greengpu.backends.kube_lease import LeaseElection
    from greengpu.control.bodies.kube_body import KubeBody
    from greengpu.control.bodies.kube_fence import KubeFence

    assert isinstance(body, KubeBody)
    namespace = options.lease_namespace or os.environ.get("POD_NAMESPACE") or "default"
    identity = os.environ.get("POD_NAME") or socket.gethostname()
    election = LeaseElection(body.sleeper.api, namespace, options.lease_name, identity)
    fence = KubeFence(election)
    body.sleeper.guard = fence.check
    _STOPPING.append(fence.stopping)
    return election


_STOPPING: list[threading.Event] = []
"""Set on SIGTERM/SIGINT: actions in flight (a drain) abort at their next check."""


def open_meter(options: DaemonOptions, body: ClusterBody, store: DaemonStore) -> DaemonMeter:
    """The ledger run this daemon meters into: the one it opened before a restart, or a new one."""
    from greengpu.accounting.ledger_url import PostgresLedger, cluster_name, parse_ledger

    ledger = parse_ledger(options.ledger_file) if options.ledger_file else Path(options.state_dir) / "ledger.db"
    key = f"ledger_run:{ledger if isinstance(ledger, PostgresLedger) else ledger.resolve()}"
    known = store.setting(key)
    meter = DaemonMeter.open(body.cluster, ledger, int(known) if known else None, options.policy.name,
                             f"{options.source}:{options.cluster_file}",
                             cluster_name=cluster_name(options.cluster_file))
    store.set_setting(key, str(meter.run_id))
    from greengpu.control.daemon.meter_facts import facts_of

    meter.facts = facts_of(body, options.cluster_file)
    return meter


def check_source(options: DaemonOptions) -> None:
    """Refuse, before anything is touched, options that do not go together."""
    check_webhook_url(options.webhook_url, "--webhook")
    if options.backend == "real" and options.source == "fake":
        raise BadInput("--source fake runs a simulated cluster: use it with --backend fake (--backend real needs "
                       "--source slurm or kubernetes)")
    if (options.lease_namespace is not None or options.lease_name != "greengpu-daemon") \
            and options.source != "kubernetes":
        raise BadInput("--lease-namespace and --lease-name elect a replica on Kubernetes: use them with "
                       "--source kubernetes")


def run_daemon(options: DaemonOptions) -> int:
    """Run until SIGTERM/SIGINT (or one tick with `once`); returns the exit code."""
    check_source(options)
    meter_interval_s()  # a bad GREENGPU_METER_INTERVAL_S is refused before anything starts
    try:
        host, port = parse_listen(options.listen)
    except ValueError as error:
        raise BadInput(f"--listen {error}") from None
    token = None
    if options.token_file is not None:
        try:
            token = read_token(options.token_file)
        except (OSError, ValueError) as error:
            raise BadInput(f"--token-file {error}") from None
    agent_token = None  # the node agents' reports may come with their own token (POST /v1/report)
    if options.agent_token_file is not None:
        from greengpu.control.hooks.node_local_suspend import read_suspend_token

        try:
            agent_token = read_suspend_token(options.agent_token_file)
        except ValueError as error:
            raise BadInput(f"--agent-token-file: {error}") from None
    state_dir = Path(options.state_dir)
    store = DaemonStore(state_dir)
    try:
        store.acquire()
    except DaemonLocked as error:
        log.error("%s", error)
        return 1
    try:
        store.bind_cluster(options.cluster_file)
        body = build_body(options, state_dir)
    except BaseException:
        store.release()
        raise
    audit = AuditLog(state_dir / "audit.jsonl")
    election = lease_election(options, body)
    alerts = Alerts(audit, options.webhook_url, background=not options.once)
    daemon = Daemon(body, options.policy, store, audit, alerts, dry_run=options.dry_run,
                    leader=election.lead if election is not None else None,
                    meter=None if options.dry_run else open_meter(options, body, store))

    def health() -> str | None:
        last = daemon.last_good_tick_s
        if last is None:
            return "no good tick yet"
        age_s = time.time() - last
        return None if age_s <= stale_after_s(options.interval_s) else f"last good tick {age_s:.0f} s ago"

    try:
        server = DaemonServer(daemon, host, port, health, token, report_token=agent_token).start()
    except OSError as error:
        log.error("cannot listen on %s: %s", options.listen, error)
        store.release()
        return 1
    log.info("serving /metrics, /healthz and /v1/status on http://%s:%d", *server.address)
    ticks = DeadlineTicks(daemon, options.tick_deadline_s or default_deadline_s(options.interval_s, options.source))
    try:
        for line in daemon.reconcile():
            log.warning("reconciled: %s", line)
        freeze_long_lived_heap()
        if options.once:
            report = ticks.tick()
            daemon.meter_energy()  # the first reading of the counters (charged from the next run on)
            print(json.dumps({"ok": report.ok, "message": report.message,
                              "actions": [{"kind": k, "target": t, "outcome": o} for k, t, o in report.actions]}))
            return 0 if report.ok else 1
        return _loop(daemon, ticks, options.interval_s, health, state_dir / "reports", options.write_reports)
    finally:
        server.stop()
        if not ticks.settle(STOP_WAIT_S):  # a drain in flight aborts at its next poll (_STOPPING)
            log.error("a tick still runs %g s after the stop: releasing the GPUs beside it", STOP_WAIT_S)
        # Only after the tick in flight: a standby replica must never act beside it.
        if election is not None and election.release(time.time()):
            log.info("Lease %s released: a standby replica takes over at its next tick", options.lease_name)
        if not options.dry_run and body.name == "fake":
            body.release_gpus("daemon stopping")  # the fake cluster's agents would do this on their own
        store.release()


def monthly_reports(daemon: Daemon, folder: Path, write: MonthlyReports, now: datetime | None = None) -> list[Path]:
    """Last month's report from the metered ledger, in every format, into `folder` (the first of each month)."""
    if daemon.meter is None or not daemon.leading:
        return []
    try:
        folder.mkdir(parents=True, exist_ok=True)
        written = write(daemon.meter.path, daemon.meter.run_id, folder, now or datetime.now(UTC))
    except Exception as error:  # noqa: BLE001 - a report that fails must not stop the control loop
        daemon.alerts.raise_alert("report_failed", f"monthly report not written: {error}", time.time())
        return []
    for path in written:
        log.info("monthly report written: %s", path)
    return written


def loop_turn(ticks: DeadlineTicks, health: Callable[[], str | None], ready: dict[str, bool]) -> TickReport:
    """One turn of the loop: a tick (with its deadline), then systemd's READY=1 (after the first good tick)
    and WATCHDOG=1, fed only while the last good tick is recent: one failed tick is no reason to restart,
    a daemon whose every tick fails or hangs is."""
    report = ticks.tick()
    if report.ok and not ready.get("sent"):
        ready["sent"] = sd_notify("READY=1") or True
    problem = health()
    if problem is None:
        sd_notify("WATCHDOG=1")
    else:
        log.error("not feeding the systemd watchdog: %s", problem)
    for kind, target, outcome in report.actions:
        log.info("%s %s: %s", kind, target, outcome)
    return report


def _loop(daemon: Daemon, ticks: DeadlineTicks, interval_s: float, health: Callable[[], str | None],
          reports: Path, write_reports: MonthlyReports | None) -> int:
    from apscheduler.executors.pool import ThreadPoolExecutor
    from apscheduler.schedulers.blocking import BlockingScheduler

    # One worker: the tick, the meter and the monthly report never run at once, so none of them sees the
    # cluster body half-way through another's change (a late job runs next, within its misfire grace).
    scheduler = BlockingScheduler(timezone="UTC", executors={"default": ThreadPoolExecutor(1)})
    ready = {"sent": False}

    def tick() -> None:
        loop_turn(ticks, health, ready)

    started = datetime.now(UTC)
    scheduler.add_job(tick, "interval", seconds=interval_s, coalesce=True, max_instances=1,
                      misfire_grace_time=max(1, int(interval_s)), next_run_time=started, id="control-tick")
    def meter() -> None:
        if not ticks.busy:  # a stalled tick still holds the body: this minute is metered with the next
            daemon.meter_energy()

    metering_s = meter_interval_s()
    scheduler.add_job(meter, "interval", seconds=metering_s, coalesce=True, max_instances=1,
                      misfire_grace_time=max(1, int(metering_s)), next_run_time=started + timedelta(seconds=1),
                      id="meter")
    if write_reports is not None:
        scheduler.add_job(monthly_reports, "cron", args=(daemon, reports, write_reports), day=1, hour=0, minute=10,
                          coalesce=True, max_instances=1, id="monthly-report")

    def stop(signum: int, frame: FrameType | None) -> None:
        log.info("signal %d: stopping", signum)
        for event in _STOPPING:
            event.set()  # a drain in flight uncordons its node and returns at its next poll
        if scheduler.running:  # a second signal (systemd, then a person) is not a traceback
            scheduler.shutdown(wait=False)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    scheduler.start()
    sys.stdout.flush()
    return 0
