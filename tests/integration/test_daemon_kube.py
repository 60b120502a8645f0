"""The daemon on Kubernetes, against the in-process API server on loopback (real HTTP, the real API's
status codes, strict about selectors and eviction bodies) with magic packets on loopback: the daemon
decides that an idle node sleeps, cordons it, drains it (waiting for the evicted pods to terminate) and
suspends it; a pending GPU pod makes it wake; a PodDisruptionBudget that refuses the drain leaves the
node awake and uncordoned, with an alert."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from fake_kube import FakeKube, node, pod
from inventories import a100_type, wol_node, write_inventory
from manual_clock import ManualClock

from greengpu.backends.kubernetes import SLEEP_ANNOTATION, KubeApi, make_api_client
from greengpu.backends.wol import Waker
from greengpu.config.inventory import load_cluster
from greengpu.config.policy import load_policy
from greengpu.control.bodies.kube_body import KubeBody
from greengpu.control.daemon.audit import Alerts, AuditLog
from greengpu.control.daemon.service import Daemon
from greengpu.control.daemon.store import DaemonStore
from greengpu.control.hooks.kube_sleep import KubeSleep
from greengpu.control.hooks.sleep_control import SleepControl
from greengpu.control.hooks.state_store import StateStore

T0 = 1_700_000_000.0


def make(tmp_path: Path, kube: FakeKube, port: int, idle_timeout_s: float = 120.0, drain_timeout_s: float = 5.0,
         clock: Callable[[], float] | None = None) -> tuple[Daemon, list[str], ManualClock, SleepControl]:
    inventory = write_inventory(tmp_path / "cluster.yaml", {"g4": a100_type(gpus=4)},
                                [wol_node("gpu[1-3]", "g4", "02:00:5e:50:00:01", port)])
    cluster = load_cluster(inventory)
    base = load_policy("default")
    policy = replace(base, sleep=replace(base.sleep, idle_timeout_s=idle_timeout_s, min_awake_s=0.0, min_asleep_s=0.0,
                                         warm_reserve_gpus=0, warm_reserve_busy_fraction=0.0))
    manual = ManualClock(T0)
    clock_now = clock or manual
    control = SleepControl(StateStore(tmp_path / "sleep.db"), Waker(cluster), policy.sleep, clock=clock_now)
    suspended: list[str] = []

    def suspend(name: str) -> None:
        assert not [p for p in kube.pods if p["spec"].get("nodeName") == name
                    and "deletionTimestamp" in p["metadata"]], "suspended while evicted pods were terminating"
        suspended.append(name)

    sleeper = KubeSleep(KubeApi(make_api_client(host=kube.url), sleep=lambda s: None), control, cluster, policy,
                        suspend=suspend, drain_timeout_s=drain_timeout_s, wait=lambda s: time.sleep(0.05))
    store = DaemonStore(tmp_path / "daemon")
    audit = AuditLog(tmp_path / "daemon" / "audit.jsonl")
    return (Daemon(KubeBody(sleeper), policy, store, audit, Alerts(audit), clock=clock_now), suspended, manual,
            control)


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


def test_two_replicas_never_lead_at_once_while_pods_take_longer_than_the_lease_to_terminate(
        tmp_path: Path, udp: socket.socket) -> None:
    """Evicted pods take 4 s to terminate, the Lease lasts 3 s. Before, the leader renewed it only at the start of
    a tick: mid-drain the standby found it expired, both led and both suspended the same nodes. Now the drain
    renews it between polls (and stops at once if it cannot): one leader at every moment, each node suspended
    once, by the leader."""
    from greengpu.backends.kube_lease import LeaseElection
    from greengpu.control.bodies.kube_fence import KubeFence

    with FakeKube() as kube:
        kube.nodes = {name: node(name) for name in ("gpu1", "gpu2", "gpu3")}
        kube.pods = [pod(f"web-{i}", f"u{i}", f"gpu{i}", gpus=0) for i in (1, 2, 3)]
        kube.termination_s = 4.0
        replicas = []
        for who in ("replica-a", "replica-b"):
            (tmp_path / who).mkdir()
            daemon, suspended, _, _ = make(tmp_path / who, kube, udp.getsockname()[1], idle_timeout_s=0.0,
                                           drain_timeout_s=30.0, clock=time.time)
            election = LeaseElection(KubeApi(make_api_client(host=kube.url), sleep=lambda s: None), "greengpu",
                                     "greengpu-daemon", who, lease_duration_s=3)
            daemon.leader = election.lead
            assert isinstance(daemon.body, KubeBody)
            daemon.body.sleeper.guard = KubeFence(election).check
            replicas.append((daemon, suspended, election))
        stop = threading.Event()
        both_leading: list[float] = []

        def watch() -> None:
            while not stop.is_set():
                now_s = time.time()
                if all(election.holds(now_s) for _, _, election in replicas):
                    both_leading.append(now_s)
                time.sleep(0.02)

        def run(daemon: Daemon, delay_s: float) -> None:
            time.sleep(delay_s)
            while not stop.is_set():
                daemon.tick()
                time.sleep(0.2)

        threads = [threading.Thread(target=watch)] + [threading.Thread(target=run, args=(daemon, 0.5 * i))
                                                      for i, (daemon, _, _) in enumerate(replicas)]
        for thread in threads:
            thread.start()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and len(replicas[0][1]) + len(replicas[1][1]) < 3:
            time.sleep(0.2)
        time.sleep(1.0)  # a second replica acting late would show now
        stop.set()
        for thread in threads:
            thread.join(timeout=30)
        first, second = replicas[0][1], replicas[1][1]
        assert both_leading == []
        assert not set(first) & set(second), (first, second)  # never both suspending the same node
        assert sorted(first + second) == ["gpu1", "gpu2", "gpu3"]  # each idle node suspended once
        assert first and not second  # the first leader kept the Lease through 12 s of drains


def test_sigterm_mid_drain_uncordons_the_node_releases_the_lease_and_exits_at_once(
        tmp_path: Path, udp: socket.socket) -> None:
    """The real daemon process, draining a node whose pod takes 120 s to terminate, gets SIGTERM. Before, it went
    on draining (30 s and more), and its Lease stayed held for another 60 s. Now: exit within seconds, the node
    uncordoned and awake, the Lease released (empty holder) so a standby takes over at its next tick."""
    import os
    import signal
    import subprocess
    import sys

    with FakeKube() as kube:
        kube.nodes = {"gpu1": node("gpu1")}
        kube.pods = [pod("web-1", "u1", "gpu1", gpus=0)]
        kube.termination_s = 120.0
        inventory = write_inventory(tmp_path / "cluster.yaml", {"g4": a100_type(gpus=4)},
                                    [wol_node("gpu1", "g4", "02:00:5e:50:00:01", udp.getsockname()[1])])
        policy = tmp_path / "policy.yaml"
        policy.write_text("sleep:\n  idle_timeout_s: 0\n  min_awake_s: 0\n  warm_reserve_gpus: 0\n"
                          "  warm_reserve_busy_fraction: 0\n")
        daemon = subprocess.Popen(
            [sys.executable, "-m", "greengpu", "daemon", "--cluster", str(inventory), "--policy", str(policy),
             "--source", "kubernetes", "--backend", "real", "--kube-host", kube.url, "--state", str(tmp_path / "s"),
             "--listen", "127.0.0.1:0", "--interval-s", "1", "--suspend-command", "true",
             "--lease-namespace", "greengpu"],
            env={**os.environ, "POD_NAME": "replica-a"}, stderr=subprocess.PIPE, text=True)
        try:
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and not any("deletionTimestamp" in p["metadata"] for p in kube.pods):
                time.sleep(0.1)
            assert kube.nodes["gpu1"]["spec"].get("unschedulable") is True, "the daemon never started the drain"
            assert kube.leases[("greengpu", "greengpu-daemon")]["spec"]["holderIdentity"] == "replica-a"
            time.sleep(1.0)
            sent = time.monotonic()
            daemon.send_signal(signal.SIGTERM)
            code = daemon.wait(timeout=30)
            took_s = time.monotonic() - sent
        finally:
            if daemon.poll() is None:
                daemon.kill()
            stderr = daemon.stderr.read() if daemon.stderr else ""
        assert code == 0, stderr
        assert took_s < 5.0, (took_s, stderr)
        assert kube.nodes["gpu1"]["spec"]["unschedulable"] is False, stderr  # uncordoned, left awake
        lease = kube.leases[("greengpu", "greengpu-daemon")]
        assert lease["spec"].get("holderIdentity") is None and lease["spec"]["leaseDurationSeconds"] == 1
        assert "the daemon is stopping (SIGTERM)" in stderr


def test_a_pods_checkpoint_annotation_and_a_drain_for_a_failing_gpu(tmp_path: Path, udp: socket.socket) -> None:
    """A running pod's `greengpu.io/last-checkpoint` annotation is its job's last checkpoint; the drain for a
    failing GPU is a cordon without greengpu's sleep mark, so the node's wake-up path never uncordons it."""
    with FakeKube() as kube:
        kube.nodes = {name: node(name) for name in ("gpu1", "gpu2", "gpu3")}
        kube.pods = [pod("train-0", "u1", "gpu1", gpus=4, annotations={"greengpu.io/last-checkpoint": "1699999000"}),
                     pod("train-1", "u2", "gpu2", gpus=4, annotations={"greengpu.io/last-checkpoint": "soon"})]
        daemon, _, clock, _ = make(tmp_path, kube, udp.getsockname()[1])
        seen = daemon.body.observe(T0, 0, 0)
        checkpoints = {r.job.job_id: r.last_checkpoint_s for r in seen.snapshot.running}
        assert checkpoints == {"default/train-0": 1_699_999_000.0, "default/train-1": None}
        assert daemon.body.drain_node("gpu3", "greengpu: failing GPU 1") == "gpu3: cordoned (greengpu: failing GPU 1)"
        assert kube.nodes["gpu3"]["spec"]["unschedulable"] is True
        assert not kube.nodes["gpu3"]["metadata"]["annotations"].get(SLEEP_ANNOTATION)
        after = daemon.body.observe(T0 + 60, 0, 0)
        assert after.snapshot.node_states["gpu3"].drained
