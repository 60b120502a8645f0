"""Failed and drained nodes, and Slurm's SuspendExcNodes/SuspendExcParts, as the Slurm body and the daemon take
them: a `down~` node (ResumeTimeout reached) is failed, counted in the failed-node gauge and alerted once with
Slurm's reason, never slept nor planned as capacity; a node Slurm keeps out of power saving is never slept."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_slurm_constraints import ALL_ASLEEP, DATA, SQUEUE, body, only_jobs, sinfo

from greengpu.backends.slurm_config import (
    SuspendExclusions,
    parse_exc_nodes,
)
from greengpu.config.policy import load_policy
from greengpu.control.bodies.body import ActionFailed
from greengpu.control.daemon.audit import Alerts, AuditLog
from greengpu.control.daemon.service import Daemon
from greengpu.control.daemon.store import DaemonStore
from greengpu.model import PowerState, SleepNode, WakeNode
from greengpu.policy import SchedulerPolicy
from greengpu.sched.core import schedule_cycle

RUNNING_JOB = json.loads((DATA / "squeue-22.05.json").read_text())["jobs"][0]
RESUME_TIMEOUT = "ResumeTimeout reached [slurm@2026-12-02T14:10:00]"
NO_JOBS = {**SQUEUE, "jobs": []}


def test_a_node_failed_by_resume_timeout_is_failed_not_asleep_and_not_capacity(tmp_path: Path) -> None:
    power = {**ALL_ASLEEP, "node1": ["POWERED_DOWN"]}
    seen = body(tmp_path, only_jobs("6"), sinfo(power, state={"node1": "down"},
                                                 reason={"node1": RESUME_TIMEOUT})).observe(1000.0, 0, 0)
    assert seen.snapshot.node_states["node1"].power is PowerState.FAILED
    assert seen.node_faults == {"node1": f"DOWN+POWERED_DOWN: {RESUME_TIMEOUT}"}
    assert "node1" not in {v.name for v in seen.sleep.asleep} | {v.name for v in seen.sleep.idle_awake}
    # The core wakes another node for the job, never the failed one (which it would pick first otherwise).
    result = schedule_cycle(seen.snapshot, SchedulerPolicy(), incremental=False)
    assert [a.node for a in result.actions if isinstance(a, WakeNode)] == ["node2"]


def test_drained_and_not_responding_nodes_are_neither_slept_nor_woken(tmp_path: Path) -> None:
    power = {"node1": ["POWERED_DOWN", "DRAIN"], "node2": ["POWERED_DOWN", "NOT_RESPONDING"], "node3": ["DRAIN"]}
    seen = body(tmp_path, NO_JOBS, sinfo(power)).observe(1000.0, 0, 0)
    assert [v.name for v in seen.sleep.asleep] == [] and [v.name for v in seen.sleep.idle_awake] == ["node4"]
    assert set(seen.node_faults) == {"node2"} and seen.sleep.ready_idle_gpus == 4


def test_the_daemon_counts_failed_nodes_and_alerts_once_per_node(tmp_path: Path) -> None:
    failed = sinfo({"node1": ["POWERED_DOWN"]}, state={"node1": "down"}, reason={"node1": RESUME_TIMEOUT})
    slurm = body(tmp_path, NO_JOBS, failed)
    audit = AuditLog(tmp_path / "audit.jsonl")
    daemon = Daemon(slurm, load_policy("default"), DaemonStore(tmp_path / "state"), audit, Alerts(audit),
                    dry_run=True, clock=lambda: 1000.0)
    for _ in range(3):
        assert daemon.tick().ok
    alerts = [r for r in audit.records() if r.get("alert") == "node_failed"]
    assert len(alerts) == 1 and alerts[0]["node"] == "node1" and RESUME_TIMEOUT in alerts[0]["message"]
    assert daemon.metrics.registry.get_sample_value("greengpu_daemon_nodes", {"state": "failed"}) == 1.0
    assert not any(isinstance(a, SleepNode) and a.node == "node1" for a in daemon.last_result.actions)


def test_nodes_slurm_keeps_up_are_never_slept(tmp_path: Path) -> None:
    exclusions = SuspendExclusions(parse_exc_nodes("node[1-2]:1,node4"))
    seen = body(tmp_path, NO_JOBS, sinfo({}), exclusions).observe(1000.0, 0, 0)
    # node4 always up; of node[1-2] one stays up; node3 free to sleep.
    assert [v.name for v in seen.sleep.idle_awake] == ["node1", "node3"]
    with pytest.raises(ActionFailed, match="SuspendExcNodes"):
        body(tmp_path, NO_JOBS, sinfo({}), exclusions).act(SleepNode("node4", "idle"), 1000.0)


def test_unreadable_exclusions_sleep_nothing(tmp_path: Path) -> None:
    slurm = body(tmp_path, NO_JOBS, sinfo({}), exclusions=None)
    assert slurm.observe(1000.0, 0, 0).sleep.idle_awake == ()  # scontrol show config not answered: fail safe


def test_an_allocated_node_takes_no_more_work_whatever_gpus_its_jobs_leave(tmp_path: Path) -> None:
    # node1 runs a 1-GPU job (3 of its GPUs free by gres_detail); a 2-GPU job waits, node2 is asleep.
    running = {**RUNNING_JOB, "nodes": "node1", "gres_detail": ["gpu:1(IDX:0)"], "tres_per_node": "gres:gpu:1"}
    waiting = {**only_jobs("6")["jobs"][0], "tres_per_node": "gres:gpu:2"}
    squeue = {**SQUEUE, "jobs": [running, waiting]}
    power = {"node2": ["POWERED_DOWN"], "node3": ["POWERED_DOWN"], "node4": ["POWERED_DOWN"]}
    for node1, woken in (("mixed", []), ("allocated", ["node2"])):  # --exclusive, or every CPU taken
        seen = body(tmp_path, squeue, sinfo(power, state={"node1": node1})).observe(1000.0, 0, 0)
        result = schedule_cycle(seen.snapshot, SchedulerPolicy(), incremental=False)
        assert [a.node for a in result.actions if isinstance(a, WakeNode)] == woken, node1
