"""The failed-suspend watcher's way back to service, with Slurm's answers scripted (the real slurmctld runs it in
tests/integration/test_slurm_power_save.py): a node whose slurmd answers the reconfigure is back in service; one
that never answers is most likely asleep after all (a power-off can cut ssh short) and is recorded asleep again,
alerted, never set DOWN (which would keep a sleeping node out of service for good)."""

from __future__ import annotations

from pathlib import Path

import pytest
from inventories import a100_type, wol_node, write_inventory

from greengpu.backends import slurm
from greengpu.backends.wol import Waker
from greengpu.config.inventory import load_cluster
from greengpu.config.policy import load_policy
from greengpu.control.hooks import slurm_suspend
from greengpu.control.hooks.sleep_control import SleepControl
from greengpu.control.hooks.state_store import StateStore


class ScriptedSlurm:
    def __init__(self, answers_after_reconfigures: dict[str, int | None]) -> None:
        self.answers_after = answers_after_reconfigures
        self.reconfigures = 0
        self.updates: list[tuple[str, ...]] = []

    def nodes(self, names: list[str]) -> dict[str, slurm.SlurmNode]:
        states = {}
        for name in names:
            after = self.answers_after[name]
            up = after is not None and self.reconfigures >= after
            states[name] = slurm.SlurmNode(name, frozenset({"IDLE"} if up else {"IDLE", "POWERED_DOWN"}))
        return states

    def run(self, name: str, *args: str, **_: object) -> str:
        assert (name, *args) == ("scontrol", "reconfigure")
        self.reconfigures += 1
        return ""


def test_an_awake_node_comes_back_and_a_silent_one_is_recorded_asleep(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    cluster = load_cluster(write_inventory(tmp_path / "c.yaml", {"g": a100_type(gpus=4)},
                                           [wol_node("node[1-2]", "g", "02:00:5e:00:00:01", 9)]))
    clock = iter(float(t) for t in range(10_000))
    control = SleepControl(StateStore(tmp_path / "s.db"), Waker(cluster), load_policy("default").sleep,
                           clock=lambda: next(clock))
    scripted = ScriptedSlurm({"node1": 2, "node2": None})
    monkeypatch.setattr(slurm, "nodes", scripted.nodes)
    monkeypatch.setattr(slurm, "run", scripted.run)
    monkeypatch.setattr(slurm, "update_nodes", lambda *a, **k: scripted.updates.append(a))
    now = [0.0]

    def wait(seconds: float) -> None:
        now[0] += seconds

    silent = slurm_suspend.return_to_service({"node1": "node1: exited 255", "node2": "node2: exited 255"},
                                             control, timeout_s=60, wait=wait, monotonic=lambda: now[0])
    assert silent == ["node2"]
    assert scripted.updates == []  # nothing set DOWN
    assert 2 <= scripted.reconfigures <= 13  # repeated, at most every 5 s
    records = {r.node: r.state for r in control.store.records()}
    assert records == {"node2": "asleep"}
    assert [kind for _, node, kind, _ in control.store.events() if node == "node1"] == ["returned"]
    assert len(control.alerts) == 1 and control.alerts[0].startswith("node2: suspend command failed but the node")
