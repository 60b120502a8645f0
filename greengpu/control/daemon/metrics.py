"""The daemon's Prometheus metrics, the report of one tick, and the heap freeze after start-up (split from
greengpu.control.daemon.service, which re-exports them)."""

from __future__ import annotations

import gc
from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram


@dataclass
class TickReport:
    ok: bool
    actions: list[tuple[str, str, str]] = field(default_factory=list)
    """(kind, target, outcome) of every action carried out or logged."""
    message: str = ""


class DaemonMetrics:
    """The daemon's Prometheus metrics (docs/DAEMON.md), in a registry of their own."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.ticks = Counter("greengpu_daemon_ticks", "Control ticks by outcome.", ["outcome"], registry=r)
        self.tick_seconds = Histogram("greengpu_daemon_tick_seconds", "Time one control tick took.", registry=r,
                                      buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30))
        self.last_good = Gauge("greengpu_daemon_last_good_tick_timestamp_seconds",
                               "When the last good tick ended (Unix time).", registry=r)
        self.actions = Counter("greengpu_daemon_actions", "Actions by kind and outcome.", ["kind", "outcome"],
                               registry=r)
        self.nodes = Gauge("greengpu_daemon_nodes", "Nodes by power state.", ["state"], registry=r)
        self.jobs = Gauge("greengpu_daemon_jobs", "Jobs by state.", ["state"], registry=r)
        self.waiting = Gauge("greengpu_daemon_jobs_waiting_for_capacity",
                             "Jobs the last tick found waiting for capacity or for nodes to wake.", registry=r)
        self.paused = Gauge("greengpu_daemon_paused", "1 while the daemon is paused.", registry=r)
        self.alerts = Counter("greengpu_daemon_alerts", "Alerts raised, by kind.", ["kind"], registry=r)
        self.cloud_placements = Counter("greengpu_daemon_cloud_placements", "Waiting jobs the capacity lever "
                                        "sent to cloud capacity, by kind (spot, on-demand) and pool.",
                                        ["capacity", "pool"], registry=r)
        self.energy = Counter("greengpu_daemon_energy_joules", "Measured GPU energy attributed to each tenant "
                              "(idle GPUs to 'idle').", ["tenant"], registry=r)
        self.queue_wait = Gauge("greengpu_daemon_queue_wait_seconds", "Queue wait of the jobs started in the "
                                "sliding window (submit to start), by quantile.", ["quantile"], registry=r)
        self.job_failure = Gauge("greengpu_daemon_job_failure_ratio", "Share of the jobs that ended in the sliding "
                                 "window while a node of theirs was reported failed.", registry=r)
        self.checkpoint_seconds = Histogram("greengpu_daemon_checkpoint_duration_seconds", "How long the "
                                            "checkpoints the agents saw took.", registry=r,
                                            buckets=(1, 5, 15, 30, 60, 120, 300, 600, 1800))
        self.report_age = Gauge("greengpu_daemon_agent_report_age_seconds", "Age of each node's last agent "
                                "report (older than the staleness bound: unknown).", ["node"], registry=r)
        self.reports = Counter("greengpu_daemon_agent_reports", "Agent reports received, by outcome.", ["outcome"],
                               registry=r)
        self.stalled = Gauge("greengpu_daemon_stalled_jobs", "Training jobs below half their own utilisation "
                             "baseline for the sustain period.", registry=r)
        self.drained = Gauge("greengpu_daemon_drained_nodes", "Nodes drained for a failing GPU.", registry=r)


def freeze_long_lived_heap() -> None:
    """Move everything alive now (the inventory, the job stream, the bodies' indexes) out of the cyclic
    garbage collector's sight, once the daemon has started.

    The collector's full passes re-walk every live object; on a large cluster they came every few ticks
    and doubled those ticks' time. Objects made later are collected as usual; a frozen object is still
    freed by reference counting when nothing holds it."""
    gc.collect()
    gc.freeze()
