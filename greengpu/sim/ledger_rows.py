"""What a replay adds to its ledger run beyond the meter's hours: how each job's run segments ended, its
submit time and checkpoint time (for the report's queue rows), and the cloud pools' hourly rows
(greengpu.accounting.cloud_rows). Read after the replay: the decisions are untouched."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import TYPE_CHECKING

from greengpu.accounting.attribution import Attribution, JobCharge
from greengpu.accounting.cloud_rows import CloudUsage, site_cloud_hours
from greengpu.model import Cluster, Job
from greengpu.policy import Policy
from greengpu.sim.cloud_ledger import MeteredCloudPools
from greengpu.sim.results import JobOutcomes

if TYPE_CHECKING:
    from greengpu.sim.engine import Simulation


def gpu_model_of(cluster: Cluster, nodes: tuple[str, ...]) -> str:
    """The GPU model of a job's nodes ('+'-joined when they differ; '' for a node the inventory lacks)."""
    types = {n.name: n.type_name for n in cluster.nodes}
    models = sorted({cluster.node_types[types[n]].gpu_model for n in nodes if n in types})
    return "+".join(models)


def settle_jobs(attribution: Attribution, outcomes: JobOutcomes, originals: Mapping[str, Job],
                checkpoint_cost_s: float, cluster: Cluster) -> None:
    """Give every job segment its outcome: the last one `completed` when the job completed ('' when it was still
    running when the replay ended), an earlier one `preempted` unless the next starts at the same instant (a
    change of pace, not a stop). The checkpoint time is the policy's `spot.checkpoint_cost_s` for a job that
    checkpoints (what the replay charges for one), unknown otherwise."""
    by_job: dict[str, list[int]] = {}
    for index, charge in enumerate(attribution.jobs):
        by_job.setdefault(charge.job_id, []).append(index)
    settled: list[JobCharge] = list(attribution.jobs)
    for job_id, indexes in by_job.items():
        indexes.sort(key=lambda i: (attribution.jobs[i].start_s, attribution.jobs[i].end_s))
        starts = {attribution.jobs[i].start_s for i in indexes}
        job = originals.get(job_id)
        checkpoint_s = checkpoint_cost_s if job is not None and job.checkpoint_interval_s else None
        for position, index in enumerate(indexes):
            charge = attribution.jobs[index]
            if position == len(indexes) - 1:
                outcome = "completed" if job_id in outcomes.completed else ""
            else:
                outcome = "" if charge.end_s in starts else "preempted"
            settled[index] = replace(charge, outcome=outcome, checkpoint_s=checkpoint_s,
                                     gpu_model="" if charge.pool else gpu_model_of(cluster, charge.nodes),
                                     submit_s=job.submit_time_s if job is not None else charge.submit_s)
    attribution.jobs[:] = settled


def ledger_extras(simulation: Simulation, cluster_file: str, policy: Policy
                  ) -> dict[tuple[float, str, str], CloudUsage]:
    """Settle a finished replay's job segments in its attribution and return its cloud rows (none without
    pools). The pools' regions come from the inventory; no region has an intensity series of its own yet, so
    every cloud row's CO2 is at the site's grid intensity (the fallback of accounting.cloud_rows.site_cloud_hours)."""
    from greengpu.config.inventory import load_cloud_pools

    attribution = simulation.attribution
    assert attribution is not None, "a replay without --ledger has nothing to settle"
    if isinstance(simulation.cloud, MeteredCloudPools):  # its cloud runs too: a job's outcome spans both
        attribution.jobs.extend(simulation.cloud.segments)
    settle_jobs(attribution, simulation.work.outcomes, {job.job_id: job for job in simulation.jobs},
                policy.spot.checkpoint_cost_s, simulation.cluster)
    if simulation.cloud is None:
        return {}
    regions = {name: pool.region for name, pool in load_cloud_pools(cluster_file).items()}
    spans = simulation.cloud.spans if isinstance(simulation.cloud, MeteredCloudPools) else []
    return site_cloud_hours(simulation.cluster, spans, regions, {})
