"""Kubernetes adapter on the official `kubernetes` client: the few API calls greengpu makes.

Translates, never decides. Pods on a node (for the agent: which pod, with which class annotation,
owns a GPU process). Connection: in-cluster service account when running in a pod, else the
kubeconfig, else an explicit `host` (tests point it at an in-process API server on loopback).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kubernetes import client, config

CLASS_ANNOTATION = "greengpu.io/class"


@dataclass(frozen=True)
class PodInfo:
    uid: str
    namespace: str
    name: str
    phase: str
    annotations: dict[str, str] = field(default_factory=dict)


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
        try:
            pods = self._core.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={node}",
                                                          _request_timeout=self._timeout_s)
        except client.ApiException as error:
            raise KubeError(int(error.status or 0), _reason(error)) from error
        return [PodInfo(uid=str(meta.uid), namespace=str(meta.namespace), name=str(meta.name),
                        phase=str(p.status.phase if p.status else "Unknown"), annotations=dict(meta.annotations or {}))
                for p in pods.items if (meta := p.metadata) is not None]


def _reason(error: Any) -> str:
    return str(getattr(error, "reason", None) or getattr(error, "body", None) or error)
