"""A node's GPU sharing read from the GPU Operator's labels and resources, through the loopback Kubernetes
API server (tests/helpers/fake_kube.py), and compared with the inventory's declaration; a pod's MIG
resource as its job's `gpu_profile`."""

from __future__ import annotations

import pytest
from fake_kube import FakeKube, node

from greengpu.backends.gpu_sharing import DeclaredSharing, sharing_disagreements
from greengpu.backends.kube_sharing import SharingReadError, pod_gpu_profile, read_nodes_sharing
from greengpu.backends.kubernetes import KubeApi, make_api_client

MIXED = node("mig-mixed", labels={"nvidia.com/mig.strategy": "mixed", "nvidia.com/mig.config": "all-balanced",
                                  "nvidia.com/mig.config.state": "success", "nvidia.com/gpu.count": "4"},
             capacity={"nvidia.com/mig-1g.5gb": "8", "nvidia.com/mig-2g.10gb": "4", "nvidia.com/mig-3g.20gb": "4",
                       "nvidia.com/gpu": "0", "cpu": "64"})
SINGLE = node("mig-single", labels={"nvidia.com/mig.strategy": "single", "nvidia.com/mig.config": "all-1g.5gb",
                                    "nvidia.com/gpu.product": "A100-SXM4-40GB-MIG-1g.5gb",
                                    "nvidia.com/gpu.count": "28"},
              capacity={"nvidia.com/gpu": "28"})
SLICED = node("dev", labels={"nvidia.com/gpu.sharing-strategy": "time-slicing", "nvidia.com/gpu.replicas": "4",
                             "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB-SHARED", "nvidia.com/gpu.count": "4",
                             "nvidia.com/mig.strategy": "none", "nvidia.com/mig.config": "all-disabled"},
              capacity={"nvidia.com/gpu": "16"})
PLAIN = node("cpu-only")


def _readings() -> dict[str, object]:
    with FakeKube() as kube:
        kube.nodes = {n["metadata"]["name"]: n for n in (MIXED, SINGLE, SLICED, PLAIN)}
        api = KubeApi(make_api_client(host=kube.url), sleep=lambda s: None)
        return {r.node: r for r in read_nodes_sharing(api)}


def test_labels_and_resources_become_the_typed_reading() -> None:
    seen = _readings()
    mixed, single, sliced, plain = seen["mig-mixed"], seen["mig-single"], seen["dev"], seen["cpu-only"]
    assert dict(mixed.mig_devices) == {"1g.5gb": 8, "2g.10gb": 4, "3g.20gb": 4}
    assert (mixed.mig_strategy, mixed.mig_config, mixed.mig_gpus, mixed.unknown) == ("mixed", "all-balanced", None, ())
    assert dict(single.mig_devices) == {"1g.5gb": 28} and single.mig_strategy == "single"
    assert (sliced.timeslice_gpus, sliced.timeslice_replicas, sliced.mig_gpus) == (4, 4, 0)
    assert (plain.mig_gpus, plain.timeslice_gpus, dict(plain.mig_devices)) == (0, 0, {})


def test_the_live_nodes_against_the_inventory() -> None:
    seen = list(_readings().values())
    declared = {
        "mig-mixed": DeclaredSharing(mig_gpus=4, profiles=frozenset({"1g.5gb", "2g.10gb", "3g.20gb"})),
        "mig-single": DeclaredSharing(mig_gpus=4, profiles=frozenset({"2g.10gb"})),
        "dev": DeclaredSharing(timeslice_gpus=4, timeslice_replicas=2),
        "cpu-only": DeclaredSharing(mig_gpus=1, profiles=frozenset({"1g.5gb"})),
    }
    lines = sharing_disagreements(declared, seen)
    assert lines == [
        "cpu-only: 0 GPUs in MIG mode, the inventory declares 1",
        "dev: time-slicing 4 replicas per GPU, the inventory declares 2",
        "mig-single: MIG devices 28 x 1g.5gb not among the inventory's profiles (2g.10gb)",
    ]


def test_a_pending_or_failed_mig_manager_is_said() -> None:
    pending = node("p", labels={"nvidia.com/mig.strategy": "mixed", "nvidia.com/mig.config.state": "pending"})
    failed = node("f", labels={"nvidia.com/mig.strategy": "mixed", "nvidia.com/mig.config": "all-3g.20gb",
                               "nvidia.com/mig.config.state": "failed"})
    with FakeKube() as kube:
        kube.nodes = {"p": pending, "f": failed}
        seen = read_nodes_sharing(KubeApi(make_api_client(host=kube.url), sleep=lambda s: None))
    lines = sharing_disagreements({"p": DeclaredSharing(), "f": DeclaredSharing()}, seen)
    assert lines[0] == "f: nvidia.com/mig.config.state=failed: the MIG Manager could not apply all-3g.20gb"
    assert lines[1].startswith("p: a MIG change is pending")


def test_a_pods_mig_resource_is_its_jobs_gpu_profile() -> None:
    assert pod_gpu_profile({"nvidia.com/mig-1g.5gb": "1", "cpu": "2"}) == "1g.5gb"
    assert pod_gpu_profile({"nvidia.com/mig-3g.20gb": 1}) == "3g.20gb"
    assert pod_gpu_profile({"nvidia.com/gpu.shared": "1"}) == "timeslice"
    assert pod_gpu_profile({"nvidia.com/gpu": "2"}) is None
    assert pod_gpu_profile({"memory": "1Gi"}) is None
    with pytest.raises(SharingReadError, match="one kind of GPU device"):
        pod_gpu_profile({"nvidia.com/mig-1g.5gb": "1", "nvidia.com/gpu": "1"})
    with pytest.raises(SharingReadError, match="not a whole number"):
        pod_gpu_profile({"nvidia.com/mig-1g.5gb": "1.5"})
    with pytest.raises(SharingReadError, match="not a MIG profile"):
        pod_gpu_profile({"nvidia.com/mig-huge": "1"})
