"""Node-local suspend on Kubernetes, end to end on loopback: the daemon's KubeSleep drains a node on the
loopback API server, then asks that node's agent (a real `greengpu agent` process, its HTTP port on the node's
InternalIP) to suspend it; the agent refuses a wrong token, runs the host's suspend call and reports its exit.
Before, the shipped Deployment ran `ssh NODE greengpu node-suspend` from a pod with no key: the audit said
"cordoned, drained and suspended" and the status asleep while the node stayed Ready. Now success is reported
only when the host's suspend call succeeded; otherwise the node is uncordoned, recorded awake and alerted."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from fake_kube import FakeKube, node, pod
from inventories import a100_type, wol_node, write_inventory

from greengpu.backends.kubernetes import KubeApi, make_api_client
from greengpu.backends.wol import Waker
from greengpu.config.inventory import load_cluster
from greengpu.config.policy import load_policy
from greengpu.control.hooks.kube_sleep import KubeSleep
from greengpu.control.hooks.node_local_suspend import AgentSuspender
from greengpu.control.hooks.sleep_control import SleepControl
from greengpu.control.hooks.state_store import StateStore

TOKEN = "s3cret-token-for-the-agents-0123"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def agent(tmp_path: Path) -> Iterator[tuple[int, Path]]:
    """An agent serving POST /v1/suspend; its host suspend call is a script that logind's answer stands in for:
    it exits with the code in `exit-code` (and says why on stderr), and appends to `suspended` when it succeeds."""
    token = tmp_path / "agent-token"
    token.write_text(TOKEN + "\n")
    token.chmod(0o600)
    host = tmp_path / "host-suspend.py"
    host.write_text(
        "import pathlib, sys\n"
        f"root = pathlib.Path({str(tmp_path)!r})\n"
        "code = int((root / 'exit-code').read_text())\n"
        "if code:\n"
        "    print('Failed to suspend system via logind: Access denied', file=sys.stderr)\n"
        "else:\n"
        "    with open(root / 'suspended', 'a') as out:\n"
        "        out.write('suspend\\n')\n"
        "sys.exit(code)\n")
    (tmp_path / "exit-code").write_text("0")
    port = _free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "greengpu", "agent", "--backend", "fake", "--fake-gpus", "2xA100",
         "--class-source", "local", "--listen", f"127.0.0.1:{port}", "--journal", str(tmp_path / "journal.jsonl"),
         "--interval-s", "1", "--suspend-token-file", str(token),
         "--host-suspend-command", f"{sys.executable} {host}"],
        stderr=subprocess.PIPE, text=True, env={**os.environ})
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1) as reply:
                    if reply.status == 200:
                        break
            except OSError:
                if process.poll() is not None or time.monotonic() > deadline:
                    said = process.stderr.read() if process.stderr else ""
                    raise AssertionError(f"agent did not start: {said}") from None
                time.sleep(0.2)
        yield port, tmp_path
    finally:
        process.terminate()
        process.wait(timeout=20)


def make_sleeper(tmp_path: Path, kube: FakeKube, port: int, token_file: Path) -> KubeSleep:
    inventory = write_inventory(tmp_path / "cluster.yaml", {"g4": a100_type(gpus=4)},
                                [wol_node("gpu1", "g4", "02:00:5e:70:00:01", 9)])
    cluster = load_cluster(inventory)
    policy = load_policy("default")
    control = SleepControl(StateStore(tmp_path / "sleep.db"), Waker(cluster), policy.sleep)
    api = KubeApi(make_api_client(host=kube.url), sleep=lambda s: None)
    return KubeSleep(api, control, cluster, policy, AgentSuspender(api.node_internal_ip, str(token_file), port),
                     drain_timeout_s=5.0, wait=lambda s: time.sleep(0.05))


def test_the_nodes_agent_suspends_it_and_every_failure_leaves_it_awake(agent: tuple[int, Path]) -> None:
    port, root = agent
    with FakeKube() as kube:
        kube.nodes = {"gpu1": node("gpu1")}
        kube.pods = [pod("web-0", "u1", "gpu1", gpus=0)]
        sleeper = make_sleeper(root, kube, port, root / "agent-token")

        # logind refuses: the agent says so (500 with the call's stderr); the node stays awake and usable.
        (root / "exit-code").write_text("1")
        outcome = sleeper.sleep("gpu1", "idle")
        assert not outcome.slept and outcome.message.endswith("uncordoned")
        assert "agent answered 500" in outcome.message
        assert "Failed to suspend system via logind: Access denied" in outcome.message
        assert kube.nodes["gpu1"]["spec"]["unschedulable"] is False
        assert [(r.node, r.state) for r in sleeper.control.store.records()] == [("gpu1", "suspend_failed")]
        assert len(sleeper.control.alerts) == 1

        # A daemon with the wrong token is refused before anything runs on the node.
        wrong = root / "wrong-token"
        wrong.write_text("not-the-agents-token-at-all")
        (root / "exit-code").write_text("0")
        (root / "impostor").mkdir()
        impostor = make_sleeper(root / "impostor", kube, port, wrong)
        outcome = impostor.sleep("gpu1", "idle")
        assert not outcome.slept and "agent answered 401: a valid bearer token is required" in outcome.message
        assert not (root / "suspended").exists()
        assert kube.nodes["gpu1"]["spec"]["unschedulable"] is False

        # The host's suspend call succeeds: only now is the node reported suspended and recorded asleep.
        outcome = sleeper.sleep("gpu1", "idle")
        assert outcome.slept and outcome.message.startswith("gpu1: cordoned, drained and suspended")
        assert (root / "suspended").read_text() == "suspend\n"
        assert [(r.node, r.state) for r in sleeper.control.store.records()] == [("gpu1", "asleep")]
        assert kube.nodes["gpu1"]["spec"]["unschedulable"] is True
