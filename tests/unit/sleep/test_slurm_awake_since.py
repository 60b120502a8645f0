"""The Slurm body tracks when a node came up (`power_since_s`), so `min_awake_s` applies there as in every
other body: from the `boot_time` Slurm reports (slurmd registers anew after a boot, so a node resumed from
power save counts from its wake). It used to be 0.0 for every node, and a node just woken could be put
straight back to sleep."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from inventories import a100_type, write_inventory

from greengpu.backends.slurm_config import SuspendExclusions
from greengpu.config.inventory import load_cluster
from greengpu.config.policy import load_policy
from greengpu.control.bodies.slurm_body import SlurmBody, awake_since_s
from greengpu.sleep.sleep_wake import plan_sleep
from greengpu.sleep.work_waiting import NOTHING_WAITS

DATA = Path(__file__).parents[2] / "data" / "slurm"
SQUEUE_EMPTY = json.dumps({"jobs": []})


def sinfo(boot_time: object) -> str:
    """Both captured nodes idle and awake, node1 up for long, node2 with `boot_time` (None: not reported)."""
    document = json.loads((DATA / "sinfo-22.05.json").read_text())
    for record in document["nodes"]:
        record["state"], record["state_flags"] = "idle", []
        record["boot_time"] = 1000
        if record["name"] == "node2":
            if boot_time is None:
                record.pop("boot_time", None)
            else:
                record["boot_time"] = boot_time
    return json.dumps(document)


def slurm_body(tmp_path: Path, sinfo_text: str) -> SlurmBody:
    cluster = load_cluster(write_inventory(tmp_path / "c.yaml", {"g": a100_type(gpus=4)},
                                           ['{name: "node[1-2]", type: g}']))
    answers = {"squeue": SQUEUE_EMPTY, "sinfo": sinfo_text}
    return SlurmBody(cluster, run=lambda name, *args: answers[name], exclusions=SuspendExclusions())


def test_boot_time_in_either_json_form_is_when_the_node_came_up() -> None:
    assert awake_since_s({"boot_time": 5000}, 9000.0) == 5000.0
    assert awake_since_s({"boot_time": {"set": True, "infinite": False, "number": 5000}}, 9000.0) == 5000.0
    assert awake_since_s({"boot_time": 99_999}, 9000.0) == 9000.0  # a clock ahead of ours: up now at the latest
    assert awake_since_s({}, 9000.0) == 0.0 and awake_since_s(None, 9000.0) == 0.0  # unknown: long up
    assert awake_since_s({"boot_time": 0}, 9000.0) == 0.0


def test_a_node_booted_moments_ago_is_not_put_back_to_sleep_before_min_awake_s(tmp_path: Path) -> None:
    base = load_policy("default")
    policy = replace(base, sleep=replace(base.sleep, idle_timeout_s=60.0, min_awake_s=300.0, warm_reserve_gpus=0,
                                         warm_reserve_busy_fraction=0.0))
    start_s = 1_000_000.0
    booted = slurm_body(tmp_path, sinfo(int(start_s)))
    booted.observe(start_s, 0, 0)  # first seen idle now
    later_s = start_s + 120.0  # idle past the timeout, awake for less than min_awake_s
    seen = booted.observe(later_s, 0, 0)
    views = {v.name: v for v in seen.sleep.idle_awake}
    assert views["node2"].power_since_s == start_s and views["node1"].power_since_s < start_s
    slept = [a.node for a in plan_sleep(seen.sleep, policy.sleep, NOTHING_WAITS)]
    assert "node2" not in slept and "node1" in slept
    assert "node2" in [a.node for a in plan_sleep(booted.observe(start_s + 400.0, 0, 0).sleep, policy.sleep,
                                                  NOTHING_WAITS)]  # up long enough now
