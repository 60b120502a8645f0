"""Kubernetes pods asking for a MIG instance (`nvidia.com/mig-<profile>`) or a time-slice replica
(`nvidia.com/gpu.shared`) become jobs with that `gpu_profile`, through the loopback API server; a pod asking
for two kinds of device is skipped with one line naming it (once, not once a tick)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest
from fake_kube import FakeKube, node, pod

from greengpu.backends.kubernetes import KubeApi, make_api_client
from greengpu.control.hooks.kube_sleep import pod_job


def asking(name: str, *containers: dict[str, str]) -> dict[str, Any]:
    found = pod(name, f"uid-{name}", "", phase="Pending")
    found["spec"]["containers"] = [{"name": f"c{i}", "image": "app:1", "resources": {"limits": limits}}
                                   for i, limits in enumerate(containers)]
    return found


def test_pending_pods_become_jobs_with_their_gpu_profile(caplog: pytest.LogCaptureFixture) -> None:
    with FakeKube() as kube:
        kube.pods = [asking("small", {"nvidia.com/mig-1g.5gb": "1", "cpu": "2"}),
                     asking("note", {"nvidia.com/gpu.shared": "1"}),
                     asking("whole", {"nvidia.com/gpu": "2"}),
                     asking("split", {"nvidia.com/mig-3g.20gb": "1"}, {"memory": "1Gi"}),
                     asking("both", {"nvidia.com/mig-1g.5gb": "1"}, {"nvidia.com/gpu": "1"}),
                     asking("two", {"nvidia.com/mig-1g.5gb": "1"}, {"nvidia.com/mig-1g.5gb": "1"}),
                     asking("junk", {"nvidia.com/mig-1g.5gb": "half"}),
                     asking("cpu", {"cpu": "4"})]
        api = KubeApi(make_api_client(host=kube.url), sleep=lambda s: None)
        with caplog.at_level(logging.WARNING, logger="greengpu.kubernetes"):
            pending = api.pending_gpu_pods()
            api.pending_gpu_pods()  # a second tick says nothing new
    jobs = {p.name: pod_job(p, 0.0) for p in pending}
    assert {name: (j.gpu_profile, j.gpus) for name, j in jobs.items()} == {
        "small": ("1g.5gb", 1), "note": ("timeslice", 1), "whole": ("", 2), "split": ("3g.20gb", 1)}
    skipped = [r.getMessage() for r in caplog.records]
    assert len(skipped) == 3
    assert any(line.startswith("pod default/both skipped: resources nvidia.com/gpu, nvidia.com/mig-1g.5gb: "
                               "a pod gets one kind of GPU device") for line in skipped)
    for start in ("pod default/two skipped: resource nvidia.com/mig-1g.5gb: 2 devices",
                  "pod default/junk skipped: resource nvidia.com/mig-1g.5gb: 'half'"):
        assert any(line.startswith(start) for line in skipped), start


def test_a_node_running_only_mig_pods_is_busy_never_slept(tmp_path: Path) -> None:
    from inventories import a100_type, write_inventory

    from greengpu.backends.wol import Waker
    from greengpu.config.inventory import load_cluster
    from greengpu.config.policy import load_policy
    from greengpu.control.hooks.kube_sleep import KubeSleep
    from greengpu.control.hooks.sleep_control import SleepControl
    from greengpu.control.hooks.state_store import StateStore

    cluster = load_cluster(write_inventory(tmp_path / "c.yaml", {"g": a100_type(gpus=4)},
                                           ['{name: "gpu[1-2]", type: g}']))
    policy = load_policy("default")
    with FakeKube() as kube:
        kube.nodes = {name: node(name) for name in ("gpu1", "gpu2")}
        infer = asking("infer", {"nvidia.com/mig-1g.5gb": "1"})
        infer["spec"]["nodeName"], infer["status"]["phase"] = "gpu1", "Running"
        kube.pods = [infer]
        suspended: list[str] = []
        control = SleepControl(StateStore(tmp_path / "s.db"), Waker(cluster), policy.sleep)
        sleeper = KubeSleep(KubeApi(make_api_client(host=kube.url), sleep=lambda s: None), control, cluster, policy,
                            suspend=suspended.append)
        outcome = sleeper.sleep("gpu1", "idle 900 s")
        idle = {view.name for view in sleeper.observe(0.0).idle_awake}
    assert not outcome.slept and "GPU pods run there (default/infer)" in outcome.message
    assert suspended == [] and idle == {"gpu2"}
