"""Leader election on a coordination.k8s.io/v1 Lease, as Kubernetes' own controllers do it.

One replica holds the Lease and renews it; the others read it and act only once it has expired (its
holder missed `lease_duration_s` of renewals). Every write carries the resourceVersion it read, so
two replicas that try at once cannot both win: the API server answers the loser 409, which here
means "not the leader" (never retried). Times are the Lease's MicroTime (RFC 3339 in UTC).

Leadership is held for the whole of any action, not just the start of a tick: a long action (a drain
waits up to 300 s for pods to terminate, longer than the Lease) calls `keep` between its steps, which
renews the Lease every `renew_every_s` (a third of its duration, as client-go's elector does) and says
False the moment this replica cannot be sure it still holds it: its last renewal is older than
`renew_deadline_s` (two thirds of the duration, so it stops acting well before another replica may
take over at the full duration) or another replica wrote the Lease. On SIGTERM the holder `release`s the
Lease (empty holder, as client-go's ReleaseOnCancel), so a standby takes over at its next tick instead of
waiting out the duration.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import TypedDict

from greengpu.backends.kubernetes import KubeApi, KubeError

NOT_CONFLICTS = frozenset({429, 500, 502, 503, 504})
"""Retried as any call is; a 409 is an answer here (another replica wrote first), not a glitch."""


def _micro_time(now_s: float) -> str:
    return datetime.fromtimestamp(now_s, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _seconds(value: datetime | str | None) -> float | None:
    if value is None:
        return None
    if isinstance(value, datetime):
        return value.timestamp()
    return datetime.fromisoformat(str(value).replace("Z", "+00:00")).timestamp()


class _LeaseSpec(TypedDict):
    holderIdentity: str | None
    leaseDurationSeconds: int
    acquireTime: str
    renewTime: str
    leaseTransitions: int


class _LeaseBody(TypedDict):
    """A coordination.k8s.io/v1 Lease as greengpu writes it."""

    apiVersion: str
    kind: str
    metadata: dict[str, str]
    spec: _LeaseSpec


class LeaseElection:
    """Whether this replica (`identity`) leads, renewed each time `lead` is asked."""

    def __init__(self, api: KubeApi, namespace: str, name: str, identity: str, lease_duration_s: int = 60) -> None:
        self.api = api
        self.namespace = namespace
        self.name = name
        self.identity = identity
        self.lease_duration_s = lease_duration_s
        self.renew_every_s = lease_duration_s / 3
        self.renew_deadline_s = lease_duration_s * 2 / 3
        self.renewed_s: float | None = None
        """When this replica last wrote the Lease as its holder (None: it does not hold it)."""
        self._coordination = api.coordination()

    def holds(self, now_s: float) -> bool:
        """Whether this replica may still act at `now_s` without asking the API server (last renewal fresh)."""
        return self.renewed_s is not None and now_s - self.renewed_s < self.renew_deadline_s

    def keep(self, now_s: float) -> bool:
        """During an action: renew when due; False as soon as leadership is lost or cannot be confirmed in time."""
        if self.renewed_s is None:
            return False
        if now_s - self.renewed_s < self.renew_every_s:
            return True
        try:
            return self.lead(now_s)
        except KubeError:
            return self.holds(now_s)  # the API server is slow or away: act only while the last renewal is fresh

    def release(self, now_s: float) -> bool:
        """Give the Lease up (SIGTERM): an empty holder that a standby takes at once. False when not held."""
        if self.renewed_s is None:
            return False
        self.renewed_s = None
        try:
            lease = self.api.call(f"read lease {self.namespace}/{self.name}", self._coordination.read_namespaced_lease,
                                  self.name, self.namespace, retry=NOT_CONFLICTS)
            if getattr(lease.spec, "holder_identity", None) != self.identity:
                return False
            body = self._body(now_s, lease.metadata.resource_version if lease.metadata else None, now_s,
                              int(getattr(lease.spec, "lease_transitions", None) or 0))
            body["spec"]["holderIdentity"] = None
            body["spec"]["leaseDurationSeconds"] = 1
            return self._write(lambda: self.api.call("release lease", self._coordination.replace_namespaced_lease,
                                                     self.name, self.namespace, body, retry=NOT_CONFLICTS))
        except KubeError:
            return False  # it expires on its own after its duration

    def _body(self, now_s: float, resource_version: str | None, acquire_s: float, transitions: int) -> _LeaseBody:
        metadata: dict[str, str] = {"name": self.name, "namespace": self.namespace}
        if resource_version is not None:
            metadata["resourceVersion"] = resource_version
        return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": metadata,
                "spec": {"holderIdentity": self.identity, "leaseDurationSeconds": self.lease_duration_s,
                         "acquireTime": _micro_time(acquire_s), "renewTime": _micro_time(now_s),
                         "leaseTransitions": transitions}}

    def lead(self, now_s: float) -> bool:
        """Take or renew the Lease when it is ours or has expired; False while another replica holds it."""
        try:
            lease = self.api.call(f"read lease {self.namespace}/{self.name}",
                                  self._coordination.read_namespaced_lease, self.name, self.namespace,
                                  retry=NOT_CONFLICTS)
        except KubeError as error:
            if error.status != 404:
                raise
            return self._won(now_s, self._write(lambda: self.api.call(
                "create lease", self._coordination.create_namespaced_lease, self.namespace,
                self._body(now_s, None, now_s, 0), retry=NOT_CONFLICTS)))
        spec = lease.spec
        holder = getattr(spec, "holder_identity", None)
        renewed_s = _seconds(getattr(spec, "renew_time", None))
        duration_s = float(getattr(spec, "lease_duration_seconds", None) or self.lease_duration_s)
        expired = renewed_s is None or renewed_s + duration_s < now_s
        if holder and holder != self.identity and not expired:
            return self._won(now_s, False)
        transitions = int(getattr(spec, "lease_transitions", None) or 0) + (holder != self.identity)
        acquired_s = _seconds(getattr(spec, "acquire_time", None)) if holder == self.identity else now_s
        version = lease.metadata.resource_version if lease.metadata else None
        body = self._body(now_s, version, acquired_s or now_s, transitions)
        return self._won(now_s, self._write(lambda: self.api.call(
            "renew lease", self._coordination.replace_namespaced_lease, self.name, self.namespace, body,
            retry=NOT_CONFLICTS)))

    def _won(self, now_s: float, won: bool) -> bool:
        self.renewed_s = now_s if won else None
        return won

    @staticmethod
    def _write(write: Callable[[], object]) -> bool:
        try:
            write()
        except KubeError as error:
            if error.status == 409:
                return False  # another replica wrote first: it leads
            raise
        return True
