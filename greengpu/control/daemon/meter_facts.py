"""What the daemon's meter (greengpu.control.daemon.daemon_meter) learns from its body beyond one observation: the cloud
node time the body started and paid for, and how a job that left the running set ended.

A body that can tell gives the meter a `LedgerFacts`; the fake cluster does (its cloud pools are its own, its
jobs' ends are its own events). The Slurm and Kubernetes bodies give none: they see cloud nodes by name but not
when the provider started billing them nor which job held which share, so the daemon writes no cloud rows for
them (the provider's bill is the truth there) and a job that leaves their running set ends `preempted` when it
is seen waiting again, else with no outcome ('').
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from greengpu.accounting.attribution import JobCharge
from greengpu.accounting.cloud_rows import CloudSpan
from greengpu.control.fakes.fake_cluster import FakeCluster


class LedgerFacts(Protocol):
    """What a body tells the meter (see the module)."""

    regions: Mapping[str, str]
    """Each cloud pool's region ('' or absent: none named)."""

    def cloud_spans(self, start_s: float, end_s: float) -> list[CloudSpan]:
        """The cloud node time of [start_s, end_s): paid spans (tenant '') and the jobs' shares."""
        ...

    def cloud_segments(self, start_s: float, end_s: float) -> list[JobCharge]:
        """The cloud jobs' runs within [start_s, end_s) for the job rows."""
        ...

    def job_outcome(self, job_id: str) -> str:
        """How a job no longer running ended: completed, killed, preempted, failed, or '' (not known)."""
        ...


class FakeClusterFacts:
    """The fake cluster's facts: its cloud pools' runs, and its finished and requeued jobs."""

    def __init__(self, body: FakeCluster, regions: Mapping[str, str]) -> None:
        self.body = body
        self.regions = regions

    def cloud_spans(self, start_s: float, end_s: float) -> list[CloudSpan]:
        return self.body.cloud.spans(start_s, end_s)

    def cloud_segments(self, start_s: float, end_s: float) -> list[JobCharge]:
        return self.body.cloud.segments(start_s, end_s)

    def job_outcome(self, job_id: str) -> str:
        # The fake cluster never loses a job: it ran to its end, or it was stopped and requeued (a preemption,
        # or a checkpoint-and-stop off a failing GPU), resuming later from its last checkpoint.
        if job_id in self.body.pending:
            return "preempted"
        return "completed" if job_id in self.body.finished else ""


def facts_of(body: object, cluster_file: str) -> LedgerFacts | None:
    """The facts `body` can tell the meter (None: a body that tells none, see the module)."""
    if not isinstance(body, FakeCluster):
        return None
    from greengpu.config.inventory import load_cloud_pools

    regions = {name: pool.region for name, pool in load_cloud_pools(cluster_file).items()} if body.cluster.pools else {}
    return FakeClusterFacts(body, regions)
