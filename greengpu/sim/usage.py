"""Past GPU use per tenant, decayed, for weighted fair share (`scheduler.fair_share.usage_weight`).

The core orders tenants by (allocated + usage_weight x decayed GPU-hours) / weight; the decayed
GPU-hours are history, which a pure cycle cannot keep, so the body keeps them and hands them over in
the snapshot (`tenant_usage_gpu_s`). With `usage_weight` 0 (the default) nothing is kept.
"""

from __future__ import annotations

from collections.abc import Mapping

from greengpu.policy import FairSharePolicy
from greengpu.sched.order import decay_usage

_NONE: Mapping[str, float] = {}


class TenantUsage:
    """Each tenant's decayed GPU-seconds, folded forward whenever its allocation changes."""

    def __init__(self, policy: FairSharePolicy) -> None:
        self.enabled = policy.usage_weight > 0
        self.half_life_s = policy.usage_half_life_s
        self._allocated: dict[str, float] = {}
        self._usage_gpu_s: dict[str, float] = {}
        self._since_s: dict[str, float] = {}
        self._origin_s = 0.0

    def start(self, origin_s: float) -> None:
        self._origin_s = origin_s

    def _fold(self, tenant: str, now_s: float) -> None:
        since_s = self._since_s.get(tenant, self._origin_s)
        self._usage_gpu_s[tenant] = decay_usage(self._usage_gpu_s.get(tenant, 0.0), self._allocated.get(tenant, 0.0),
                                                now_s - since_s, self.half_life_s)
        self._since_s[tenant] = now_s

    def started(self, tenant: str, gpus: float, now_s: float) -> None:
        if self.enabled:
            self._fold(tenant, now_s)
            self._allocated[tenant] = self._allocated.get(tenant, 0.0) + gpus

    def stopped(self, tenant: str, gpus: float, now_s: float) -> None:
        if self.enabled:
            self._fold(tenant, now_s)
            self._allocated[tenant] = self._allocated.get(tenant, 0.0) - gpus

    def snapshot(self, now_s: float) -> Mapping[str, float]:
        """Every tenant's decayed GPU-seconds at `now_s` (one shared empty mapping when not enabled)."""
        if not self.enabled:
            return _NONE
        for tenant in list(self._usage_gpu_s):
            self._fold(tenant, now_s)
        return dict(self._usage_gpu_s)
