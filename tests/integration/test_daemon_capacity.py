"""The capacity lever in the daemon (issue 36): on the fake cluster with cloud pools the tick sends waiting work to
spot or on-demand nodes, and /v1/status, /metrics, /v1/capacity and the journal show it, over loopback HTTP;
the spot webhook takes the daemon's decision over loopback HTTP, and admits pods unchanged without one."""

from __future__ import annotations

import base64
import json
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from inventories import SITE
from manual_clock import ManualClock

from greengpu.config.inventory import load_cluster
from greengpu.config.policy import load_policy
from greengpu.control.cloud.spot_webhook import DaemonDecisions, answer
from greengpu.control.daemon.audit import Alerts, AuditLog
from greengpu.control.daemon.http_api import DaemonServer
from greengpu.control.daemon.service import Daemon
from greengpu.control.daemon.store import DaemonStore
from greengpu.control.fakes.fake_cluster import FakeCluster
from greengpu.model import Job

T0 = 1_700_000_000.0
HOUR = 3600.0
A100X4 = ("{gpus: 4, gpu_model: A100, gpu_idle_w: 52, gpu_max_w: 400, gpu_min_limit_w: 100, host_idle_w: 300, "
          "host_sleep_w: 8, boot_s: 180, gpu_max_clock_mhz: 1410}")
POOLS = ("pools:\n"
         "  aws-spot: {type: a100x4, spot: true, price_per_hour: 8.0, interruptions_per_hour: 0.05, max_nodes: 4}\n"
         "  aws-od: {type: a100x4, price_per_hour: 16.0, max_nodes: 2}\n")


def write_cluster(tmp_path: Path, pools: str = POOLS) -> Path:
    path = tmp_path / "cluster.yaml"
    path.write_text(SITE + f"node_types:\n  a100x4: {A100X4}\nnodes:\n  - {{name: \"n[1-2]\", type: a100x4}}\n"
                    "tenants:\n  a: {quota_gpus: 32}\n" + pools)
    return path


# Both on-premises nodes busy for 20 h with work that cannot be preempted; then three jobs queue behind it.
JOBS = [Job(job_id=f"big{i}", tenant="a", gpus=4, duration_s=20 * HOUR, submit_time_s=T0 + 10, interruptible=False,
            gpus_per_node=4) for i in (1, 2)] + [
    Job(job_id="ns/train", tenant="a", gpus=4, duration_s=2 * HOUR, submit_time_s=T0 + 100,
        checkpoint_interval_s=1800.0, gpus_per_node=4),
    Job(job_id="due", tenant="a", gpus=4, duration_s=2 * HOUR, submit_time_s=T0 + 100, checkpoint_interval_s=1800.0,
        deadline_s=2 * HOUR + 300.0, gpus_per_node=4),
    Job(job_id="ns/serve", tenant="a", gpus=4, duration_s=2 * HOUR, submit_time_s=T0 + 100, job_class="inference",
        interruptible=False, gpus_per_node=4)]


def make(tmp_path: Path, pools: str = POOLS) -> tuple[Daemon, FakeCluster, ManualClock]:
    cluster = load_cluster(write_cluster(tmp_path, pools))
    state = tmp_path / "state"
    state.mkdir(exist_ok=True)
    clock = ManualClock(T0)
    body = FakeCluster(cluster, JOBS, state, start_s=T0)
    store = DaemonStore(state)
    audit = AuditLog(state / "audit.jsonl")
    return Daemon(body, load_policy("default"), store, audit, Alerts(audit), clock=clock), body, clock


def get(url: str) -> tuple[int, Any]:
    try:
        with urllib.request.urlopen(url, timeout=5) as reply:
            text = reply.read().decode()
            return reply.status, json.loads(text) if reply.headers.get_content_type() == "application/json" else text
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read().decode())


def test_the_daemon_places_waiting_work_on_spot_and_on_demand_cloud_nodes(tmp_path: Path) -> None:
    daemon, body, clock = make(tmp_path)
    server = DaemonServer(daemon, "127.0.0.1", 0, lambda: None).start()
    base = "http://{}:{}".format(*server.address)
    try:
        clock.now_s = T0 + 60
        assert daemon.tick().ok  # the two big jobs start on-premises
        assert set(body.running) == {"big1", "big2"}
        clock.now_s = T0 + 120
        assert daemon.tick().ok  # the rest arrived, and nothing on-premises frees for 20 h
        status, state = get(base + "/v1/status")
        assert status == 200
        chosen = {d["job"]: (d["kind"], d["pool"]) for d in state["capacity"]["decisions"]}
        assert chosen == {"ns/train": ("spot", "aws-spot"), "due": ("on-demand", "aws-od"),
                          "ns/serve": ("on-demand", "aws-od")}
        assert state["capacity"]["placements"] == {"on-demand/aws-od": 2, "spot/aws-spot": 1}
        assert state["capacity"]["running"]["ns/train"]["capacity"] == "spot"
        assert not body.pending  # all three left the queue for the cloud

        status, metrics = get(base + "/metrics")
        assert 'greengpu_daemon_cloud_placements_total{capacity="spot",pool="aws-spot"} 1.0' in metrics
        assert 'greengpu_daemon_actions_total{kind="choose_capacity",outcome="done"} 3.0' in metrics
        status, decision = get(base + "/v1/capacity/ns%2Ftrain")
        assert status == 200
        assert (decision["job"], decision["kind"], decision["pool"], decision["tick_s"]) == (
            "ns/train", "spot", "aws-spot", clock.now_s)
        assert decision["reason"].startswith("spot in aws-spot: class training")
        assert get(base + "/v1/capacity/unknown")[0] == 404
        assert get(base + "/v1/capacity/" + "x" * 300)[0] == 404
        journal = [json.loads(line) for line in (tmp_path / "state" / "audit.jsonl").read_text().splitlines()]
        steered = [r for r in journal if r["kind"] == "choose_capacity"]
        assert {(r["job"], r["outcome"]) for r in steered} == {("ns/train", "done"), ("due", "done"),
                                                               ("ns/serve", "done")}
        assert "sent to spot pool aws-spot" in next(r["detail"] for r in steered if r["job"] == "ns/train")
    finally:
        server.stop()
    # Cloud jobs end after their nodes' start-up and their run; the state survives a restart.
    clock.now_s = T0 + 120 + 180 + 2 * HOUR + 1
    assert daemon.tick().ok
    assert not body.cloud.running and set(body.cloud.finished) == {"ns/train", "due", "ns/serve"}
    again = FakeCluster(body.cluster, JOBS, tmp_path / "state", start_s=T0)
    assert again.cloud.placements == {("spot", "aws-spot"): 1, ("on-demand", "aws-od"): 2}


def test_without_cloud_pools_nothing_is_steered_and_status_has_no_capacity(tmp_path: Path) -> None:
    daemon, body, clock = make(tmp_path, pools="")
    for step in (60, 120, 180):
        clock.now_s = T0 + step
        assert daemon.tick().ok
    assert daemon.last_result is not None and daemon.last_result.capacity == ()
    assert set(body.pending) == {"ns/train", "due", "ns/serve"}  # waiting on-premises, as before
    assert "capacity" not in daemon.status()


def review(namespace: str, name: str) -> dict[str, Any]:
    pod = {"metadata": {"name": name, "namespace": namespace, "annotations": {
        "greengpu.io/class": "training", "greengpu.io/interruptible": "true"}},
        "spec": {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "4"}}}]}}
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {"uid": "u1", "kind": {"kind": "Pod"}, "operation": "CREATE", "namespace": namespace,
                        "name": name, "object": pod}}


def test_the_webhook_takes_the_daemon_s_decision_and_fails_open(tmp_path: Path) -> None:
    daemon, _, clock = make(tmp_path)
    server = DaemonServer(daemon, "127.0.0.1", 0, lambda: None).start()
    decisions = DaemonDecisions("http://{}:{}".format(*server.address))
    try:
        for step in (60, 120):
            clock.now_s = T0 + step
            assert daemon.tick().ok
        body, verdict = answer(review("ns", "train"), decisions.for_request(review("ns", "train")["request"]),
                               clock.now_s)
        assert verdict is not None and verdict.capacity == "spot"
        assert body["response"]["allowed"] and body["response"]["patchType"] == "JSONPatch"
        patch = json.loads(base64.b64decode(body["response"]["patch"]))
        expression = {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot"]}
        assert patch[0]["value"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
            "nodeSelectorTerms"] == [{"matchExpressions": [expression]}]
        # A pod the daemon has no decision for is admitted unchanged.
        body, verdict = answer(review("ns", "other"), decisions.for_request(review("ns", "other")["request"]),
                               clock.now_s)
        assert body["response"] == {"uid": "u1", "allowed": True}
    finally:
        server.stop()
    # The daemon gone: unchanged, at once (connection refused), never an error to the API server.
    body, _ = answer(review("ns", "train"), decisions.for_request(review("ns", "train")["request"]), clock.now_s)
    assert body["response"] == {"uid": "u1", "allowed": True}
