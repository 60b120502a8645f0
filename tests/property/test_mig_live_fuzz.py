"""Junk GPU Operator labels and pod resources through the live MIG paths: `greengpu check --sharing-live
kubernetes` exits 0 with one-line warnings (never a traceback), the snapshot's partitions are a valid layout or
unavailable for every MIG GPU, and a pending pod with junk GPU limits is demand with a profile, or skipped."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from fake_kube import FakeKube, node, pod
from hypothesis import given, settings
from hypothesis import strategies as st
from sharingkit import a100, lab

from greengpu.backends.kube_sharing import sharing_from_node
from greengpu.backends.kubernetes import KubeApi, make_api_client
from greengpu.backends.sharing_live import UNAVAILABLE, live_partitions
from greengpu.cli import main
from greengpu.sched.mig import A100_40GB, layout_problem

IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
KEYS = ["nvidia.com/mig.strategy", "nvidia.com/mig.config", "nvidia.com/mig.config.state", "nvidia.com/gpu.product",
        "nvidia.com/gpu.count", "nvidia.com/gpu.sharing-strategy", "nvidia.com/gpu.replicas", "nvidia.com/gpu",
        "nvidia.com/gpu.shared", "nvidia.com/mig-1g.5gb", "nvidia.com/mig-3g.20gb", "nvidia.com/mig-7g.40gb",
        "nvidia.com/mig-", "nvidia.com/mig-x"]
JUNK = st.one_of(st.sampled_from(["", "0", "1", "2", "7", "28", "-1", "1.5", "9" * 40, "mixed", "single", "none",
                                  "time-slicing", "all-disabled", "failed", "success", "A100-SXM4-40GB-MIG-1g.5gb",
                                  "٣", "1 ", "pending"]), st.text(max_size=12))
MAPS = st.dictionaries(st.sampled_from(KEYS), JUNK, max_size=7)
FEW = settings(max_examples=40, deadline=None, derandomize=IN_CI, database=None)
LAB = str(Path(__file__).resolve().parents[2] / "examples" / "a100-lab.cluster.yaml")


@settings(max_examples=300, deadline=None, derandomize=IN_CI, database=None)
@given(MAPS, MAPS)
def test_any_reading_gives_a_valid_layout_or_an_unavailable_gpu(labels: dict[str, str],
                                                                 capacity: dict[str, str]) -> None:
    cluster = lab(a100("mig", mig=2))
    partitions, warnings = live_partitions(cluster, [sharing_from_node("n0", labels, capacity)])
    assert set(partitions) == {("n0", 0), ("n0", 1)}
    for partition in partitions.values():
        assert partition == UNAVAILABLE or layout_problem(A100_40GB, partition.instances) is None
    assert (UNAVAILABLE in partitions.values()) == bool(warnings)
    assert all("\n" not in line for line in warnings)


def test_check_with_junk_labels_warns_in_one_line_each(capsys: pytest.CaptureFixture[str]) -> None:
    with FakeKube() as kube:
        @FEW
        @given(MAPS, MAPS)
        def run(labels: dict[str, str], capacity: dict[str, str]) -> None:
            kube.nodes = {"lab-mig1": node("lab-mig1", labels=labels, capacity=capacity)}
            code = main(["check", "--cluster", LAB, "--sharing-live", "kubernetes", "--kube-host", kube.url,
                         "--json"])
            captured = capsys.readouterr()
            assert code == 0, captured.err
            assert "Traceback" not in captured.err
            warnings = json.loads(captured.out)["warnings"]
            assert all(isinstance(w, str) and "\n" not in w for w in warnings)

        run()


def test_pending_pods_with_junk_gpu_limits_are_demand_or_skipped() -> None:
    with FakeKube() as kube:
        api = KubeApi(make_api_client(host=kube.url), sleep=lambda s: None)

        @FEW
        @given(st.lists(MAPS, min_size=1, max_size=3))
        def run(containers: list[dict[str, Any]]) -> None:
            found = pod("p", "uid-p", "", phase="Pending")
            found["spec"]["containers"] = [{"name": f"c{i}", "image": "app:1", "resources": {"limits": limits}}
                                           for i, limits in enumerate(containers)]
            kube.pods = [found]
            try:
                pending = api.pending_gpu_pods()
            except ValueError:  # a junk nvidia.com/gpu quantity: the existing whole-GPU reader's own error
                assert any("nvidia.com/gpu" in c for c in containers)
                return
            for info in pending:
                assert info.gpus > 0 or info.gpu_profile
                assert not info.gpu_problem

        run()


@settings(max_examples=60, deadline=None, derandomize=IN_CI, database=None)
@given(st.one_of(st.text(max_size=30).filter(lambda t: not t.lower().startswith("http")),
                 st.sampled_from(["http://[bad", "http://127.0.0.1:99999", "http://:80", "ftp://x", "::::", "",
                                  "https://", "http://127.0.0.1:0", "http://a b"])))
def test_a_junk_kube_host_is_one_line_exit_2(host: str) -> None:
    import contextlib
    import io

    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = main(["check", "--cluster", LAB, "--sharing-live", "kubernetes", "--kube-host", host])
    assert code == 2
    line = err.getvalue()
    assert line.startswith(("greengpu: --kube-host ", "greengpu: --sharing-live kubernetes: ")), line
    assert line.count("\n") == 1 and "Traceback" not in line
