"""SuspendExcNodes and SuspendExcParts as `scontrol show config` and slurm.conf give them (absent, `(null)`, hostlist
expressions, `:count` sets), which nodes may be powered down now, and `greengpu check` warning where the inventory
and Slurm disagree. The daemon's body and `slurm power-down` against a real slurmctld:
tests/integration/test_slurm_node_rules.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from inventories import a100_type, write_inventory

from greengpu.backends.slurm import SlurmError
from greengpu.backends.slurm_config import (
    SuspendExclusions,
    disagreements,
    exclusions_from,
    parse_exc_nodes,
    read_exclusions,
)
from greengpu.cli import main


@pytest.mark.parametrize("value, sets", [
    ("", ()), ("(null)", ()), ("node4", (({"node4"}, None),)),
    ("n[1-3],n[10-11]:2,m[1-2]", (({"n1", "n2", "n3", "n10", "n11"}, 2), ({"m1", "m2"}, None))),
])
def test_suspend_exc_nodes_syntax(value: str, sets: tuple[tuple[set[str], int | None], ...]) -> None:
    assert parse_exc_nodes(value) == tuple((frozenset(names), count) for names, count in sets)


def test_a_counted_set_keeps_its_count_of_usable_nodes_up() -> None:
    exclusions = SuspendExclusions(parse_exc_nodes("n[1-4]:2"))
    assert exclusions.may_suspend(["n1", "n2", "n3"], up=["n1", "n2", "n3", "n4"]) == ["n1", "n2"]
    assert exclusions.may_suspend(["n1"], up=["n1", "n2"]) == []  # only two up: both stay
    assert not exclusions.always("n1")


CONFIG = """Configuration data as of 2026-12-02T14:10:21
ResumeTimeout           = 90 sec
SuspendExcNodes         = {nodes}
SuspendExcParts         = {parts}
"""


@pytest.mark.parametrize("nodes, parts, always, never", [
    ("(null)", "(null)", set(), {"node1", "node4"}),
    ("node4", "(null)", {"node4"}, {"node1"}),
    ("node[3-4]", "debug", {"node3", "node4", "node9"}, {"node1"}),
    ("node[1-2]:1", "(null)", set(), {"node1", "node2"}),
])
def test_exclusions_read_from_scontrol_show_config(nodes: str, parts: str, always: set[str], never: set[str]) -> None:
    def run(name: str, *args: str) -> str:
        if args == ("show", "config"):
            return CONFIG.format(nodes=nodes, parts=parts)
        return "PartitionName=debug Nodes=node9 State=UP\nPartitionName=gpu Nodes=node[1-4]\n"

    exclusions = read_exclusions(run)
    assert all(exclusions.always(n) for n in always) and not any(exclusions.always(n) for n in never)


@pytest.mark.parametrize("value", ["node[1-", "node1:x"])
def test_a_bad_exclusion_fails_the_read_with_one_line(value: str) -> None:
    with pytest.raises(SlurmError, match="scontrol show config: SuspendExcNodes="):
        read_exclusions(lambda *args: CONFIG.format(nodes=value, parts="(null)"))


def test_check_warns_when_the_inventory_and_slurm_disagree(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    inventory = write_inventory(tmp_path / "c.yaml", {"g": a100_type(gpus=4)}, ['{name: "node[1-4]", type: g}'])
    conf = tmp_path / "slurm.conf"
    conf.write_text("ResumeTimeout=3000\nSuspendExcNodes=node4,other7\nSuspendExcParts=debug\n"
                    "NodeName=node[1-4] CPUs=2\nNodeName=other[7-9] CPUs=2 # not greengpu's\n"
                    "PartitionName=debug Nodes=node3\n")
    assert main(["check", "--cluster", str(inventory), "--policy", "default", "--slurm-conf", str(conf),
                 "--json"]) == 0
    warnings = json.loads(capsys.readouterr().out)["warnings"]
    assert any(w.startswith("node[3-4]: the policy may sleep them but Slurm keeps them") for w in warnings)
    # The reverse: nodes greengpu does not manage that Slurm may power down itself (other7 is excluded).
    assert any(w.startswith("other[8-9]: Slurm may power them down") for w in warnings)
    assert len([w for w in warnings if "Slurm" in w]) == 2, warnings
    assert disagreements(["node1"], exclusions_from("SuspendExcNodes=node1", None), policy_sleeps=False) == []
