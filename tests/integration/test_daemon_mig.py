"""MIG live: the daemon on the fake cluster repartitions a MIG GPU through the fake NVML (GPU instances
destroyed and created, the GPU unusable for `reconfigure_s` as in the replay), then runs the MIG job on the
instance made, and /v1/status shows it; unreadable MIG state makes the node's MIG GPUs unavailable (fail safe);
on Kubernetes a repartition is refused: journaled, one alert naming node, GPU and layout, nothing changed."""

from __future__ import annotations

import logging
from pathlib import Path

import pynvml
import pytest
from fake_kube import FakeKube, node
from inventories import SITE
from manual_clock import ManualClock

from greengpu.backends.sharing_live import UNAVAILABLE
from greengpu.config.inventory import load_cluster
from greengpu.config.policy import load_policy
from greengpu.control.daemon.audit import Alerts, AuditLog
from greengpu.control.daemon.service import Daemon
from greengpu.control.daemon.store import DaemonStore
from greengpu.control.fakes.fake_cluster import FakeCluster
from greengpu.model import Cluster, PartitionGpu
from greengpu.sim.traces import read_trace

T0 = 1_709_535_600.0  # 2024-03-04T07:00:00Z
MIG_TYPE = ("{gpus: 4, gpu_model: A100-SXM4-40GB, gpu_memory_gb: 40, gpu_idle_w: 52, gpu_max_w: 400, "
            "gpu_min_limit_w: 100, host_idle_w: 300, host_sleep_w: 8, boot_s: 180, "
            "mig: {gpus: 2, profiles: [1g.5gb, 2g.10gb, 3g.20gb, 4g.20gb, 7g.40gb], reconfigure_s: 120}}")
TRACE = ("job_id,submit_time,duration_s,gpus,tenant,priority,class,checkpoint_interval_s,gpu_profile\n"
         "m1,2024-03-04T07:01:00Z,36000,1,nlp,5,inference,,3g.20gb\n")


def mig_cluster(tmp_path: Path) -> Cluster:
    path = tmp_path / "cluster.yaml"
    path.write_text(SITE + f"node_types:\n  mig4: {MIG_TYPE}\nnodes:\n  - {{name: lab1, type: mig4}}\n"
                    "tenants:\n  nlp: {quota_gpus: 4}\n")
    return load_cluster(path)


def make(tmp_path: Path, clock: ManualClock) -> tuple[Daemon, FakeCluster]:
    (tmp_path / "trace.csv").write_text(TRACE)
    state = tmp_path / "state"
    state.mkdir(exist_ok=True)
    body = FakeCluster(mig_cluster(tmp_path), read_trace(tmp_path / "trace.csv").jobs, state, start_s=T0)
    store = DaemonStore(state)
    audit = AuditLog(state / "audit.jsonl")
    return Daemon(body, load_policy("default"), store, audit, Alerts(audit), clock=clock), body


def instances_read(body: FakeCluster, gpu: int) -> list[str]:
    """What NVML reads back of the GPU's instances."""
    return [f"{i.profile}@{i.start}" for i in body.nvml["lab1"].read_sharing(gpu).instances]


def test_a_partition_is_carried_out_through_nvml_and_the_mig_job_then_runs(tmp_path: Path) -> None:
    clock = ManualClock(T0)
    daemon, body = make(tmp_path, clock)
    assert instances_read(body, 0) == [] and body.nvml["lab1"].read_sharing(0).mig_enabled
    clock.now_s = T0 + 90
    assert daemon.tick().ok
    entries = [e for e in daemon.store.entries() if e.kind == "partition_gpu"]
    assert [(e.node, e.gpu, e.state) for e in entries] == [("lab1", 0, "done")]
    assert instances_read(body, 0) == ["3g.20gb@0", "3g.20gb@4"]  # as many 3g.20gb as fit, made by NVML
    assert "m1" in daemon.status()["jobs_waiting_for_capacity"]

    clock.now_s = T0 + 150  # still reconfiguring (120 s from T0 + 90): nothing placed, nothing repartitioned again
    assert daemon.tick().ok
    gpu0 = daemon.status()["mig_gpus"][0]  # what the tick observed: the new instances, not ready yet
    assert (gpu0["node"], gpu0["gpu"], gpu0["instances"], gpu0["ready"]) == ("lab1", 0, ["3g.20gb@0", "3g.20gb@4"],
                                                                              False)
    assert "m1" not in body.running
    assert len([e for e in daemon.store.entries() if e.kind == "partition_gpu"]) == 1

    clock.now_s = T0 + 240
    assert daemon.tick().ok
    assert body.running["m1"].slots[0].instance == "3g.20gb@0"
    gpu0 = daemon.status()["mig_gpus"][0]
    assert gpu0["ready"] is True and gpu0["instances"] == ["3g.20gb@0", "3g.20gb@4"]
    clock.now_s = T0 + 270
    assert daemon.tick().ok
    assert daemon.status()["mig_gpus"][0]["jobs"] == {"3g.20gb@0": "m1"}

    # A restart finds the instances again (the fake NVML's MIG state is in memory; the layouts are written down).
    body.fakes["lab1"].save()  # with m1's process on GPU 0 written down, as after a node event
    again = FakeCluster(body.cluster, list(body.jobs.values()), tmp_path / "state", start_s=T0)
    assert [f"{i.profile}@{i.start}" for i in again.nvml["lab1"].read_sharing(0).instances] == ["3g.20gb@0",
                                                                                                   "3g.20gb@4"]
    assert again.running["m1"].slots[0].instance == "3g.20gb@0"  # and the job on its instance, not a bare share


def test_a_gpu_in_use_is_not_repartitioned(tmp_path: Path) -> None:
    clock = ManualClock(T0)
    daemon, body = make(tmp_path, clock)
    for now in (90, 240):
        clock.now_s = T0 + now
        daemon.tick()
    assert "m1" in body.running
    with pytest.raises(Exception, match="in use by m1"):
        body.partition_gpu(PartitionGpu("lab1", 0, ("7g.40gb@0",)), T0 + 300)
    assert instances_read(body, 0) == ["3g.20gb@0", "3g.20gb@4"]


def test_unreadable_mig_state_makes_the_nodes_mig_gpus_unavailable(tmp_path: Path,
                                                                  caplog: pytest.LogCaptureFixture) -> None:
    clock = ManualClock(T0)
    daemon, body = make(tmp_path, clock)
    body.fakes["lab1"].fail_mig_reads(1, pynvml.NVML_ERROR_UNKNOWN)
    clock.now_s = T0 + 90
    with caplog.at_level(logging.WARNING, logger="greengpu.daemon"):
        assert daemon.tick().ok
        assert daemon.tick().ok
    seen = daemon.last_observation
    assert seen is not None
    assert seen.snapshot.mig_partitions[("lab1", 0)] == UNAVAILABLE
    assert not [e for e in daemon.store.entries() if e.kind == "partition_gpu"]  # nothing done on a guess
    assert "m1" in daemon.status()["jobs_waiting_for_capacity"]
    said = [r.getMessage() for r in caplog.records if "unavailable (fail safe)" in r.getMessage()]
    assert len(said) == 1 and "lab1: MIG GPUs 0-1" in said[0] and "GPU 1: MIG state unreadable" in said[0]

    body.fakes["lab1"].fail_mig_reads(1, None)  # readable again: the GPU is repartitioned for the job
    clock.now_s = T0 + 120
    assert daemon.tick().ok
    assert [e.state for e in daemon.store.entries() if e.kind == "partition_gpu"] == ["done"]


def test_kubernetes_refuses_a_repartition_once_and_changes_nothing(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    from dataclasses import replace

    from greengpu.backends.kubernetes import KubeApi, make_api_client
    from greengpu.backends.wol import Waker
    from greengpu.control.bodies.kube_body import KubeBody
    from greengpu.control.daemon import service as daemon_module
    from greengpu.control.hooks.kube_sleep import KubeSleep
    from greengpu.control.hooks.sleep_control import SleepControl
    from greengpu.control.hooks.state_store import StateStore

    cluster = mig_cluster(tmp_path)
    policy = load_policy("default")
    labels = {"nvidia.com/mig.strategy": "mixed", "nvidia.com/mig.config": "all-3g.20gb",
              "nvidia.com/mig.config.state": "success"}
    real_tick = daemon_module.control_tick
    wanted = PartitionGpu("lab1", 1, ("7g.40gb@0",), "7g.40gb for ml/big")

    def tick_asking_a_partition(*args, **kwargs):  # type: ignore[no-untyped-def]
        result = real_tick(*args, **kwargs)  # the core's decision, plus the repartition a MIG pod would need
        cycle = result.scheduled.cycle
        return replace(result, scheduled=replace(result.scheduled, cycle=replace(
            cycle, actions=type(cycle.actions)((*cycle.actions, wanted)))))

    monkeypatch.setattr(daemon_module, "control_tick", tick_asking_a_partition)
    with FakeKube() as kube:
        kube.nodes = {"lab1": node("lab1", labels=labels, capacity={"nvidia.com/mig-3g.20gb": "4"})}
        clock = ManualClock(T0)
        control = SleepControl(StateStore(tmp_path / "sleep.db"), Waker(cluster), policy.sleep, clock=clock)
        suspended: list[str] = []
        sleeper = KubeSleep(KubeApi(make_api_client(host=kube.url), sleep=lambda s: None), control, cluster, policy,
                            suspend=suspended.append)
        audit = AuditLog(tmp_path / "audit.jsonl")
        daemon = Daemon(KubeBody(sleeper), policy, DaemonStore(tmp_path / "daemon"), audit, Alerts(audit),
                        clock=clock)
        before = repr(kube.nodes)
        for _ in range(3):
            clock.now_s += 60
            assert daemon.tick().ok
        seen = daemon.last_observation
        assert seen is not None  # the labels' 4 x 3g.20gb laid out on the 2 MIG GPUs
        assert seen.snapshot.mig_partitions[("lab1", 1)].instances == ("3g.20gb@0", "3g.20gb@4")
        assert repr(kube.nodes) == before and suspended == []  # nothing changed on the cluster
    entries = [e for e in daemon.store.entries() if e.kind == "partition_gpu"]
    assert [(e.node, e.gpu, e.state) for e in entries] == [("lab1", 1, "refused")]  # once: then backed off
    alerts = [line for line in (tmp_path / "audit.jsonl").read_text().splitlines() if "partition_refused" in line]
    assert len(alerts) == 1
    assert "lab1 GPU 1: repartition to 7g.40gb@0 refused: the GPU Operator's MIG Manager" in alerts[0]


def test_kubernetes_labels_that_disagree_make_the_mig_gpus_unavailable(tmp_path: Path,
                                                                      caplog: pytest.LogCaptureFixture) -> None:
    from greengpu.backends.kubernetes import KubeApi, make_api_client
    from greengpu.backends.wol import Waker
    from greengpu.control.bodies.kube_body import KubeBody
    from greengpu.control.hooks.kube_sleep import KubeSleep
    from greengpu.control.hooks.sleep_control import SleepControl
    from greengpu.control.hooks.state_store import StateStore

    cluster = mig_cluster(tmp_path)
    policy = load_policy("default")
    with FakeKube() as kube:
        kube.nodes = {"lab1": node("lab1", labels={"nvidia.com/mig.config": "all-disabled"})}
        control = SleepControl(StateStore(tmp_path / "sleep.db"), Waker(cluster), policy.sleep)
        sleeper = KubeSleep(KubeApi(make_api_client(host=kube.url), sleep=lambda s: None), control, cluster, policy,
                            suspend=lambda name: None)
        body = KubeBody(sleeper)
        with caplog.at_level(logging.WARNING, logger="greengpu.daemon"):
            first = body.observe(T0, 0, 0).snapshot.mig_partitions
            body.observe(T0 + 60, 0, 0)
    assert first == {("lab1", 0): UNAVAILABLE, ("lab1", 1): UNAVAILABLE}
    said = [r.getMessage() for r in caplog.records if "unavailable (fail safe)" in r.getMessage()]
    assert said == ["lab1: MIG GPUs 0-1 unavailable (fail safe): 0 GPUs in MIG mode, the inventory declares 2"]
