"""Tenant quotas: nominal guarantees, borrowing of idle capacity up to a limit, GPU-memory caps.

A tenant's usage is counted per *quota key*: the GPU model when the tenant has per-model quotas,
otherwise "*" (all models together). Within its nominal quota a tenant is guaranteed; above it
the tenant is borrowing, which is allowed up to `borrow_limit_gpus` and only for jobs that can be
preempted (unless the policy allows otherwise), because borrowed GPUs are what reclaim takes back.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from greengpu.model import GPU_UNITS, Cluster, Job, RunningJob, Tenant

ANY_MODEL = "*"


class QuotaLedger:
    """Allocated milli-GPUs and GPU memory per tenant, with admission checks."""

    def __init__(self, cluster: Cluster, model_of_node: dict[str, str], memory_of_node: dict[str, float],
                 borrow_non_interruptible: bool) -> None:
        self.cluster = cluster
        self.model_of_node = model_of_node
        self.memory_of_node = memory_of_node
        self.borrow_non_interruptible = borrow_non_interruptible
        self.used_units: dict[tuple[str, str], int] = {}
        self.total_units: dict[str, int] = {}
        self.memory_gb: dict[str, float] = {}
        self._tenants: dict[str, Tenant] = {}
        self._nominal: dict[tuple[str, str], int] = {}
        self.version = 0
        """Bumped on every charge, so callers can cache figures derived from usage."""
        self.tenant_version: dict[str, int] = {}
        """Per tenant, bumped on every charge of its jobs (figures derived from one tenant's usage)."""

    def tenant(self, name: str) -> Tenant:
        """The tenant (cached); unknown tenants have no quota."""
        found = self._tenants.get(name)
        if found is None:
            found = self.cluster.tenant(name)
            self._tenants[name] = found
        return found

    def key(self, tenant: Tenant, model: str) -> str:
        """The quota key that usage on `model` counts against."""
        return model if tenant.quota_gpus_by_model else ANY_MODEL

    def nominal_units(self, tenant: Tenant, key: str) -> int:
        """The tenant's guaranteed milli-GPUs for `key`."""
        cached = self._nominal.get((tenant.name, key))
        if cached is None:
            quota = tenant.quota_gpus if key == ANY_MODEL else tenant.quota_gpus_by_model.get(key, 0.0)
            cached = self._nominal[(tenant.name, key)] = int(round(quota * GPU_UNITS))
        return cached

    def limit_units(self, tenant: Tenant, key: str) -> float:
        """Nominal plus borrowing limit (infinite when the tenant may borrow any idle capacity)."""
        if tenant.borrow_limit_gpus is None:
            return math.inf
        return self.nominal_units(tenant, key) + tenant.borrow_limit_gpus * GPU_UNITS

    def used(self, tenant: str, key: str) -> int:
        """Milli-GPUs the tenant holds against `key`."""
        return self.used_units.get((tenant, key), 0)

    def over_nominal_units(self, tenant_name: str, model: str) -> int:
        """How far the tenant is above its nominal quota on the key of `model` (0 if within)."""
        tenant = self.tenant(tenant_name)
        key = self.key(tenant, model)
        return max(0, self.used(tenant_name, key) - self.nominal_units(tenant, key))

    def tenants_over_nominal(self) -> set[str]:
        """Tenants borrowing on at least one quota key."""
        return {tenant for (tenant, key), used in self.used_units.items()
                if used > self.nominal_units(self.tenant(tenant), key)}

    def job_memory_gb(self, job: Job, nodes: Iterable[str], units_by_node: dict[str, int]) -> float:
        """GPU memory the job holds: its request, or its share of each GPU's memory."""
        if job.gpu_memory_gb is not None:
            return job.gpu_memory_gb
        return sum(self.memory_of_node.get(n, 0.0) * units_by_node[n] / GPU_UNITS for n in nodes)

    def admission_problem(self, job: Job, model: str, units: int) -> str | None:
        """Why `job` may not take `units` on `model` now, or None when quota allows it."""
        tenant = self.tenant(job.tenant)
        key = self.key(tenant, model)
        after = self.used(job.tenant, key) + units
        if after <= self.nominal_units(tenant, key):
            return None
        if not job.interruptible and not self.borrow_non_interruptible:
            return "would borrow quota, and the job cannot be preempted to give it back"
        if after > self.limit_units(tenant, key):
            return "tenant at its quota plus borrowing limit"
        return None

    def within_nominal_after(self, job: Job, model: str, units: int) -> bool:
        """Whether the job fits inside its tenant's nominal quota (so it may reclaim lent GPUs)."""
        tenant = self.tenant(job.tenant)
        key = self.key(tenant, model)
        return self.used(job.tenant, key) + units <= self.nominal_units(tenant, key)

    def memory_problem(self, job: Job, memory_gb: float) -> str | None:
        """Why the job's GPU memory would break its tenant's memory cap, or None."""
        cap = self.tenant(job.tenant).max_gpu_memory_gb
        if cap is not None and self.memory_gb.get(job.tenant, 0.0) + memory_gb > cap + 1e-9:
            return "tenant at its GPU memory cap"
        return None

    def _units_by_model(self, slots_units: Iterable[tuple[str, int]]) -> dict[str, int]:
        result: dict[str, int] = {}
        for node, units in slots_units:
            model = self.model_of_node.get(node)
            if model is not None:
                result[model] = result.get(model, 0) + units
        return result

    def charge(self, running: RunningJob, sign: int = 1) -> None:
        """Add (sign=1) or remove (sign=-1) a running job's GPUs and memory from its tenant."""
        self.version += 1
        job = running.job
        name = job.tenant
        self.tenant_version[name] = self.tenant_version.get(name, 0) + 1
        tenant = self.tenant(name)
        by_node = running.units_by_node
        used = self.used_units
        if tenant.quota_gpus_by_model:
            for model, held in self._units_by_model(by_node.items()).items():
                key = (name, model)
                used[key] = used.get(key, 0) + sign * held
        units = job.units if not job.gpu_profile else sum(by_node.values())  # a MIG instance or replica: its share
        if not tenant.quota_gpus_by_model:
            key = (name, ANY_MODEL)
            used[key] = used.get(key, 0) + sign * units
        self.total_units[name] = self.total_units.get(name, 0) + sign * units
        if tenant.max_gpu_memory_gb is not None or job.gpu_memory_gb is not None:
            memory = self.job_memory_gb(job, by_node, by_node)
            self.memory_gb[name] = self.memory_gb.get(name, 0.0) + sign * memory

    def violations(self) -> list[str]:
        """Tenants above nominal plus borrowing limit."""
        found = []
        for (tenant_name, key), used in sorted(self.used_units.items()):
            tenant = self.tenant(tenant_name)
            if tenant.borrow_limit_gpus is None:
                continue  # may borrow any idle capacity: no limit to break
            if used > self.limit_units(tenant, key):
                found.append(f"tenant {tenant_name} holds {used / GPU_UNITS:g} GPUs on {key}, "
                             f"above quota plus borrowing {self.limit_units(tenant, key) / GPU_UNITS:g}")
        return found
