"""The daemon on Kubernetes, against the in-process API server on loopback (real HTTP, the real API's
status codes, strict about selectors and eviction bodies) with magic packets on loopback: the daemon
decides that an idle node sleeps, cordons it, drains it (waiting for the evicted pods to terminate) and
suspends it; a pending GPU pod makes it wake; a PodDisruptionBudget that refuses the drain leaves the
node awake and uncordoned, with an alert."""

from __future__ import annotations

import socket
import time
from dataclasses import replace
from pathlib import Path

from fake_kube import FakeKube, node, pod
from inventories import a100_type, wol_node, write_inventory
from manual_clock import ManualClock

from greengpu.backends.kubernetes import SLEEP_ANNOTATION, KubeApi, make_api_client
from greengpu.backends.wol import Waker
from greengpu.config.inventory import load_cluster
from greengpu.config.policy import load_policy
from greengpu.control.audit import Alerts, AuditLog
from greengpu.control.daemon import Daemon
from greengpu.control.daemon_store import DaemonStore
from greengpu.control.kube_body import KubeBody
from greengpu.control.kube_sleep import KubeSleep
from greengpu.control.sleep_control import SleepControl
from greengpu.control.state_store import StateStore

T0 = 1_700_000_000.0


def make(tmp_path: Path, kube: FakeKube, port: int) -> tuple[Daemon, list[str], ManualClock, SleepControl]:
    inventory = write_inventory(tmp_path / "cluster.yaml", {"g4": a100_type(gpus=4)},
                                [wol_node("gpu[1-3]", "g4", "02:00:5e:50:00:01", port)])
    cluster = load_cluster(inventory)
    base = load_policy("default")
    policy = replace(base, sleep=replace(base.sleep, idle_timeout_s=120.0, min_awake_s=0.0, min_asleep_s=0.0,
                                         warm_reserve_gpus=0, warm_reserve_busy_fraction=0.0))
    clock = ManualClock(T0)
    control = SleepControl(StateStore(tmp_path / "sleep.db"), Waker(cluster), policy.sleep, clock=clock)
    suspended: list[str] = []

    def suspend(name: str) -> None:
        assert not [p for p in kube.pods if p["spec"].get("nodeName") == name
                    and "deletionTimestamp" in p["metadata"]], "suspended while evicted pods were terminating"
        suspended.append(name)

    sleeper = KubeSleep(KubeApi(make_api_client(host=kube.url), sleep=lambda s: None), control, cluster, policy,
                        suspend=suspend, drain_timeout_s=5.0, wait=lambda s: time.sleep(0.05))
    store = DaemonStore(tmp_path / "daemon")
    audit = AuditLog(tmp_path / "daemon" / "audit.jsonl")
    return Daemon(KubeBody(sleeper), policy, store, audit, Alerts(audit), clock=clock), suspended, clock, control


def test_idle_nodes_are_drained_and_suspended_and_a_pending_pod_wakes_one(tmp_path: Path, udp: socket.socket) -> None:
    with FakeKube() as kube:
        kube.nodes = {name: node(name) for name in ("gpu1", "gpu2", "gpu3")}
        kube.pods = [pod("train-0", "u1", "gpu1", gpus=4),             # gpu1 is busy: never slept
                     pod("web-0", "u2", "gpu2", gpus=0)]               # gpu2 idle but for a movable CPU pod
        daemon, suspended, clock, control = make(tmp_path, kube, udp.getsockname()[1])
        for _ in range(4):
            clock.now_s += 60
            assert daemon.tick().ok
        assert sorted(suspended) == ["gpu2", "gpu3"]  # idle past the timeout: cordoned, drained, suspended
        assert kube.nodes["gpu2"]["spec"]["unschedulable"] is True
        assert not [p for p in kube.pods if p["metadata"]["name"] == "web-0" and p["spec"].get("nodeName") == "gpu2"]
        assert kube.nodes["gpu1"]["spec"].get("unschedulable") is not True

        kube.pods.append(pod("wait-0", "u3", "", gpus=4, phase="Pending"))
        clock.now_s += 60
        assert daemon.tick().ok
        packets = [udp.recvfrom(4096)[0] for _ in range(1)]
        assert len(packets) == 1 and len(packets[0]) == 102  # one magic packet: one node is enough for the pod
        woken = [e.node for e in daemon.store.entries() if e.kind == "wake" and e.state == "done"]
        assert len(woken) == 1
        # The node comes back Ready: the next look closes its wake-up and uncordons it.
        clock.now_s += 60
        daemon.tick()
        assert SLEEP_ANNOTATION not in kube.nodes[woken[0]]["metadata"]["annotations"]
        assert kube.nodes[woken[0]]["spec"]["unschedulable"] is False
        assert daemon.store.open_entries() == []


def test_a_pod_disruption_budget_refusal_leaves_the_node_awake_and_uncordoned(
        tmp_path: Path, udp: socket.socket) -> None:
    with FakeKube() as kube:
        kube.nodes = {name: node(name) for name in ("gpu1", "gpu2", "gpu3")}
        kube.pods = [pod("train-0", "u1", "gpu1", gpus=4), pod("train-1", "u2", "gpu3", gpus=4),
                     pod("web-0", "u3", "gpu2", gpus=0, labels={"app": "web"})]
        kube.pdbs = [{"selector": {"app": "web"}, "disruptions_allowed": 0}]
        daemon, suspended, clock, _ = make(tmp_path, kube, udp.getsockname()[1])
        for _ in range(4):
            clock.now_s += 60
            assert daemon.tick().ok
        assert suspended == []
        assert kube.nodes["gpu2"]["spec"]["unschedulable"] is False  # uncordoned after the refusal
        failed = [e for e in daemon.store.entries() if e.kind == "sleep"]
        assert [e.state for e in failed] == ["failed"]  # asked once, then left alone for a while
        alerts = [r for r in daemon.audit.records() if r.get("alert") == "action_failed"]
        assert alerts and "PodDisruptionBudget" in alerts[0]["message"]


def test_two_replicas_elect_one_leader_on_a_lease_and_the_standby_takes_over_when_it_expires(
        tmp_path: Path, udp: socket.socket) -> None:
    from greengpu.backends.kube_lease import LeaseElection

    with FakeKube() as kube:
        kube.nodes = {name: node(name) for name in ("gpu1", "gpu2", "gpu3")}
        (tmp_path / "a").mkdir()
        (tmp_path / "b").mkdir()
        first, suspended, clock, _ = make(tmp_path / "a", kube, udp.getsockname()[1])
        second, _, _, _ = make(tmp_path / "b", kube, udp.getsockname()[1])
        second.clock = clock
        for daemon, who in ((first, "replica-a"), (second, "replica-b")):
            api = KubeApi(make_api_client(host=kube.url), sleep=lambda s: None)
            daemon.leader = LeaseElection(api, "greengpu", "greengpu-daemon", who, lease_duration_s=90).lead
        for _ in range(4):
            clock.now_s += 60
            first.tick()
            second.tick()
        assert first.leading and not second.leading
        assert [e for e in second.store.entries()] == []  # the standby decided nothing and touched nothing
        assert sorted(suspended) == ["gpu1", "gpu2", "gpu3"]  # the leader slept the idle nodes (no reserve here)
        lease = kube.leases[("greengpu", "greengpu-daemon")]
        assert lease["spec"]["holderIdentity"] == "replica-a"
        # The leader dies: after the lease's duration the standby takes over, and counts the transition.
        clock.now_s += 91
        second.tick()
        assert second.leading
        lease = kube.leases[("greengpu", "greengpu-daemon")]
        assert lease["spec"]["holderIdentity"] == "replica-b" and lease["spec"]["leaseTransitions"] == 1
        # Both racing on the same resourceVersion: the API server lets one write through, the other gets 409.
        assert first.leader is not None and not first.leader(clock.now_s)  # b renewed it: a stands by
