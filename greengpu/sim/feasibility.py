"""Which jobs of a trace can never start on a cluster, whatever else runs: decided before a replay.

A job that asks for more GPUs of its allowed models than the cluster has installed, or more than its
tenant may ever hold (nominal quota plus borrow limit), would wait forever; a replay would keep
rescheduling it. The readers cannot know this (it depends on the cluster), so the commands that
replay (`greengpu simulate`, `greengpu plan`) ask here first and name the first such job. The
simulator also stops by itself when only never-placeable work is left (its safety net), so no
replay can hang on one.
"""

from __future__ import annotations

from collections.abc import Sequence

from greengpu.model import Cluster, Job
from greengpu.sched.shared_gpus import shared_never_fits
from greengpu.sched.state import shared_gpu_count


def installed_gpus_by_model(cluster: Cluster) -> dict[str, tuple[int, int]]:
    """Per GPU model: (installed GPUs whole-GPU work may use, those of its largest node)."""
    out: dict[str, tuple[int, int]] = {}
    for node in cluster.nodes:
        node_type = cluster.node_types[node.type_name]
        gpus = node_type.gpus - shared_gpu_count(node_type)  # MIG and time-sliced GPUs take no whole-GPU work
        total, largest = out.get(node_type.gpu_model, (0, 0))
        out[node_type.gpu_model] = (total + gpus, max(largest, gpus))
    return out


def never_fits_reason(job: Job, cluster: Cluster, by_model: dict[str, tuple[int, int]] | None = None) -> str | None:
    """Why `job` can never start on `cluster`, or None when it might."""
    if job.gpu_profile:  # a MIG instance or a time-slice replica (docs/GPU-SHARING.md)
        return shared_never_fits(job, cluster)
    by_model = by_model if by_model is not None else installed_gpus_by_model(cluster)
    models = [m for m in by_model if job.gpu_types is None or m in job.gpu_types]
    if not models:
        wanted = ", ".join(sorted(job.gpu_types or ()))
        return f"job {job.job_id} asks for GPU model {wanted}; the cluster has {', '.join(sorted(by_model))}"
    per_node = job.gpus_per_node
    usable = [m for m in models if per_node is None or per_node <= by_model[m][1]]
    if not usable:
        return f"job {job.job_id} asks for {per_node} GPUs per node; no node of its GPU models has that many"
    # A gang never mixes GPU models: one model must hold the whole request.
    most, model = max((by_model[m][0], m) for m in usable)
    if job.whole_gpus > most:
        return f"job {job.job_id} asks for {job.gpus:g} GPUs, more than the cluster's {most} {model} GPUs"
    tenant = cluster.tenants.get(job.tenant)
    if tenant is not None and tenant.borrow_limit_gpus is not None \
            and job.gpus > tenant.quota_gpus + tenant.borrow_limit_gpus + 1e-9:
        return (f"job {job.job_id} asks for {job.gpus:g} GPUs; tenant {job.tenant} may hold at most "
                f"{tenant.quota_gpus + tenant.borrow_limit_gpus:g} (quota plus borrow limit)")
    return None


def split_never_fitting(jobs: Sequence[Job], cluster: Cluster) -> tuple[list[Job], list[str]]:
    """(the jobs that might start, the reasons of those that never can), in trace order."""
    by_model = installed_gpus_by_model(cluster)
    fitting: list[Job] = []
    reasons: list[str] = []
    for job in jobs:
        reason = never_fits_reason(job, cluster, by_model)
        if reason is None:
            fitting.append(job)
        else:
            reasons.append(reason)
    return fitting, reasons
