"""`--json` on the commands that report what they did: `kube sleep|wake-pending|verify` against the fake API
server on loopback (real HTTP), `slurm verify|resume-failed`, and `node-suspend` on the fake NVML. Stdout is
one JSON document and nothing else, whatever the command decided."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from fake_kube import FakeKube, node, pod
from inventories import a100_type, wol_node, write_inventory

from greengpu.cli import main


@pytest.fixture
def kube() -> Iterator[FakeKube]:
    with FakeKube() as server:
        server.nodes = {name: node(name) for name in ("gpu1", "gpu2")}
        yield server


def kube_options(tmp_path: Path, kube: FakeKube, port: int) -> list[str]:
    inventory = write_inventory(tmp_path / "cluster.yaml", {"gpu4": a100_type(gpus=4)},
                                [wol_node("gpu[1-2]", "gpu4", "02:00:5e:30:00:01", port)])
    # The shipped default with no minimum time asleep: the commands run on the wall clock, one after another.
    shipped = (Path(__file__).parents[2] / "policies" / "default.yaml").read_text()
    assert "min_asleep_s: 600" in shipped
    policy = tmp_path / "policy.yaml"
    policy.write_text(shipped.replace("min_asleep_s: 600", "min_asleep_s: 0"))
    return ["kube", "--cluster", str(inventory), "--state", str(tmp_path / "state.db"), "--kube-host", kube.url,
            "--policy", str(policy), "--suspend-command", f"touch {tmp_path}/suspended-{{node}}"]


def one_json(capsys: pytest.CaptureFixture[str]) -> object:
    out = capsys.readouterr().out
    return json.loads(out)  # fails unless stdout is exactly one JSON document


def test_kube_commands_report_in_json(tmp_path: Path, kube: FakeKube, udp: socket.socket,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    options = kube_options(tmp_path, kube, udp.getsockname()[1])
    kube.pods = [pod("train-0", "u1", "gpu2", gpus=4)]
    assert main([*options, "sleep", "gpu1", "--json"]) == 0
    slept = one_json(capsys)
    assert isinstance(slept, dict) and (slept["node"], slept["slept"]) == ("gpu1", True)
    assert isinstance(slept["message"], str) and "gpu1" in slept["message"]
    assert main([*options, "sleep", "gpu2", "--json"]) == 1  # a GPU pod runs there: refused, still one JSON object
    refused = one_json(capsys)
    assert isinstance(refused, dict) and refused["node"] == "gpu2" and refused["slept"] is False
    assert "train-0" in refused["message"] or "GPU" in refused["message"]

    kube.pods = [pod("wait-0", "u2", "", gpus=4, phase="Pending")]
    assert main([*options, "wake-pending", "--json"]) == 0
    assert one_json(capsys) == {"woken": ["gpu1"]}
    assert udp.recvfrom(4096)[0][6:12].hex(":") == "02:00:5e:30:00:01"

    kube.nodes["gpu1"]["status"]["conditions"][0]["status"] = "Unknown"
    assert main([*options, "verify", "--json"]) == 0
    assert one_json(capsys) == []  # not Ready yet and its deadline not reached: nothing to say
    kube.nodes["gpu1"]["status"]["conditions"][0]["status"] = "True"
    assert main([*options, "verify", "--json"]) == 0
    events = one_json(capsys)
    assert isinstance(events, list)
    assert [(e["node"], e["event"]) for e in events] == [("gpu1", "up"), ("gpu1", "uncordoned")]
    assert all(e["message"].startswith("gpu1: ") for e in events)


def test_slurm_verify_and_resume_failed_report_in_json(tmp_path: Path, udp: socket.socket,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    inventory = write_inventory(tmp_path / "cluster.yaml", {"gpu4": a100_type(gpus=4)},
                                [wol_node("node[1-2]", "gpu4", "02:00:5e:00:00:01", udp.getsockname()[1])])
    options = ["slurm", "--cluster", str(inventory), "--state", str(tmp_path / "state.db"),
               "--log", str(tmp_path / "hooks.log")]
    assert main([*options, "verify", "--json"]) == 0  # nothing under verification: no Slurm asked
    assert one_json(capsys) == []
    assert main([*options, "resume", "node1"]) == 0
    capsys.readouterr()
    assert main([*options, "resume-failed", "node1", "--json"]) == 0
    alerts = one_json(capsys)
    assert isinstance(alerts, list) and len(alerts) == 1 and "node1" in alerts[0]


@pytest.mark.parametrize(("busy", "extra", "code", "suspended"), [
    ("", ["--dry-run"], 0, False),
    ("1", [], 1, False),
    ("", [], 0, True),
])
def test_node_suspend_reports_its_decision_in_json(busy: str, extra: list[str], code: int, suspended: bool,
                                                   capfd: pytest.CaptureFixture[str]) -> None:
    # `echo` prints to its stdout: with --json it must land on stderr, not inside the JSON (capfd reads the
    # file descriptors, so the child's output is caught too).
    args = ["node-suspend", "--backend", "fake", "--fake-gpus", "2xA100", "--fake-busy", busy,
            "--command", "echo suspending", "--json", *extra]
    assert main(args) == code
    decision = one_json(capfd)
    assert isinstance(decision, dict)
    assert decision["suspended"] is suspended and decision["command"] == "echo suspending"
    assert decision["dry_run"] is ("--dry-run" in extra)
    assert (decision["busy"] != []) is (busy != "")
