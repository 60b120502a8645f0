"""Cloud pools that also record, for the ledger, every node's paid time and every job's use of a node
(greengpu.accounting.cloud_rows turns them into the hourly cloud rows). Used only when a replay is asked for
a ledger (`simulate --ledger`): the decisions are those of sim/cloud.py, untouched."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from greengpu.accounting.attribution import JobCharge
from greengpu.accounting.cloud_rows import CloudSpan
from greengpu.model import GPU_UNITS, Cluster, Job, PendingJob
from greengpu.policy import Policy
from greengpu.sim.clock import EventClock
from greengpu.sim.cloud import CloudPools
from greengpu.sim.cloud_parts import CloudJob, CloudNode
from greengpu.sim.results import JobOutcomes


class MeteredCloudPools(CloudPools):
    """CloudPools keeping `spans` for the ledger."""

    def __init__(self, cluster: Cluster, policy: Policy, clock: EventClock, outcomes: JobOutcomes,
                 finish_s: dict[str, float], originals: Mapping[str, Job], seed: int,
                 requeue: Callable[[PendingJob], None], finished: Callable[[float], None],
                 price_per_kwh: Callable[[float], float]) -> None:
        super().__init__(cluster, policy, clock, outcomes, finish_s, originals, seed, requeue, finished, price_per_kwh)
        self.spans: list[CloudSpan] = []
        self.segments: list[JobCharge] = []
        """Each run of a job in the cloud, for the ledger's job rows (queue rows; energy and spend: the spans)."""

    def _used(self, cloud_job: CloudJob, now_s: float) -> None:
        if cloud_job.start_s is None:
            return
        job = cloud_job.pending.job
        for name, units in cloud_job.units_by_node.items():
            node = self.nodes[name]
            self.spans.append(CloudSpan(node.pool, job.tenant, cloud_job.start_s, now_s, units / node.units,
                                        units / GPU_UNITS))
        pool = self.nodes[next(iter(cloud_job.units_by_node))].pool
        self.segments.append(JobCharge(job.job_id, job.tenant, job.job_class, cloud_job.start_s, now_s, job.gpus,
                                       tuple(sorted(cloud_job.units_by_node)), 0.0, 0.0, 0.0, 0.0,
                                       submit_s=job.submit_time_s, pool=pool))

    def leave(self, cloud_job: CloudJob, release_idle: bool = False) -> None:
        self._used(cloud_job, self.clock.now_s)  # before the nodes it held may stop
        super().leave(cloud_job, release_idle)

    def _bill(self, node: CloudNode, until_s: float) -> None:
        self.spans.append(CloudSpan(node.pool, "", node.requested_s, until_s, 1.0))
        super()._bill(node, until_s)

    def close(self, now_s: float) -> None:
        for cloud_job in self.jobs.values():
            self._used(cloud_job, now_s)
        super().close(now_s)
