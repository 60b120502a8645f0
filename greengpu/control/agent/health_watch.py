"""The agent's GPU health watch: health signals read each tick, kept as a short history per GPU, scored
(greengpu.health), exported as metrics, and an alert line logged when a GPU's state worsens.

It only observes: nothing here changes a GPU. A failed health read is logged and skipped; it never
stops the control loop (capping and fail-safe restores matter more than one health sample).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping

from greengpu.backends.nvml import GpuLost, NvmlBackend
from greengpu.control.agent.jobclass import GpuJob
from greengpu.health.alerts import HealthAlert, JobOnGpu, alert_line, build_alert
from greengpu.health.score import HealthAssessment, HealthPolicy, HealthState, assess
from greengpu.health.signals import GpuHealthSample, SignalHistory

log = logging.getLogger("greengpu.health")

_RANK = {HealthState.HEALTHY: 0, HealthState.WARNING: 1, HealthState.FAILING: 2}


class HealthWatch:
    """Health history, assessment and alerts for the GPUs of one node."""

    def __init__(self, backend: NvmlBackend, node: str, policy: HealthPolicy | None = None,
                 jobs: Callable[[], Mapping[int, GpuJob | None]] | None = None) -> None:
        """`jobs`: the job on each GPU now (the agent's last tick), for the alerts."""
        self.backend = backend
        self.node = node
        self.policy = policy or HealthPolicy()
        self._jobs = jobs
        self.histories: dict[int, SignalHistory] = {}
        self.assessments: dict[int, HealthAssessment] = {}
        self.uuids: dict[int, str] = {}
        self.alerts: list[HealthAlert] = []
        """Alerts raised so far (the daemon delivers them; the agent logs each as it comes)."""
        self._xids_watched = False

    def tick(self) -> list[HealthAlert]:
        """Read every GPU's health once; returns the alerts raised by this tick (a GPU whose state worsened)."""
        if not self._xids_watched:
            self._xids_watched = True
            if self.backend.watch_xids() == 0:
                log.info("no GPU of this node reports Xid events: health scores go without them")
        try:
            xids = self.backend.drain_xids()
        except GpuLost as error:
            log.warning("Xid events not read this tick: %s", error)
            xids = {}
        raised: list[HealthAlert] = []
        for index in range(self.backend.gpu_count):
            try:
                sample = self.backend.read_health(index, xids.get(index, ()))
                if index not in self.uuids:
                    self.uuids[index] = self.backend.read(index).uuid
            except GpuLost as error:
                log.warning("GPU %d: health not read this tick: %s", index, error)
                continue
            alert = self.observe(index, sample)
            if alert is not None:
                raised.append(alert)
        return raised

    def observe(self, index: int, sample: GpuHealthSample) -> HealthAlert | None:
        """Add one sample of GPU `index`, re-assess it, and return an alert when its state worsened."""
        history = self.histories.setdefault(index, SignalHistory(self.policy.window_s))
        history.add(sample)
        before = self.assessments.get(index)
        now = assess(history.samples, history.critical, sample.time_s, self.policy)
        self.assessments[index] = now
        if before is not None and _RANK[now.state] <= _RANK[before.state]:
            return None
        if before is None and now.state is HealthState.HEALTHY:
            return None
        alert = build_alert(sample.time_s, self.node, index, self.uuids.get(index, f"GPU-{index}"), now,
                            self._jobs_on(index))
        if alert is not None:
            self.alerts.append(alert)
            (log.error if alert.state is HealthState.FAILING else log.warning)("%s", alert_line(alert))
        return alert

    def _jobs_on(self, index: int) -> tuple[JobOnGpu, ...]:
        job = self._jobs().get(index) if self._jobs is not None else None
        # The class sources know the job, its class and tenant, not its checkpoints.
        return () if job is None else (JobOnGpu(job.job_id, job.tenant, job.job_class, None),)
