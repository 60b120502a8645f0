"""`greengpu kube` at the CLI's exit path: no kubeconfig, or an API server that does not answer, is one
line and exit 1, at once (no urllib3 retries)."""

from __future__ import annotations

import socket
import time
from pathlib import Path

import pytest
from inventories import a100_type, wol_node, write_inventory

from greengpu.cli import main


@pytest.fixture
def options(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)  # not in a pod
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.kube/config
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "absent-kubeconfig"))
    inventory = write_inventory(tmp_path / "cluster.yaml", {"gpu4": a100_type(gpus=4)},
                                [wol_node("gpu[1-2]", "gpu4", "02:00:5e:00:00:01", 9)])
    return ["kube", "--cluster", str(inventory), "--state", str(tmp_path / "state.db")]


def test_no_kubeconfig_is_one_line_and_exit_1(options: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*options, "verify"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith("greengpu: kube: Kubernetes API unreachable: no in-cluster service account and no "
                          "usable kubeconfig")


@pytest.mark.parametrize("command", [["verify"], ["wake-pending"], ["sleep", "gpu1"]])
def test_an_unreachable_api_server_fails_fast_in_one_line(options: list[str], command: list[str],
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # closed again: nothing listens there
    started = time.monotonic()
    assert main([*options, "--kube-host", f"http://127.0.0.1:{port}", *command]) == 1
    assert time.monotonic() - started < 3.0  # was 9 s of urllib3 retries
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Connection refused" in err and "MaxRetryError" not in err
