"""The kubelet's PodResources API (k8s.io/kubelet/pkg/apis/podresources/v1) on a Unix socket for tests:
a real gRPC server (grpcio) answering `/v1.PodResourcesLister/List` with the v1 messages encoded by
field number, as the kubelet sends them (cpu_ids packed, a NUMA topology, memory: fields greengpu
does not read, so its decoder must skip them). Other methods of the service are UNIMPLEMENTED, as on
a kubelet without them."""

from __future__ import annotations

from concurrent import futures
from pathlib import Path

import grpc


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _field(number: int, payload: bytes) -> bytes:
    """A length-delimited field (wire type 2)."""
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def _string(number: int, text: str) -> bytes:
    return _field(number, text.encode())


def container_devices(resource: str, device_ids: list[str], numa_node: int = 0) -> bytes:
    """ContainerDevices {resource_name = 1; repeated device_ids = 2; TopologyInfo topology = 3}."""
    topology = _field(1, _varint(1 << 3 | 0) + _varint(numa_node))  # TopologyInfo {repeated NUMANode nodes = 1}
    return (_string(1, resource) + b"".join(_string(2, d) for d in device_ids) + _field(3, topology))


def container(name: str, devices: list[bytes], cpu_ids: list[int] = (0, 1)) -> bytes:  # type: ignore[assignment]
    """ContainerResources {name = 1; repeated ContainerDevices devices = 2; repeated int64 cpu_ids = 3 (packed);
    repeated ContainerMemory memory = 4}."""
    memory = _string(1, "memory") + _varint(2 << 3 | 0) + _varint(1 << 30)  # ContainerMemory {type, size}
    return (_string(1, name) + b"".join(_field(2, d) for d in devices)
            + _field(3, b"".join(_varint(c) for c in cpu_ids)) + _field(4, memory))


def pod_resources(namespace: str, name: str, containers: list[bytes]) -> bytes:
    """PodResources {name = 1; namespace = 2; repeated ContainerResources containers = 3}."""
    return _string(1, name) + _string(2, namespace) + b"".join(_field(3, c) for c in containers)


class FakePodResources:
    """`pods`: encoded PodResources messages, answered by List as ListPodResourcesResponse {pod_resources = 1}."""

    def __init__(self, socket_path: Path) -> None:
        self.socket_path = socket_path
        self.pods: list[bytes] = []
        self.calls = 0
        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))

        def list_pods(request: bytes, context: grpc.ServicerContext) -> bytes:
            self.calls += 1
            if request:  # ListPodResourcesRequest has no fields: anything else is not this API's request
                context.abort(grpc.StatusCode.INVALID_ARGUMENT, "unexpected ListPodResourcesRequest fields")
            return b"".join(_field(1, pod) for pod in self.pods)

        handler = grpc.method_handlers_generic_handler("v1.PodResourcesLister", {
            "List": grpc.unary_unary_rpc_method_handler(list_pods, request_deserializer=lambda b: b,
                                                        response_serializer=lambda b: b)})
        self._server.add_generic_rpc_handlers((handler,))
        self._server.add_insecure_port(f"unix://{socket_path}")

    def __enter__(self) -> FakePodResources:
        self._server.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.stop(grace=None)
