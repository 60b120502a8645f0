"""Kubernetes adapter on the official `kubernetes` client: the few API calls greengpu makes.

Translates, never decides. Pods on a node (for the agent: which pod, with which class annotation,
owns a GPU process); cordon and uncordon; evictions (the Eviction API, so PodDisruptionBudgets are
honoured: a blocked eviction is HTTP 429 and is reported, never forced); pending pods that request
`nvidia.com/gpu`; node readiness. Connection: in-cluster service account when running in a pod,
else the kubeconfig, else an explicit `host` (tests point it at an in-process API server on loopback).

Every failure is a `KubeError`, one line: an HTTP status from the API server, or no answer at all
(connection refused, DNS, TLS, timeout: status None), which fails fast, without urllib3's retries.
Conflicts (409), throttling (429 outside evictions) and server errors (500, 503) are retried with a
bounded exponential backoff, as client-go does.

The `kubernetes` package is imported when first needed: the agent's Slurm and local class sources
run on a node without it (the `kube` extra).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kubernetes import client

CLASS_ANNOTATION = "greengpu.io/class"
SLEEP_ANNOTATION = "greengpu.io/sleep"
"""Set on a node greengpu cordoned for sleep, so that it uncordons only nodes it cordoned itself."""
GPU_RESOURCE = "nvidia.com/gpu"
RETRIES = 4
"""Retries of a call answered 409, 429 or 5xx (each after a doubling backoff)."""
BACKOFF_BASE_S = 0.5
BACKOFF_MAX_S = 8.0
RETRYABLE = frozenset({409, 429, 500, 502, 503, 504})
CONNECT_TIMEOUT_S = 3.0


@dataclass(frozen=True)
class PodInfo:
    uid: str
    namespace: str
    name: str
    phase: str
    annotations: dict[str, str] = field(default_factory=dict)
    gpus: int = 0
    """nvidia.com/gpu requested by all containers (limits, as the device plugin counts them)."""
    node: str = ""
    daemonset: bool = False
    mirror: bool = False
    controller: str = ""
    """Kind of the owner that recreates the pod (ReplicaSet, StatefulSet, Job...); "" for a bare pod."""
    empty_dir: bool = False
    """The pod has an emptyDir volume: its data is lost when it is evicted."""


@dataclass(frozen=True)
class EvictionResult:
    evicted: tuple[str, ...]
    blocked: tuple[str, ...]
    """Pods a PodDisruptionBudget protected (HTTP 429): the drain did not finish."""


class KubeError(Exception):
    """The API server refused or failed a call (`status`: its HTTP status), or could not be reached
    (`status` None)."""

    def __init__(self, status: int | None, message: str) -> None:
        super().__init__(f"Kubernetes API: HTTP {status}: {message}" if status is not None
                         else f"Kubernetes API unreachable: {message}")
        self.status = status


class KubeMissing(KubeError):
    """The `kubernetes` package is not installed (the `kube` extra)."""

    def __init__(self) -> None:
        Exception.__init__(self, "the Kubernetes client is not installed (the 'kube' extra): "
                                 "python3 -m pip install '.[kube]' in the greengpu checkout")
        self.status = None


def _client() -> Any:
    try:
        from kubernetes import client
    except ImportError:
        raise KubeMissing() from None
    return client


def make_api_client(host: str | None = None, kubeconfig: str | None = None) -> client.ApiClient:
    """An API client: explicit `host` (no auth), else in-cluster, else the kubeconfig. Fails fast: no
    urllib3 retries (the callers retry what is worth retrying)."""
    kube = _client()
    from kubernetes import config

    if host is not None:
        configuration = kube.Configuration(host=host)
    else:
        configuration = kube.Configuration()
        try:
            config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
        except config.ConfigException:
            try:
                config.load_kube_config(config_file=kubeconfig,  # type: ignore[no-untyped-call]
                                        client_configuration=configuration)
            except (config.ConfigException, OSError) as error:
                raise KubeError(None, f"no in-cluster service account and no usable kubeconfig ({error}); "
                                      "give --kube-host or set KUBECONFIG") from None
    configuration.retries = False
    api_client: client.ApiClient = kube.ApiClient(configuration)
    return api_client


class KubeApi:
    def __init__(self, api_client: client.ApiClient, timeout_s: float = 10.0,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self._kube = _client()
        self._core = self._kube.CoreV1Api(api_client)
        self._timeout_s = timeout_s
        self._sleep = sleep
        self.retries_done = 0
        """Calls sent again after a retryable answer (for tests and logs)."""

    def _call(self, what: str, call: Callable[..., Any], *args: Any, retry: frozenset[int] = RETRYABLE,
              **kwargs: Any) -> Any:
        """One API call with the timeout, errors as `KubeError`, retryable statuses retried with backoff."""
        import urllib3

        for attempt in range(RETRIES + 1):
            try:
                return call(*args, _request_timeout=(CONNECT_TIMEOUT_S, self._timeout_s), **kwargs)
            except self._kube.ApiException as error:
                status = int(error.status or 0)
                if status in retry and attempt < RETRIES:
                    self.retries_done += 1
                    self._sleep(min(BACKOFF_MAX_S, BACKOFF_BASE_S * 2.0 ** attempt))
                    continue
                raise KubeError(status, f"{what}: {_reason(error)}") from None
            except (urllib3.exceptions.HTTPError, OSError) as error:
                raise KubeError(None, f"{what}: {_unreachable(error)}") from None
        raise AssertionError("unreachable")  # the loop returns or raises

    def pods_on_node(self, node: str) -> list[PodInfo]:
        """Pods scheduled on `node` (all namespaces)."""
        return self._pods(f"spec.nodeName={node}")

    def pending_gpu_pods(self) -> list[PodInfo]:
        """Pods not yet scheduled that request GPUs: the demand a sleeping node may be woken for.

        Read from the API server's watch cache (resourceVersion=0), not a quorum read of etcd: every
        node agent asks this each tick, and a pending pod seen a moment late changes nothing."""
        return [p for p in self._pods("status.phase=Pending", from_cache=True) if p.gpus > 0 and not p.node]

    def _pods(self, field_selector: str, from_cache: bool = False) -> list[PodInfo]:
        pods = self._call("list pods", self._core.list_pod_for_all_namespaces, field_selector=field_selector,
                          resource_version="0" if from_cache else None)
        return [_pod_info(p) for p in pods.items if p.metadata is not None]

    def pod_gone(self, pod: PodInfo) -> bool:
        """Whether `pod` has terminated and is deleted (404, or a new pod of the same name: another UID)."""
        try:
            found = self._call(f"read pod {pod.namespace}/{pod.name}", self._core.read_namespaced_pod,
                               pod.name, pod.namespace)
        except KubeError as error:
            if error.status == 404:
                return True
            raise
        return str(found.metadata.uid) != pod.uid if found.metadata else True

    def set_unschedulable(self, node: str, unschedulable: bool, sleep_reason: str | None = None) -> None:
        """Cordon or uncordon `node`; a 409 conflict (another writer got there first) is retried."""
        body: dict[str, Any] = {"spec": {"unschedulable": unschedulable},
                                "metadata": {"annotations": {SLEEP_ANNOTATION: sleep_reason}}}
        self._call(f"{'cordon' if unschedulable else 'uncordon'} {node}", self._core.patch_node, node, body,
                   _content_type="application/strategic-merge-patch+json")

    def node_annotations(self, node: str) -> dict[str, str]:
        found = self._call(f"read node {node}", self._core.read_node, node)
        return dict(found.metadata.annotations or {}) if found.metadata else {}

    def ready_nodes(self) -> set[str]:
        """Nodes whose Ready condition is True."""
        found = self._call("list nodes", self._core.list_node)
        ready = set()
        for node in found.items:
            conditions = node.status.conditions if node.status and node.status.conditions else []
            if node.metadata and any(c.type == "Ready" and c.status == "True" for c in conditions):
                ready.add(str(node.metadata.name))
        return ready

    def evict(self, pods: list[PodInfo]) -> EvictionResult:
        """Evict through the Eviction API (policy/v1). A 429 is a PodDisruptionBudget allowing no disruption
        now: retried with backoff like the other retryable answers, then reported as blocked, never
        forced. 404 (already gone) is fine."""
        evicted, blocked = [], []
        for pod in pods:
            eviction = self._kube.V1Eviction(api_version="policy/v1", kind="Eviction",
                                             metadata=self._kube.V1ObjectMeta(name=pod.name, namespace=pod.namespace))
            try:
                self._call(f"evict {pod.namespace}/{pod.name}", self._core.create_namespaced_pod_eviction,
                           pod.name, pod.namespace, eviction)
                evicted.append(f"{pod.namespace}/{pod.name}")
            except KubeError as error:
                if error.status == 404:
                    continue
                if error.status == 429:
                    blocked.append(f"{pod.namespace}/{pod.name}")
                    continue
                raise
        return EvictionResult(tuple(evicted), tuple(blocked))


def _pod_info(pod: Any) -> PodInfo:
    meta = pod.metadata
    gpus = 0
    for container in (pod.spec.containers if pod.spec and pod.spec.containers else []):
        limits = (container.resources.limits if container.resources else None) or {}
        gpus += int(limits.get(GPU_RESOURCE, 0) or 0)
    owners = meta.owner_references or []
    annotations = dict(meta.annotations or {})
    controller = next((str(o.kind) for o in owners if o.controller), "")
    volumes = (pod.spec.volumes if pod.spec else None) or []
    return PodInfo(uid=str(meta.uid), namespace=str(meta.namespace), name=str(meta.name),
                   phase=str(pod.status.phase if pod.status else "Unknown"), annotations=annotations, gpus=gpus,
                   node=str(pod.spec.node_name or "") if pod.spec else "",
                   daemonset=controller == "DaemonSet",
                   mirror="kubernetes.io/config.mirror" in annotations,
                   controller=controller, empty_dir=any(v.empty_dir is not None for v in volumes))


def _reason(error: Any) -> str:
    """The API server's Status message when there is one, else the HTTP reason."""
    import json

    body = getattr(error, "body", None)
    if body:
        try:
            message = json.loads(body).get("message")
        except (ValueError, AttributeError):
            message = None
        if message:
            return str(message)
    return str(getattr(error, "reason", None) or error)


def _unreachable(error: Exception) -> str:
    """urllib3's long exception text cut to its cause ("Connection refused", "timed out")."""
    reason = getattr(error, "reason", None) or error
    text = str(reason)
    return text.rsplit(": ", 1)[-1] if "Failed to establish a new connection" in text else text
