"""Kubernetes sleep and wake against an in-process API server on loopback (real HTTP, the real API's
status codes): cordon and drain with PodDisruptionBudgets, wake for pending GPU pods through the core,
uncordon after a verified wake, 409 conflicts retried."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
from fake_kube import FakeKube, node, pod
from inventories import a100_type, wol_node, write_inventory
from manual_clock import ManualClock

from greengpu.backends.kubernetes import SLEEP_ANNOTATION, KubeApi, KubeError, make_api_client
from greengpu.backends.wol import Waker
from greengpu.config.inventory import load_cluster
from greengpu.config.policy import load_policy
from greengpu.control.kube_sleep import KubeSleep
from greengpu.control.sleep_control import SleepControl
from greengpu.control.state_store import StateStore


@pytest.fixture
def kube() -> FakeKube:
    with FakeKube() as server:
        server.nodes = {name: node(name) for name in ("gpu1", "gpu2", "gpu3", "gpu4")}
        yield server


def setup(tmp_path: Path, kube: FakeKube, port: int) -> tuple[KubeSleep, list[str], ManualClock]:
    inventory = write_inventory(tmp_path / "cluster.yaml",
                                {"big": a100_type(), "small": a100_type(gpus=4, host_idle_w=300)},
                                [wol_node("gpu[1-2]", "big", "02:00:5e:20:00:01", port),
                                 wol_node("gpu[3-4]", "small", "02:00:5e:20:00:03", port)])
    cluster = load_cluster(inventory)
    clock = ManualClock()
    policy = load_policy("default")
    control = SleepControl(StateStore(tmp_path / "state.db"), Waker(cluster), policy.sleep, clock=clock)
    suspended: list[str] = []
    api = KubeApi(make_api_client(host=kube.url))
    return KubeSleep(api, control, cluster, policy, suspend=suspended.append), suspended, clock


def test_a_node_with_gpu_pods_is_never_put_to_sleep(tmp_path: Path, kube: FakeKube, udp: socket.socket) -> None:
    kube.pods = [pod("train-0", "u1", "gpu1", gpus=2)]
    sleeper, suspended, _ = setup(tmp_path, kube, udp.getsockname()[1])
    outcome = sleeper.sleep("gpu1", "idle 900 s")
    assert not outcome.slept and "GPU pods run there (default/train-0)" in outcome.message
    assert suspended == [] and "unschedulable" not in kube.nodes["gpu1"]["spec"]


def test_drain_respects_pod_disruption_budgets(tmp_path: Path, kube: FakeKube, udp: socket.socket) -> None:
    kube.pods = [pod("web-0", "u2", "gpu2", gpus=0, labels={"app": "web"}),
                 pod("agent", "u3", "gpu2", gpus=0, daemonset=True)]
    kube.pdbs = [{"selector": {"app": "web"}, "disruptions_allowed": 0}]
    sleeper, suspended, _ = setup(tmp_path, kube, udp.getsockname()[1])
    outcome = sleeper.sleep("gpu2", "idle 900 s")
    assert not outcome.slept
    assert "a PodDisruptionBudget blocks evicting default/web-0; uncordoned" in outcome.message
    assert kube.nodes["gpu2"]["spec"]["unschedulable"] is False and suspended == []
    assert ("POST", "/api/v1/namespaces/default/pods/web-0/eviction") in kube.requests
    assert len(kube.pods) == 2  # nothing forced

    kube.pdbs[0]["disruptions_allowed"] = 1
    outcome = sleeper.sleep("gpu2", "idle 900 s")
    assert outcome.slept and "after evicting default/web-0" in outcome.message
    assert [p["metadata"]["name"] for p in kube.pods] == ["agent"]  # the DaemonSet pod stays
    assert kube.nodes["gpu2"]["spec"]["unschedulable"] is True
    assert kube.nodes["gpu2"]["metadata"]["annotations"][SLEEP_ANNOTATION] == "idle 900 s"
    assert suspended == ["gpu2"]
    assert all(t == "application/strategic-merge-patch+json" for t in kube.patch_types)


def test_conflicts_are_retried_and_missing_nodes_reported(tmp_path: Path, kube: FakeKube, udp: socket.socket) -> None:
    sleeper, suspended, _ = setup(tmp_path, kube, udp.getsockname()[1])
    kube.conflicts = 2
    assert sleeper.sleep("gpu3", "idle").slept
    assert sum(1 for method, _ in kube.requests if method == "PATCH") == 3
    with pytest.raises(KubeError, match='HTTP 404'):
        sleeper.api.set_unschedulable("gpu9", True)


def test_pending_gpu_pods_wake_the_fewest_nodes_then_uncordon(tmp_path: Path, kube: FakeKube,
                                                             udp: socket.socket) -> None:
    sleeper, suspended, clock = setup(tmp_path, kube, udp.getsockname()[1])
    for name in ("gpu1", "gpu2", "gpu3", "gpu4"):
        assert sleeper.sleep(name, "night").slept
    # A pending 4-GPU pod fits the tightest node (a 4-GPU one); an 8-GPU pod needs a whole big node.
    kube.pods = [pod("small-0", "u4", "", gpus=4, phase="Pending"),
                 pod("big-0", "u5", "", gpus=8, phase="Pending"),
                 pod("cpu-0", "u6", "", gpus=0, phase="Pending")]
    woken = sleeper.wake_for_pending(clock())
    assert sorted(woken) == ["gpu1", "gpu3"]
    macs = sorted(udp.recvfrom(4096)[0][6:12].hex(":") for _ in woken)
    assert macs == ["02:00:5e:20:00:01", "02:00:5e:20:00:03"]
    assert sleeper.wake_for_pending(clock()) == []  # already waking: the core counts on them, no new wake

    for name in ("gpu1", "gpu3"):
        kube.nodes[name]["status"]["conditions"][0]["status"] = "Unknown"
    for name in ("gpu2", "gpu4"):
        kube.nodes[name]["status"]["conditions"][0]["status"] = "Unknown"
    clock.now_s += 60
    assert sleeper.verify() == []  # not Ready yet, deadline not reached
    kube.nodes["gpu1"]["status"]["conditions"][0]["status"] = "True"
    kube.nodes["gpu3"]["status"]["conditions"][0]["status"] = "True"
    clock.now_s += 120
    lines = sleeper.verify()
    assert any(line.startswith("gpu1: up") for line in lines) and "gpu1: uncordoned" in lines
    assert "gpu3: uncordoned" in lines
    assert kube.nodes["gpu1"]["spec"]["unschedulable"] is False
    assert SLEEP_ANNOTATION not in kube.nodes["gpu1"]["metadata"]["annotations"]
    assert kube.nodes["gpu2"]["spec"]["unschedulable"] is True  # still asleep, still cordoned
