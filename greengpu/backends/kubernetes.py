"""Kubernetes adapter on the official `kubernetes` client: the few API calls greengpu makes.

Translates, never decides. Pods on a node (for the agent: which pod, with which class annotation,
owns a GPU process); cordon and uncordon; evictions (the Eviction API, so PodDisruptionBudgets are
honoured: a blocked eviction is HTTP 429 and is reported, never forced); pending pods that request
`nvidia.com/gpu`; node readiness. Connection: in-cluster service account when running in a pod,
else the kubeconfig, else an explicit `host` (tests point it at an in-process API server on loopback).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kubernetes import client, config

CLASS_ANNOTATION = "greengpu.io/class"
SLEEP_ANNOTATION = "greengpu.io/sleep"
"""Set on a node greengpu cordoned for sleep, so that it uncordons only nodes it cordoned itself."""
GPU_RESOURCE = "nvidia.com/gpu"
CONFLICT_RETRIES = 3


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


@dataclass(frozen=True)
class EvictionResult:
    evicted: tuple[str, ...]
    blocked: tuple[str, ...]
    """Pods a PodDisruptionBudget protected (HTTP 429): the drain did not finish."""


class KubeError(Exception):
    """The API server refused or failed a call; carries the HTTP status."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"Kubernetes API: HTTP {status}: {message}")
        self.status = status


def make_api_client(host: str | None = None, kubeconfig: str | None = None) -> client.ApiClient:
    """An API client: explicit `host` (no auth), else in-cluster, else the kubeconfig."""
    if host is not None:
        configuration = client.Configuration(host=host)
        return client.ApiClient(configuration)
    try:
        config.load_incluster_config()  # type: ignore[no-untyped-call]
    except config.ConfigException:
        config.load_kube_config(config_file=kubeconfig)  # type: ignore[no-untyped-call]
    return client.ApiClient()


class KubeApi:
    def __init__(self, api_client: client.ApiClient, timeout_s: float = 10.0) -> None:
        self._core = client.CoreV1Api(api_client)
        self._timeout_s = timeout_s

    def pods_on_node(self, node: str) -> list[PodInfo]:
        """Pods scheduled on `node` (all namespaces)."""
        return self._pods(f"spec.nodeName={node}")

    def pending_gpu_pods(self) -> list[PodInfo]:
        """Pods not yet scheduled that request GPUs: the demand a sleeping node may be woken for.

        Read from the API server's watch cache (resourceVersion=0), not a quorum read of etcd: every
        node agent asks this each tick, and a pending pod seen a moment late changes nothing."""
        return [p for p in self._pods("status.phase=Pending", from_cache=True) if p.gpus > 0 and not p.node]

    def _pods(self, field_selector: str, from_cache: bool = False) -> list[PodInfo]:
        try:
            pods = self._core.list_pod_for_all_namespaces(field_selector=field_selector,
                                                          resource_version="0" if from_cache else None,
                                                          _request_timeout=self._timeout_s)
        except client.ApiException as error:
            raise KubeError(int(error.status or 0), _reason(error)) from error
        return [_pod_info(p) for p in pods.items if p.metadata is not None]

    def set_unschedulable(self, node: str, unschedulable: bool, sleep_reason: str | None = None) -> None:
        """Cordon or uncordon `node`; a 409 conflict (another writer got there first) is retried."""
        body: dict[str, Any] = {"spec": {"unschedulable": unschedulable},
                                "metadata": {"annotations": {SLEEP_ANNOTATION: sleep_reason}}}
        for attempt in range(CONFLICT_RETRIES + 1):
            try:
                self._core.patch_node(node, body, _content_type="application/strategic-merge-patch+json",
                                      _request_timeout=self._timeout_s)
                return
            except client.ApiException as error:
                if error.status == 409 and attempt < CONFLICT_RETRIES:
                    continue
                raise KubeError(int(error.status or 0), _reason(error)) from error

    def node_annotations(self, node: str) -> dict[str, str]:
        try:
            found = self._core.read_node(node, _request_timeout=self._timeout_s)
        except client.ApiException as error:
            raise KubeError(int(error.status or 0), _reason(error)) from error
        return dict(found.metadata.annotations or {}) if found.metadata else {}

    def ready_nodes(self) -> set[str]:
        """Nodes whose Ready condition is True."""
        try:
            found = self._core.list_node(_request_timeout=self._timeout_s)
        except client.ApiException as error:
            raise KubeError(int(error.status or 0), _reason(error)) from error
        ready = set()
        for node in found.items:
            conditions = node.status.conditions if node.status and node.status.conditions else []
            if node.metadata and any(c.type == "Ready" and c.status == "True" for c in conditions):
                ready.add(str(node.metadata.name))
        return ready

    def evict(self, pods: list[PodInfo]) -> EvictionResult:
        """Evict through the Eviction API; 429 (a PodDisruptionBudget) is reported, 404 (gone) is fine."""
        evicted, blocked = [], []
        for pod in pods:
            eviction = client.V1Eviction(metadata=client.V1ObjectMeta(name=pod.name, namespace=pod.namespace))
            try:
                self._core.create_namespaced_pod_eviction(pod.name, pod.namespace, eviction,
                                                          _request_timeout=self._timeout_s)
                evicted.append(f"{pod.namespace}/{pod.name}")
            except client.ApiException as error:
                if error.status == 404:
                    continue
                if error.status == 429:
                    blocked.append(f"{pod.namespace}/{pod.name}")
                    continue
                raise KubeError(int(error.status or 0), _reason(error)) from error
        return EvictionResult(tuple(evicted), tuple(blocked))


def _pod_info(pod: Any) -> PodInfo:
    meta = pod.metadata
    gpus = 0
    for container in (pod.spec.containers if pod.spec and pod.spec.containers else []):
        limits = (container.resources.limits if container.resources else None) or {}
        gpus += int(limits.get(GPU_RESOURCE, 0) or 0)
    owners = meta.owner_references or []
    annotations = dict(meta.annotations or {})
    return PodInfo(uid=str(meta.uid), namespace=str(meta.namespace), name=str(meta.name),
                   phase=str(pod.status.phase if pod.status else "Unknown"), annotations=annotations, gpus=gpus,
                   node=str(pod.spec.node_name or "") if pod.spec else "",
                   daemonset=any(o.kind == "DaemonSet" for o in owners),
                   mirror="kubernetes.io/config.mirror" in annotations)


def _reason(error: Any) -> str:
    return str(getattr(error, "reason", None) or getattr(error, "body", None) or error)
