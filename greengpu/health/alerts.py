"""Health alerts that say where to look: the GPU, its node, score and top signals, and the jobs and
tenants on it with their last checkpoint, so the person on call can act at once.

Pure: `build_alert` makes the record, `alert_line` renders it as one log line and `alert_dict` as
JSON-ready data; delivering it (the daemon) is someone else's job.
"""

from __future__ import annotations

from dataclasses import dataclass

from greengpu.health.score import HealthAssessment, HealthState, SignalScore
from greengpu.model import RunningJob


@dataclass(frozen=True)
class JobOnGpu:
    """A job on the GPU an alert is about."""

    job_id: str
    tenant: str
    job_class: str
    last_checkpoint_s: float | None
    """The last checkpoint (seen or assumed from the job's interval); None: none since it started."""


@dataclass(frozen=True)
class HealthAlert:
    """One GPU that is `warning` or `failing`."""

    time_s: float
    node: str
    gpu_index: int
    uuid: str
    state: HealthState
    score: float
    top_signals: tuple[SignalScore, ...]
    critical: tuple[str, ...]
    jobs: tuple[JobOnGpu, ...]


def last_checkpoint_s(running: RunningJob, now_s: float) -> float | None:
    """The job's last checkpoint at `now_s`: the one the body saw, else the last whole interval since its start."""
    if running.last_checkpoint_s is not None:
        return running.last_checkpoint_s
    interval_s = running.job.checkpoint_interval_s
    if interval_s is None or interval_s <= 0 or now_s - running.start_time_s < interval_s:
        return None
    return running.start_time_s + (now_s - running.start_time_s) // interval_s * interval_s


def jobs_on_gpu(running: tuple[RunningJob, ...], node: str, gpu_index: int, now_s: float) -> tuple[JobOnGpu, ...]:
    """The jobs holding a share of GPU `gpu_index` of `node`, in job id order."""
    found = [r for r in running if any(s.node == node and s.gpu_index == gpu_index for s in r.slots)]
    return tuple(JobOnGpu(r.job.job_id, r.job.tenant, r.job.job_class, last_checkpoint_s(r, now_s))
                 for r in sorted(found, key=lambda r: r.job.job_id))


def build_alert(time_s: float, node: str, gpu_index: int, uuid: str, assessment: HealthAssessment,
                jobs: tuple[JobOnGpu, ...], top: int = 3) -> HealthAlert | None:
    """The alert for a GPU, or None when it is healthy."""
    if assessment.state is HealthState.HEALTHY:
        return None
    return HealthAlert(time_s=time_s, node=node, gpu_index=gpu_index, uuid=uuid, state=assessment.state,
                       score=assessment.score, top_signals=assessment.top_signals(top),
                       critical=tuple(e.detail for e in assessment.critical), jobs=jobs)


def _checkpoint_text(job: JobOnGpu, now_s: float) -> str:
    if job.last_checkpoint_s is None:
        return "last checkpoint: none seen since start"
    return f"last checkpoint {max(0.0, now_s - job.last_checkpoint_s):.0f} s ago"


def alert_line(alert: HealthAlert) -> str:
    """The alert as one log line."""
    signals = ", ".join(f"{s.signal} {s.value:.3g} {s.unit} (+{s.contribution:.2f})" for s in alert.top_signals)
    parts = [f"GPU health {alert.state.value}: {alert.node} GPU {alert.gpu_index} ({alert.uuid}) "
             f"score {alert.score:.2f}"]
    if alert.critical:
        parts.append("critical: " + ", ".join(alert.critical))
    parts.append("top signals: " + (signals or "none"))
    jobs = ", ".join(f"{j.job_id} (tenant {j.tenant}, {j.job_class}, {_checkpoint_text(j, alert.time_s)})"
                     for j in alert.jobs)
    parts.append("jobs: " + (jobs or "none"))
    return "; ".join(parts)


def alert_dict(alert: HealthAlert) -> dict[str, object]:
    """The alert as JSON-ready data."""
    return {
        "time_s": alert.time_s, "node": alert.node, "gpu": alert.gpu_index, "uuid": alert.uuid,
        "state": alert.state.value, "score": round(alert.score, 4),
        "top_signals": [{"signal": s.signal, "value": s.value, "unit": s.unit, "contribution": round(s.contribution, 4)}
                        for s in alert.top_signals],
        "critical": list(alert.critical),
        "jobs": [{"job": j.job_id, "tenant": j.tenant, "class": j.job_class, "last_checkpoint_s": j.last_checkpoint_s}
                 for j in alert.jobs],
    }
