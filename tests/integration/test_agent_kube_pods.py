"""The node agent's view of Kubernetes, against the loopback API server: it lists only its own node's pods
(the request carries `fieldSelector=spec.nodeName=<node>`), never the cluster's. Before, with the default
policy (relax_when_queued), every GPU node's agent listed every pending pod of the cluster each tick, pod
specs and env values included; what waits now comes from the daemon (`--waiting-from`)."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import parse_qs, urlparse

from fake_kube import FakeKube, node, pod

from greengpu.config.policy import load_policy
from greengpu.control.agent.agent_main import AgentOptions, build_class_source, fake_backend


def test_the_agent_lists_only_its_own_nodes_pods(tmp_path: Path) -> None:
    with FakeKube() as kube:
        kube.nodes = {name: node(name) for name in ("gpu1", "gpu2")}
        kube.pods = [pod("train-0", "u1", "gpu1", gpus=1), pod("train-1", "u2", "gpu2", gpus=1),
                     pod("wait-0", "u3", "", gpus=4, phase="Pending")]
        options = AgentOptions(policy=load_policy("default"), backend="fake", fake_gpus="2xA100", fake_state=None,
                               fake_busy=(0,), fake_not_root=False, classes_file=None, class_source="kubernetes",
                               node="gpu1", kube_host=kube.url, journal=str(tmp_path / "journal.jsonl"),
                               listen="127.0.0.1:0", interval_s=10.0, once=True, dry_run=False,
                               nonbinding_after_s=600.0, pod_resources_socket=str(tmp_path / "no-kubelet.sock"))
        assert options.policy.capping.relaxes_when_queued  # the policy that made agents list the whole cluster
        source = build_class_source(options)
        gpus = fake_backend("2xA100", [0])
        count = gpus.open()
        readings = [gpus.read(i) for i in range(count)]
        for _ in range(3):
            source.jobs(readings)
        listed = [urlparse(path) for method, path in kube.requests
                  if method == "GET" and urlparse(path).path == "/api/v1/pods"]
        assert len(listed) == 3
        for url in listed:
            assert parse_qs(url.query).get("fieldSelector") == ["spec.nodeName=gpu1"], url.query
        assert not source.work_waiting().waiting  # not from a cluster-wide list: from the daemon, when asked
