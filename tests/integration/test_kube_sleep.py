"""Kubernetes sleep and wake against an in-process API server on loopback (real HTTP, the real API's
status codes): cordon and drain as `kubectl drain` does (PodDisruptionBudgets, bare and emptyDir pods,
waiting for termination), wake for pending GPU pods through the core, uncordon after a verified wake,
409/429/500 retried with a bounded exponential backoff, and the API server's refusals kept strict."""

from __future__ import annotations

import json
import socket
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from fake_kube import FakeKube, node, pod
from inventories import a100_type, wol_node, write_inventory
from manual_clock import ManualClock

from greengpu.backends.kubernetes import SLEEP_ANNOTATION, KubeApi, KubeError, make_api_client
from greengpu.backends.wol import Waker
from greengpu.config.inventory import load_cluster
from greengpu.config.policy import load_policy
from greengpu.control.hooks.kube_sleep import KubeSleep
from greengpu.control.hooks.sleep_control import SleepControl
from greengpu.control.hooks.state_store import StateStore


@pytest.fixture
def kube() -> FakeKube:
    with FakeKube() as server:
        server.nodes = {name: node(name) for name in ("gpu1", "gpu2", "gpu3", "gpu4")}
        yield server


BACKOFFS: list[float] = []


def setup(tmp_path: Path, kube: FakeKube, port: int, drain_timeout_s: float = 5.0
          ) -> tuple[KubeSleep, list[str], ManualClock]:
    inventory = write_inventory(tmp_path / "cluster.yaml",
                                {"big": a100_type(), "small": a100_type(gpus=4, host_idle_w=300)},
                                [wol_node("gpu[1-2]", "big", "02:00:5e:20:00:01", port),
                                 wol_node("gpu[3-4]", "small", "02:00:5e:20:00:03", port)])
    cluster = load_cluster(inventory)
    clock = ManualClock()
    policy = load_policy("default")
    control = SleepControl(StateStore(tmp_path / "state.db"), Waker(cluster), policy.sleep, clock=clock)
    suspended: list[str] = []
    BACKOFFS.clear()
    api = KubeApi(make_api_client(host=kube.url), sleep=BACKOFFS.append)  # backoffs recorded, not slept

    def suspend(node_name: str) -> None:
        # kubectl drain's order: the node sleeps only once its evicted pods are gone.
        assert not [p for p in kube.pods if p["spec"].get("nodeName") == node_name
                    and "deletionTimestamp" in p["metadata"]], "suspended while pods were terminating"
        suspended.append(node_name)

    sleeper = KubeSleep(api, control, cluster, policy, suspend=suspend, drain_timeout_s=drain_timeout_s,
                        wait=lambda s: time.sleep(0.05))
    return sleeper, suspended, clock


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
    assert BACKOFFS == [0.5, 1.0, 2.0, 4.0]  # the 429 was retried with a doubling backoff, then reported
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
    # The nodes went to sleep just now, but pods wait for them: they wake at once (min_asleep_s holds
    # back only the warm reserve), as in a replay.
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


def test_bare_and_emptydir_pods_stop_the_sleep_unless_forced(tmp_path: Path, kube: FakeKube,
                                                            udp: socket.socket) -> None:
    kube.pods = [pod("debug", "b1", "gpu1", gpus=0, controller=None),
                 pod("cache-0", "b2", "gpu1", gpus=0, empty_dir=True),
                 pod("web-1", "b3", "gpu1", gpus=0)]
    sleeper, suspended, _ = setup(tmp_path, kube, udp.getsockname()[1])
    outcome = sleeper.sleep("gpu1", "idle")
    assert not outcome.slept and suspended == []
    assert outcome.message == ("gpu1: not put to sleep: bare pods that nothing would recreate (default/debug); "
                               "pods whose emptyDir data eviction would delete (default/cache-0) "
                               "(--force evicts them)")
    assert "unschedulable" not in kube.nodes["gpu1"]["spec"] and len(kube.pods) == 3  # nothing touched
    outcome = sleeper.sleep("gpu1", "idle", force=True)
    assert outcome.slept and suspended == ["gpu1"] and kube.pods == []


def test_the_node_sleeps_only_after_evicted_pods_terminate(tmp_path: Path, kube: FakeKube,
                                                          udp: socket.socket) -> None:
    kube.pods = [pod("web-0", "t1", "gpu2", gpus=0), pod("web-1", "t2", "gpu3", gpus=0)]
    kube.termination_s = 0.4  # the pods' grace period
    sleeper, suspended, _ = setup(tmp_path, kube, udp.getsockname()[1])
    started = time.monotonic()
    assert sleeper.sleep("gpu2", "idle").slept  # the suspend callback asserts nothing was still terminating
    assert time.monotonic() - started >= 0.4
    assert any(method == "GET" and path == "/api/v1/namespaces/default/pods/web-0" for method, path in kube.requests)

    kube.termination_s = 30.0  # a pod that will not stop in time: the sleep is called off, node usable again
    sleeper, suspended, _ = setup(tmp_path, kube, udp.getsockname()[1], drain_timeout_s=0.3)
    outcome = sleeper.sleep("gpu3", "idle")
    assert not outcome.slept and suspended == []
    assert outcome.message == "gpu3: not put to sleep: default/web-1 still terminating 0.3 s after eviction; uncordoned"
    assert kube.nodes["gpu3"]["spec"]["unschedulable"] is False


def test_server_errors_are_retried_with_bounded_backoff_then_reported(tmp_path: Path, kube: FakeKube,
                                                                     udp: socket.socket) -> None:
    sleeper, suspended, _ = setup(tmp_path, kube, udp.getsockname()[1])
    kube.server_errors = 2
    assert sleeper.sleep("gpu4", "idle").slept
    assert BACKOFFS == [0.5, 1.0] and sleeper.api.retries_done == 2
    kube.server_errors = 100
    BACKOFFS.clear()
    with pytest.raises(KubeError, match="HTTP 500: list pods: Internal error occurred"):
        sleeper.api.pods_on_node("gpu1")
    assert BACKOFFS == [0.5, 1.0, 2.0, 4.0]  # bounded: four retries, then the error


def test_the_fake_api_server_refuses_what_the_real_one_refuses(kube: FakeKube) -> None:
    api = KubeApi(make_api_client(host=kube.url), sleep=lambda s: None)
    kube.pods = [pod("a", "f1", "gpu1", gpus=0)]
    with pytest.raises(KubeError, match="HTTP 400: list pods: field label not supported: spec.nodename"):
        api._pods("spec.nodename=gpu1")  # a typo is refused, never matched to every pod
    assert [p.name for p in api._pods("spec.nodeName!=gpu2,status.phase=Running")] == ["a"]

    def post(body: object) -> tuple[int, dict[str, object]]:
        request = urllib.request.Request(f"{kube.url}/api/v1/namespaces/default/pods/a/eviction",
                                         data=json.dumps(body).encode(), method="POST",
                                         headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=5) as answer:
                return answer.status, json.loads(answer.read())
        except urllib.error.HTTPError as error:
            return error.code, json.loads(error.read())

    code, answer = post({"apiVersion": "v1", "kind": "DeleteOptions"})
    assert code == 400 and answer["reason"] == "BadRequest"
    code, answer = post({"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "b"}})
    assert code == 400 and answer["message"] == "name in URL does not match name in Eviction object"
    kube.pdbs = [{"name": "a-pdb", "selector": {}, "disruptions_allowed": 0}]
    code, answer = post({"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "a"}})
    assert code == 429 and answer["details"]["causes"][0]["reason"] == "DisruptionBudget"
    kube.pdbs = []
    assert post({"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "a"}})[0] == 201


def test_a_failed_suspend_command_leaves_the_node_awake_uncordoned_and_alerted(tmp_path: Path, kube: FakeKube,
                                                                              udp: socket.socket) -> None:
    """The shipped Deployment's ssh from a pod with no key exits 255: before, the outcome said "cordoned, drained
    and suspended" and the store said asleep. Now the exit code is read: awake, uncordoned, alerted with ssh's words."""
    from greengpu.control.hooks.sleep_control import run_suspend

    kube.pods = [pod("web-0", "u2", "gpu2", gpus=0)]
    sleeper, _, _ = setup(tmp_path, kube, udp.getsockname()[1])
    failing = "sh -c 'echo \"{node}: Permission denied (publickey).\" >&2; exit 255'"
    sleeper._suspend = lambda node_name: run_suspend(failing, node_name)
    outcome = sleeper.sleep("gpu2", "idle 900 s")
    assert not outcome.slept
    assert "gpu2: suspend command exited 255" in outcome.message
    assert "gpu2: Permission denied (publickey)." in outcome.message and outcome.message.endswith("uncordoned")
    assert kube.nodes["gpu2"]["spec"]["unschedulable"] is False
    assert {(r.node, r.state) for r in sleeper.control.store.records()} == {("gpu2", "suspend_failed")}
    assert sleeper.control.alerts == [outcome.message.removesuffix("; uncordoned")]
