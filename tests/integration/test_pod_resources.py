"""GPU -> pod from the kubelet's PodResources API: a real gRPC call over a Unix socket to a fake kubelet
that answers with the v1 messages, and the agent's Kubernetes class source using it with no access to
other processes (no /proc reading: the cgroup path is never consulted)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

try:
    import grpc  # noqa: F401  (the kube extra)
except ImportError:
    if os.environ.get("CI"):
        raise
    pytest.skip("grpcio (the kube extra) is not installed", allow_module_level=True)

from fake_kube import FakeKube, pod  # noqa: E402
from fake_podresources import FakePodResources, container, container_devices, pod_resources  # noqa: E402

from greengpu.backends.kubernetes import (  # noqa: E402
    GPU_RESOURCE,
    KubeApi,
    KubeError,
    PodResources,
    decode_list_response,
    make_api_client,
)
from greengpu.backends.nvml import NvmlBackend  # noqa: E402
from greengpu.control.agent.agent_main import fake_backend  # noqa: E402
from greengpu.control.agent.jobclass import KubernetesPods  # noqa: E402


@pytest.fixture
def kubelet(tmp_path: Path) -> FakePodResources:
    with FakePodResources(tmp_path / "kubelet.sock") as server:
        yield server


def test_the_list_answer_is_decoded_field_by_field(kubelet: FakePodResources) -> None:
    kubelet.pods = [
        pod_resources("ml", "train-0", [container("main", [container_devices(GPU_RESOURCE, ["GPU-aa", "GPU-bb"]),
                                                          container_devices("rdma/hca", ["mlx5_0"])]),
                                        container("sidecar", [])]),
        pod_resources("web", "api-1", [container("main", [])]),
    ]
    client = PodResources(str(kubelet.socket_path))
    pods = client.list()
    assert [(p.namespace, p.name) for p in pods] == [("ml", "train-0"), ("web", "api-1")]
    assert pods[0].device_ids == {GPU_RESOURCE: ("GPU-aa", "GPU-bb"), "rdma/hca": ("mlx5_0",)}
    assert client.pods_by_device() == {"GPU-aa": ("ml", "train-0"), "GPU-bb": ("ml", "train-0")}
    client.close()
    with pytest.raises(ValueError, match="runs past the end"):
        decode_list_response(b"\x0a\x05ab")  # a truncated message is an error, never a partial answer


def test_no_kubelet_socket_is_one_line(tmp_path: Path) -> None:
    client = PodResources(str(tmp_path / "absent.sock"), timeout_s=1.0)
    with pytest.raises(KubeError, match=r"unreachable: kubelet PodResources at .*absent.sock: UNAVAILABLE"):
        client.list()
    client.close()


def test_the_agent_maps_gpus_to_pods_by_uuid(tmp_path: Path, kubelet: FakePodResources) -> None:
    backend: NvmlBackend = fake_backend("3xA100", busy=[0, 1])
    backend.open()
    readings = [backend.read(i) for i in range(3)]
    kubelet.pods = [pod_resources("ml", "serve-0", [container("main", [container_devices(GPU_RESOURCE,
                                                                                         [readings[1].uuid])])])]
    with FakeKube() as kube:
        kube.pods = [pod("serve-0", "u1", "gpu01", namespace="ml", annotations={"greengpu.io/class": "inference"})]
        api = KubeApi(make_api_client(host=kube.url))
        source = KubernetesPods("gpu01", api.pods_on_node, "training", proc_root=tmp_path / "no-proc",
                                pods_by_gpu_uuid=PodResources(str(kubelet.socket_path)).pods_by_device)
        jobs = source.jobs(readings)
    # GPU 1 is the pod's (by UUID); GPU 0 works for nobody Kubernetes knows: the default class, as before.
    assert {i: (j.job_id, j.job_class, j.tenant) for i, j in jobs.items()} == {
        0: (f"pid:{readings[0].pids[0]}", "training", ""), 1: ("ml/serve-0", "inference", "ml")}
    assert kubelet.calls == 1
    backend.close()
