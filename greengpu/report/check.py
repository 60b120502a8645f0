"""The `greengpu check` summary: what an inventory and a policy amount to."""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from greengpu.backends.sharing_live import declared_layout
from greengpu.model import Cluster
from greengpu.policy import Policy
from greengpu.sleep.wake_verify import last_attempt_s

VERIFY_INTERVAL_S = 60.0
"""Period of `greengpu slurm verify` in the shipped timer (deploy/systemd): retries are noticed this late."""


@dataclass
class ModelSummary:
    """Nodes, GPUs and power of one GPU model."""

    gpu_model: str
    nodes: int = 0
    gpus: int = 0
    idle_w: float = 0.0
    peak_w: float = 0.0
    sleep_w: float = 0.0


@dataclass
class CheckSummary:
    """The facts `greengpu check` prints."""

    nodes: int
    gpus: int
    models: list[ModelSummary]
    idle_kw: float
    peak_kw: float
    facility_idle_kw: float
    facility_peak_kw: float
    tenants: list[dict[str, Any]]
    quota_total_gpus: float
    pools: list[dict[str, Any]]
    warnings: list[str] = field(default_factory=list)
    sharing: list[str] = field(default_factory=list)
    """Per node type with MIG or time-slicing, its declared layout (docs/GPU-SHARING.md)."""


def summarize(cluster: Cluster) -> CheckSummary:
    """Count nodes and GPUs per model, idle and peak power, and check quotas against capacity."""
    by_model: dict[str, ModelSummary] = {}
    quota_by_model: dict[str, float] = defaultdict(float)
    for node in cluster.nodes:
        node_type = cluster.node_type(node)
        summary = by_model.setdefault(node_type.gpu_model, ModelSummary(node_type.gpu_model))
        summary.nodes += 1
        summary.gpus += node_type.gpus
        summary.idle_w += node_type.node_idle_w
        summary.peak_w += node_type.node_peak_w
        summary.sleep_w += node_type.host_sleep_w
    gpus = sum(m.gpus for m in by_model.values())
    idle_w = sum(m.idle_w for m in by_model.values())
    peak_w = sum(m.peak_w for m in by_model.values())
    warnings: list[str] = []
    quota_total = sum(t.quota_gpus for t in cluster.tenants.values())
    if quota_total > gpus:
        warnings.append(
            f"tenant quotas add up to {quota_total:g} GPUs, more than the {gpus} installed: "
            "guarantees cannot all be met at once"
        )
    for tenant in cluster.tenants.values():
        for model, quota in tenant.quota_gpus_by_model.items():
            quota_by_model[model] += quota
    for model, quota in sorted(quota_by_model.items()):
        installed = by_model[model].gpus if model in by_model else 0
        if quota > installed:
            warnings.append(f"{model} quotas add up to {quota:g} GPUs, more than the {installed} installed")
    if not cluster.tenants:
        warnings.append("no tenants defined: every job may only borrow idle capacity, none has a guarantee")
    missing_mac = sum(1 for n in cluster.nodes if n.mac is None)
    if missing_mac:
        warnings.append(f"{missing_mac} node(s) have no MAC address: they can be suspended only if IPMI wakes them")
    tenants = [
        {
            "tenant": t.name,
            "quota_gpus": t.quota_gpus,
            "weight": t.weight,
            "borrow_limit_gpus": t.borrow_limit_gpus,
            "quota_share": (t.quota_gpus / gpus) if gpus else 0.0,
        }
        for t in cluster.tenants.values()
    ]
    pools = [
        {"pool": p.name, "type": p.type_name, "spot": p.spot, "price_per_hour": p.price_per_hour,
         "max_nodes": p.max_nodes}
        for p in cluster.pools.values()
    ]
    pue = cluster.site.pue
    return CheckSummary(
        nodes=len(cluster.nodes), gpus=gpus, models=sorted(by_model.values(), key=lambda m: m.gpu_model),
        idle_kw=idle_w / 1000, peak_kw=peak_w / 1000, facility_idle_kw=idle_w * pue / 1000,
        facility_peak_kw=peak_w * pue / 1000, tenants=tenants, quota_total_gpus=quota_total, pools=pools,
        warnings=warnings, sharing=declared_layout(cluster),
    )


def policy_lines(policy: Policy) -> list[str]:
    """One line per lever saying what the policy does."""
    sched = policy.scheduler
    pre = sched.preemption
    lines = [
        f"policy {policy.name}: control tick every {policy.interval_s:g} s",
        f"  scheduler: fair share, age boost {sched.age_boost_per_hour:g}/h (max {sched.age_boost_max:g}), "
        f"preemption {'on' if pre.enabled else 'off'} (grace {pre.grace_s:g} s, victims {pre.victim_order}), "
        f"backfill {'on' if sched.backfill.enabled else 'off'}",
    ]
    if policy.capping.enabled and policy.capping.classes:
        modes = ", ".join(f"{name}={c.mode}" for name, c in policy.capping.classes.items())
        relaxed = ", uncapped while jobs wait for capacity" if policy.capping.relax_when_queued else ""
        lines.append(f"  capping: {modes}{relaxed}")
    else:
        lines.append("  capping: off")
    if policy.sleep.enabled:
        lines.append(
            f"  sleep: after {policy.sleep.idle_timeout_s:g} s idle in {len(policy.sleep.windows)} window(s), "
            f"warm reserve {policy.sleep.warm_reserve_gpus} GPUs"
            + (f" or {policy.sleep.warm_reserve_busy_fraction:.0%} of the GPUs in use"
               if policy.sleep.warm_reserve_busy_fraction else "")
            + (" or the forecast rise of demand at this hour" if policy.sleep.use_forecast else "")
        )
    else:
        lines.append("  sleep: off")
    lines.append(f"  spot: {', '.join(policy.spot.classes)}" if policy.spot.enabled else "  spot: off")
    return lines


def wake_timing_problem(cluster: Cluster, policy: Policy, resume_timeout_s: float | None) -> str | None:
    """Why the policy's wake-up schedule cannot work on this cluster (and Slurm), or None.

    A wake-up that times out before the slowest node could boot is retried while the node boots,
    and marked failed when it was fine. Under Slurm, every retry must bring the node up before
    `ResumeTimeout`: after it, Slurm sets the node DOWN and requeues its jobs, so a later retry is
    worthless.
    """
    sleep = policy.sleep
    if not sleep.enabled or not cluster.nodes:
        return None
    slowest_name = max({n.type_name for n in cluster.nodes}, key=lambda name: cluster.node_types[name].boot_s)
    slowest = cluster.node_types[slowest_name]
    if sleep.wake_timeout_s < slowest.boot_s:
        return (f"policy {policy.name}: sleep.wake_timeout_s {sleep.wake_timeout_s:g} s is shorter than node type "
                f"{slowest_name}'s boot_s {slowest.boot_s:g} s: its wake-ups would time out while it boots")
    if resume_timeout_s is None:
        return None
    needed_s = math.ceil(last_attempt_s(sleep, VERIFY_INTERVAL_S) + slowest.boot_s)
    if needed_s > resume_timeout_s:
        return (f"policy {policy.name}: wake-up {1 + sleep.wake_retries} (after {sleep.wake_retries} retries of "
                f"{sleep.wake_timeout_s:g} s with backoff) can bring node type {slowest_name} up "
                f"{needed_s} s after the first, later than Slurm's ResumeTimeout={resume_timeout_s:g}; "
                f"raise ResumeTimeout to {needed_s} or lower sleep.wake_timeout_s or sleep.wake_retries")
    return None
