"""The node agent's side of the report channel: after each good tick it posts one report of its node to the
daemon (`--report-to URL`, `POST /v1/report`, greengpu.control.daemon.agent_reports has the format), with the
bearer token from `--report-token-file`.

A report that cannot be delivered is logged (at most once a minute with a count) and dropped: the daemon
counts a node without a fresh report as unknown, which keeps it awake and healthy in its books, so a
lost report is fail safe and never worth holding the agent's loop for.
"""

from __future__ import annotations

import json
import logging
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence

from greengpu.backends.nvml import GpuReading
from greengpu.control.agent.jobclass import GpuJob
from greengpu.health.score import HealthAssessment

log = logging.getLogger("greengpu.agent")

TIMEOUT_S = 5.0


def build_report(node: str, time_s: float, readings: Sequence[GpuReading], jobs: Mapping[int, GpuJob | None],
                 health: Mapping[int, HealthAssessment],
                 checkpoints: Mapping[str, float] | None = None) -> dict[str, object]:
    """One report of this node: per GPU utilisation, health, energy counter (mJ), processes and jobs."""
    gpus: list[dict[str, object]] = []
    seen_jobs: dict[str, dict[str, object]] = {}
    for reading in readings:
        job = jobs.get(reading.index)
        assessment = health.get(reading.index)
        gpus.append({"index": reading.index, "utilization": min(1.0, max(0.0, reading.utilization)),
                     "health": assessment.state.value if assessment is not None else "healthy",
                     "score": min(1.0, max(0.0, assessment.score)) if assessment is not None else 0.0,
                     "energy_mj": round(reading.energy_j * 1000.0) if reading.energy_from_counter else None,
                     "pids": list(reading.pids), "jobs": [job.job_id] if job is not None else []})
        if job is not None:
            last = (checkpoints or {}).get(job.job_id)
            seen_jobs[job.job_id] = {"tenant": job.tenant, "last_checkpoint_s": last}
    return {"node": node, "time_s": time_s, "gpus": gpus, "jobs": seen_jobs}


class ReportSender:
    """Posts reports to the daemon; never raises."""

    def __init__(self, base_url: str, token: str, timeout_s: float = TIMEOUT_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.url = base_url.rstrip("/") + "/v1/report"
        self._token = token
        self.timeout_s = timeout_s
        self._clock = clock
        self.sent = 0
        self.failed = 0
        self._last_logged_s: float | None = None
        self._unlogged = 0

    def send(self, report: dict[str, object]) -> bool:
        data = json.dumps(report).encode()
        request = urllib.request.Request(self.url, data=data, method="POST", headers={
            "Authorization": f"Bearer {self._token}", "Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as answer:  # noqa: S310 - checked URL
                answer.read()
        except urllib.error.HTTPError as error:
            return self._failed(f"the daemon answered {error.code}: {error.read()[:200].decode(errors='replace')}")
        except (urllib.error.URLError, OSError, ValueError) as error:
            return self._failed(f"{getattr(error, 'reason', error)}")
        self.sent += 1
        return True

    def _failed(self, why: str) -> bool:
        self.failed += 1
        now = self._clock()
        if self._last_logged_s is not None and now - self._last_logged_s < 60.0:
            self._unlogged += 1
            return False
        more, self._unlogged, self._last_logged_s = self._unlogged, 0, now
        log.warning("report not delivered to %s: %s%s", self.url, why.strip(),
                    f" ({more} more since the last such line)" if more else "")
        return False
