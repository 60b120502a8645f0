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
from types import ModuleType
from typing import TYPE_CHECKING, TypeVar

from greengpu.backends.kube_pod_sharing import modelled, with_profile
from greengpu.json_types import JsonObject

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
T = TypeVar("T")


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
    gpu_profile: str = ""  # a MIG profile or `timeslice` (greengpu.backends.kube_pod_sharing)
    gpu_problem: str = ""  # why its GPU resources name no single device kind: the pod is not demand


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


def _client() -> ModuleType:
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
        self.api_client = api_client
        self._timeout_s = timeout_s
        self._sleep = sleep
        self.retries_done = 0
        """Calls sent again after a retryable answer (for tests and logs)."""

    def coordination(self) -> client.CoordinationV1Api:
        """The coordination.k8s.io/v1 API on the same connection (Leases: greengpu.backends.kube_lease)."""
        api: client.CoordinationV1Api = self._kube.CoordinationV1Api(self.api_client)
        return api

    def _call(self, what: str, call: Callable[..., T], *args: object, retry: frozenset[int] = RETRYABLE,
              **kwargs: object) -> T:
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

    call = _call  # the public name: kube_lease and kube_sharing call through it

    def pods_on_node(self, node: str) -> list[PodInfo]:
        """Pods scheduled on `node` (all namespaces)."""
        return self._pods(f"spec.nodeName={node}")

    def pending_gpu_pods(self) -> list[PodInfo]:
        """Pods not yet scheduled that request GPUs: the demand a sleeping node may be woken for.

        Read from the API server's watch cache (resourceVersion=0), not a quorum read of etcd: every
        node agent asks this each tick, and a pending pod seen a moment late changes nothing."""
        return modelled([p for p in self._pods("status.phase=Pending", from_cache=True) if not p.node])

    def _pods(self, field_selector: str, from_cache: bool = False) -> list[PodInfo]:
        pods = self._call("list pods", self._core.list_pod_for_all_namespaces, field_selector=field_selector,
                          resource_version="0" if from_cache else None)
        return [with_profile(_pod_info(p, p.metadata), p) for p in pods.items if p.metadata is not None]

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
        body: JsonObject = {"spec": {"unschedulable": unschedulable},
                                "metadata": {"annotations": {SLEEP_ANNOTATION: sleep_reason}}}
        self._call(f"{'cordon' if unschedulable else 'uncordon'} {node}", self._core.patch_node, node, body,
                   _content_type="application/strategic-merge-patch+json")

    def node_annotations(self, node: str) -> dict[str, str]:
        found = self._call(f"read node {node}", self._core.read_node, node)
        return dict(found.metadata.annotations or {}) if found.metadata else {}

    def node_internal_ip(self, node: str) -> str:
        """The node's InternalIP (where its host-network agent listens); LookupError when it has none."""
        found = self._call(f"read node {node}", self._core.read_node, node)
        addresses = found.status.addresses if found.status and found.status.addresses else []
        for address in addresses:
            if address.type == "InternalIP":
                return str(address.address)
        raise LookupError(f"node {node} reports no InternalIP")

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


def _pod_info(pod: client.V1Pod, meta: client.V1ObjectMeta) -> PodInfo:
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


def _reason(error: Exception) -> str:
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


# --- the kubelet's PodResources API (which pod holds which device) --------------------------------

POD_RESOURCES_SOCKET = "/var/lib/kubelet/pod-resources/kubelet.sock"
POD_RESOURCES_LIST = "/v1.PodResourcesLister/List"
"""k8s.io/kubelet/pkg/apis/podresources/v1: service PodResourcesLister, rpc List."""


@dataclass(frozen=True)
class PodDevices:
    namespace: str
    name: str
    device_ids: dict[str, tuple[str, ...]]
    """resource name (nvidia.com/gpu) -> device IDs the kubelet allocated (GPU or MIG UUIDs)."""


class PodResources:
    """The kubelet's PodResources API over its Unix socket (gRPC): for each pod on this node, the device
    IDs it was allocated. With the NVIDIA device plugin a GPU's ID is its UUID, which NVML reports too,
    so GPU -> pod needs no access to other processes (no hostPID), only the kubelet's socket.

    The messages are decoded by hand (a few fields of a stable v1 API), so no generated code and no
    protobuf runtime are needed; grpcio (the `kube` extra) carries the call."""

    def __init__(self, socket_path: str = POD_RESOURCES_SOCKET, timeout_s: float = 5.0) -> None:
        try:
            import grpc
        except ImportError:
            raise KubeMissing() from None
        self._grpc = grpc
        self.socket_path = socket_path
        self._channel = grpc.insecure_channel(f"unix://{socket_path}")
        self._list = self._channel.unary_unary(POD_RESOURCES_LIST, request_serializer=lambda _: b"",
                                               response_deserializer=decode_list_response)
        self._timeout_s = timeout_s

    def list(self) -> list[PodDevices]:
        try:
            pods: list[PodDevices] = self._list(None, timeout=self._timeout_s)
        except self._grpc.RpcError as error:
            raise KubeError(None, f"kubelet PodResources at {self.socket_path}: {error.code().name}: "
                                  f"{error.details()}") from None
        return pods

    def pods_by_device(self, resource: str = GPU_RESOURCE) -> dict[str, tuple[str, str]]:
        """Device ID -> (namespace, pod name) for `resource`."""
        return {device: (pod.namespace, pod.name) for pod in self.list()
                for device in pod.device_ids.get(resource, ())}

    def close(self) -> None:
        self._channel.close()


def decode_list_response(data: bytes) -> list[PodDevices]:
    """ListPodResourcesResponse {repeated PodResources pod_resources = 1}; PodResources {string name = 1;
    string namespace = 2; repeated ContainerResources containers = 3}; ContainerResources {string name = 1;
    repeated ContainerDevices devices = 2; ...}; ContainerDevices {string resource_name = 1; repeated
    string device_ids = 2; ...}. Unknown fields are skipped, as protobuf does."""
    pods = []
    for number, value in _fields(data):
        if number != 1 or not isinstance(value, bytes):
            continue
        name = namespace = ""
        devices: dict[str, list[str]] = {}
        for pod_field, pod_value in _fields(value):
            if pod_field == 1 and isinstance(pod_value, bytes):
                name = pod_value.decode()
            elif pod_field == 2 and isinstance(pod_value, bytes):
                namespace = pod_value.decode()
            elif pod_field == 3 and isinstance(pod_value, bytes):
                for container_field, container_value in _fields(pod_value):
                    if container_field == 2 and isinstance(container_value, bytes):
                        resource, ids = _container_devices(container_value)
                        devices.setdefault(resource, []).extend(ids)
        pods.append(PodDevices(namespace, name, {k: tuple(v) for k, v in devices.items()}))
    return pods


def _container_devices(data: bytes) -> tuple[str, list[str]]:
    resource, ids = "", []
    for number, value in _fields(data):
        if number == 1 and isinstance(value, bytes):
            resource = value.decode()
        elif number == 2 and isinstance(value, bytes):
            ids.append(value.decode())
    return resource, ids


def _fields(data: bytes) -> list[tuple[int, int | bytes]]:
    """Protobuf wire format -> (field number, varint or bytes); fixed-width fields kept as bytes."""
    out: list[tuple[int, int | bytes]] = []
    position = 0
    while position < len(data):
        key, position = _varint(data, position)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, position = _varint(data, position)
            out.append((number, value))
        elif wire == 2:
            length, position = _varint(data, position)
            if position + length > len(data):
                raise ValueError("protobuf: a field runs past the end of the message")
            out.append((number, data[position:position + length]))
            position += length
        elif wire in (1, 5):
            width = 8 if wire == 1 else 4
            out.append((number, data[position:position + width]))
            position += width
        else:
            raise ValueError(f"protobuf: unsupported wire type {wire}")
    return out


def _varint(data: bytes, position: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if position >= len(data) or shift > 63:
            raise ValueError("protobuf: truncated varint")
        byte = data[position]
        position += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, position
        shift += 7
