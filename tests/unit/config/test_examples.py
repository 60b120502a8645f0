"""Every shipped inventory and policy passes `greengpu check`; the documented default is the built-in one."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from greengpu.cli import main
from greengpu.config.policy import BUILTIN_POLICIES, builtin_policy_text, load_policy

REPO = Path(__file__).resolve().parents[3]
INVENTORIES = sorted((REPO / "examples").glob("*.cluster.yaml"))
POLICIES = sorted((REPO / "policies").glob("*.yaml"))


def test_examples_exist() -> None:
    assert len(INVENTORIES) >= 2
    assert {p.name for p in POLICIES} >= {"default.yaml", "lab-a100.yaml", "training-400.yaml"}


@pytest.mark.parametrize("inventory", INVENTORIES, ids=lambda p: p.name)
@pytest.mark.parametrize("policy", [*BUILTIN_POLICIES, *[str(p) for p in POLICIES]])
def test_every_example_passes_check(inventory: Path, policy: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", "--cluster", str(inventory), "--policy", policy]) == 0, capsys.readouterr().err


def test_policies_default_is_the_builtin_default() -> None:
    assert (REPO / "policies" / "default.yaml").read_text() == builtin_policy_text("default")


def test_check_json_summary_counts(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", "--cluster", str(REPO / "examples" / "training-400.cluster.yaml"), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["nodes"] == 400
    assert summary["gpus"] == 3200
    assert summary["models"][0]["gpu_model"] == "H100"
    # 400 x (900 W host + 8 x 75 W idle GPUs) = 600 kW idle; x 1.2 PUE = 720 kW facility.
    assert summary["idle_kw"] == pytest.approx(600.0)
    assert summary["facility_idle_kw"] == pytest.approx(720.0)
    assert summary["quota_total_gpus"] == pytest.approx(3200)
    assert summary["warnings"] == []


def test_quota_overcommit_warns(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = (REPO / "examples" / "lab-a100.cluster.yaml").read_text().replace("quota_gpus: 6,", "quota_gpus: 9,")
    path = tmp_path / "lab.yaml"
    path.write_text(text)
    assert main(["check", "--cluster", str(path)]) == 0
    out = capsys.readouterr().out
    assert "quotas add up to 13 GPUs, more than the 10 installed" in out


def test_mac_range_expands_per_node() -> None:
    from greengpu.config.inventory import load_cluster

    cluster = load_cluster(REPO / "examples" / "lab-a100.cluster.yaml")
    macs = {n.name: n.mac for n in cluster.nodes}
    assert macs == {"lab-srv1": "3c:ec:ef:10:20:01", "lab-srv2": "3c:ec:ef:10:20:02", "lab-ws1": "3c:ec:ef:10:20:10"}


def test_unquoted_off_and_times_are_understood(tmp_path: Path) -> None:
    path = tmp_path / "p.yaml"
    path.write_text("capping:\n  classes:\n    interactive: {mode: off}\nsleep:\n  windows:\n"
                    "    - {days: [fri-mon], start: 19:00, end: 07:00}\n")
    policy = load_policy(str(path))
    assert policy.capping.classes["interactive"].mode == "off"
    window = policy.sleep.windows[0]
    assert window.days == ("fri", "sat", "sun", "mon")
    assert (window.start_minute, window.end_minute) == (19 * 60, 7 * 60)
