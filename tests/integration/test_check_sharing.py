"""`greengpu check` shows each node type's declared MIG and time-slicing layout and, with `--sharing-live
kubernetes`, where the GPU Operator's labels on the loopback API server disagree with it, as warnings."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fake_kube import FakeKube, node

from greengpu.cli import main

LAB = str(Path(__file__).resolve().parents[2] / "examples" / "a100-lab.cluster.yaml")
AGREEING_MIG = {"nvidia.com/mig.strategy": "mixed", "nvidia.com/mig.config": "all-balanced",
                "nvidia.com/mig.config.state": "success"}


def test_check_shows_the_declared_layout(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", "--cluster", LAB, "--json"]) == 0
    sharing = json.loads(capsys.readouterr().out)["sharing"]
    assert sharing == [
        "node type a100-4x-mig (2 nodes, 4 x A100-SXM4-40GB): GPU 0-1 MIG (1g.5gb, 2g.10gb, 3g.20gb, 4g.20gb, "
        "7g.40gb; repartition 60 s); GPU 2-3 whole",
        "node type a100-4x-ts (1 node, 4 x A100-SXM4-40GB): GPU 0-1 time-sliced 8 ways (batch, interactive); "
        "GPU 2-3 whole"]
    assert main(["check", "--cluster", LAB]) == 0
    assert "node type a100-4x-mig (2 nodes" in capsys.readouterr().out


def test_check_warns_where_the_live_cluster_disagrees(capsys: pytest.CaptureFixture[str]) -> None:
    with FakeKube() as kube:
        kube.nodes = {
            "lab-mig1": node("lab-mig1", labels=AGREEING_MIG, capacity={"nvidia.com/mig-1g.5gb": "2",
                                                                       "nvidia.com/mig-3g.20gb": "2"}),
            "lab-mig2": node("lab-mig2", labels={"nvidia.com/mig.strategy": "none",
                                                 "nvidia.com/mig.config": "all-disabled"}),
            "lab-ts1": node("lab-ts1", labels={"nvidia.com/gpu.sharing-strategy": "time-slicing",
                                               "nvidia.com/gpu.replicas": "2", "nvidia.com/gpu.count": "4"},
                            capacity={"nvidia.com/gpu": "4"}),
        }
        assert main(["check", "--cluster", LAB, "--sharing-live", "kubernetes", "--kube-host", kube.url,
                     "--json"]) == 0
    warnings = [w for w in json.loads(capsys.readouterr().out)["warnings"] if w.startswith("GPU sharing")]
    assert warnings == ["GPU sharing: lab-mig2: 0 GPUs in MIG mode, the inventory declares 2",
                        "GPU sharing: lab-ts1: time-slicing 2 replicas per GPU, the inventory declares 8"]


def test_an_unreachable_api_server_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", "--cluster", LAB, "--sharing-live", "kubernetes", "--kube-host", "http://127.0.0.1:9"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("greengpu: --sharing-live kubernetes: Kubernetes API unreachable") and err.count("\n") == 1


def test_nvml_on_a_host_outside_the_inventory_or_without_a_driver_is_one_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import socket

    assert main(["check", "--cluster", LAB, "--sharing-live", "nvml"]) == 2
    assert "is not a node of the inventory" in capsys.readouterr().err
    host = socket.gethostname().split(".")[0]
    text = Path(LAB).read_text().replace("lab-mig[1-2]", host)
    (tmp_path / "here.yaml").write_text(text)
    code = main(["check", "--cluster", str(tmp_path / "here.yaml"), "--sharing-live", "nvml", "--json"])
    captured = capsys.readouterr()
    if code == 2:  # no NVIDIA driver here (the CI machine): one line naming why
        assert captured.err.startswith("greengpu: --sharing-live nvml: NVML cannot start") and \
            captured.err.count("\n") == 1
    else:  # a GPU node: the reading compared, whatever it says
        assert code == 0 and isinstance(json.loads(captured.out)["warnings"], list)
