"""GPUs asked by the jobs that arrived in the last day: how much of its share of use the warm reserve keeps.

The warm reserve keeps free GPUs awake for bursts, and follows use because bursts come when the cluster
is busy. But a reserve is for work that arrives: while none does (a holiday, or a cluster that only
drains the long jobs it holds), a share of use keeps nodes awake for nothing. So the reserve's share of
use counts at most the GPUs that arrived over the last day, the period of the daily cycle of demand
(greengpu.forecast.reserve models the same cycle). The fixed floor and the forecast's rise stay.

Bodies feed it differently and reach the same figure: the simulator adds each job as it arrives; the
daemon notes every job it sees in a snapshot (running or pending) whose submit time falls in the
window, once per job id, so a job that started between two ticks is counted too.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable

from greengpu.model import ClusterSnapshot, Job

ARRIVAL_WINDOW_S = 86_400.0
"""A day: the period over which arrivals justify a reserve."""


class RecentArrivals:
    """A sliding day of arrivals: their GPUs, each job counted once."""

    def __init__(self, window_s: float = ARRIVAL_WINDOW_S) -> None:
        self.window_s = window_s
        self._arrivals: deque[tuple[float, str, float]] = deque()
        """(submit time, job id, GPUs), in the order they were noted."""
        self._seen: set[str] = set()
        self._gpus = 0.0

    def add(self, job: Job, time_s: float | None = None) -> None:
        """Note `job`'s arrival (at `time_s`, default its submit time), once per job id."""
        if job.job_id in self._seen:
            return
        self._seen.add(job.job_id)
        self._arrivals.append((job.submit_time_s if time_s is None else time_s, job.job_id, float(job.gpus)))
        self._gpus += job.gpus

    def note_seen(self, now_s: float, jobs: Iterable[Job]) -> None:
        """Note the jobs of a snapshot that arrived within the window and were not noted before."""
        since_s = now_s - self.window_s
        for job in jobs:
            if job.submit_time_s > since_s and job.job_id not in self._seen:
                self.add(job)

    def note_snapshot(self, now_s: float, snapshot: ClusterSnapshot) -> None:
        """Note the running and pending jobs of a body's snapshot (`note_seen` of both)."""
        self.note_seen(now_s, (running.job for running in snapshot.running))
        self.note_seen(now_s, (pending.job for pending in snapshot.pending))

    def gpus(self, now_s: float) -> float:
        """GPUs asked by the jobs that arrived after `now_s` minus the window."""
        arrivals, since_s = self._arrivals, now_s - self.window_s
        # Noted out of submit order at times (a snapshot's jobs): drop from the front while it is old,
        # which forgets each job at most a window late and never counts one twice.
        while arrivals and arrivals[0][0] <= since_s:
            _, job_id, gpus = arrivals.popleft()
            self._gpus -= gpus
            self._seen.discard(job_id)
        return max(0.0, self._gpus)
