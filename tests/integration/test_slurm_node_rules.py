"""The daemon's Slurm body against a real slurmctld (the integration harness): a node in SuspendExcNodes is never
suspended though idle; a job pinned with `-w` wakes its own node and no other; a node whose wake never registers
goes `down~` at ResumeTimeout and is then counted failed, alerted once and never planned as capacity; `greengpu
slurm power-down` refuses the excluded node. Needs root
and `slurm-wlm munge` (installed by .ci/run); about a minute (ResumeTimeout 15 s, boots of 2 s)."""

from __future__ import annotations

import json
import sys
import threading
from dataclasses import replace

import pytest
from inventories import a100_type, wol_node, write_inventory
from slurm_harness import SlurmCluster
from test_slurm_power_save import (
    MACS,
    greengpu,
    slurm_cluster,  # noqa: F401 - the real Slurm fixture, used by its name
    write_hook_wrappers,
)

from greengpu.backends import slurm
from greengpu.config.inventory import load_cluster
from greengpu.config.policy import load_policy
from greengpu.control.bodies.slurm_body import SlurmBody
from greengpu.control.daemon.audit import Alerts, AuditLog
from greengpu.control.daemon.service import Daemon
from greengpu.control.daemon.store import DaemonStore
from greengpu.model import PowerState, WakeNode

RESUME_TIMEOUT_S = 15


@pytest.mark.parametrize("slurm_cluster", [3], indirect=True)
def test_excluded_pinned_and_failed_nodes_on_a_real_slurm(
        slurm_cluster: SlurmCluster, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    root = slurm_cluster.root
    # Magic packets start node2 only: a wake-up of node1 never registers (its ResumeTimeout runs out).
    port = slurm_cluster.listen_for_magic_packets({"node2": MACS["node2"]})
    inventory = write_inventory(root / "cluster.yaml", {"gpu4": a100_type(gpus=4, host_idle_w=300, boot_s=10)},
                                [wol_node("node[1-3]", "gpu4", MACS["node1"], port)])
    power_off = slurm_cluster.power_off_script()
    write_hook_wrappers(root, f"--cluster {inventory} --state {root / 'hooks.db'} --log {root / 'log' / 'hooks.log'} "
                              f"--suspend-command '{sys.executable} {power_off} {root} {{node}}'")
    slurm_cluster.write_config(root / "suspend.sh", root / "resume.sh", root / "resume-failed.sh",
                               resume_timeout_s=RESUME_TIMEOUT_S)
    with slurm_cluster.conf.open("a") as conf:
        conf.write("SuspendExcNodes=node3\n")
    slurm_cluster.start()
    monkeypatch.setenv("SLURM_CONF", str(slurm_cluster.conf))
    # `greengpu slurm power-down` refuses the node Slurm keeps out of power saving, in one line, exit 2.
    refused = greengpu("slurm", "--cluster", str(inventory), "--state", str(root / "hooks.db"), "power-down",
                       "node3", env=slurm_cluster.env)
    assert refused.returncode == 2 and "node3: Slurm keeps them out of power saving" in refused.stderr, refused
    checked = greengpu("check", "--cluster", str(inventory), "--slurm-live", "--json", env=slurm_cluster.env)
    assert checked.returncode == 0, checked.stderr
    assert any(w.startswith("node3: the policy may sleep them but Slurm keeps them out of power saving")
               for w in json.loads(checked.stdout)["warnings"]), checked.stdout

    base = load_policy("default")
    policy = replace(base, sleep=replace(base.sleep, idle_timeout_s=3.0, min_awake_s=0.0, min_asleep_s=0.0,
                                         warm_reserve_gpus=0, warm_reserve_busy_fraction=0.0))
    store = DaemonStore(root / "daemon")
    audit = AuditLog(root / "daemon" / "audit.jsonl")
    daemon = Daemon(SlurmBody(load_cluster(inventory), run=slurm.run), policy, store, audit, Alerts(audit))
    stop = threading.Event()
    failures: list[str] = []
    node3_flags: set[str] = set()

    def loop() -> None:
        while not stop.wait(1.0):
            report = daemon.tick()
            if not report.ok:
                failures.append(report.message)
            node3_flags.update(slurm_cluster.states().get("node3", set()))

    ticker = threading.Thread(target=loop, daemon=True)
    ticker.start()
    try:
        slurm_cluster.wait(lambda: all("POWERED_DOWN" in slurm_cluster.states()[n] for n in ("node1", "node2")),
                           60, "the daemon to put node1 and node2 to sleep")
        # A 4-GPU job pinned to node2, held so that only greengpu's wake plan can wake a node for it: node3 is
        # awake with 4 free GPUs and node1 asleep, yet only node2 may run it.
        job = slurm_cluster.run("sbatch", "--parsable", "-H", "-w", "node2", "--gres=gpu:4", "--wrap",
                                "sleep 1").stdout.strip()
        slurm_cluster.wait(lambda: slurm_cluster.states()["node2"] <= {"IDLE"}, 60,
                           "greengpu to wake node2 for the job pinned there")
        assert "POWERED_DOWN" in slurm_cluster.states()["node1"]
        woken = {e.node for e in store.entries() if e.kind == "wake"}
        assert woken == {"node2"}, woken
        slurm_cluster.run("scontrol", "release", job)
        slurm_cluster.wait(lambda: slurm_cluster.job_state(job) == "COMPLETED", 60, f"job {job} to complete")
        assert {node for node, _ in slurm_cluster.packets} >= {"node2"}

        # node1's wake-up never registers: at ResumeTimeout Slurm sets it down~.
        slurm_cluster.run("scontrol", "update", "nodename=node1", "state=power_up")
        slurm_cluster.wait(lambda: "DOWN" in slurm_cluster.states()["node1"], RESUME_TIMEOUT_S + 45,
                           "Slurm to set node1 DOWN at ResumeTimeout")
        pinned = slurm_cluster.run("sbatch", "--parsable", "-H", "-w", "node1", "--gres=gpu:4", "--wrap",
                                   "sleep 1").stdout.strip()
        slurm_cluster.wait(lambda: daemon.last_observation is not None
                           and pinned in {p.job.job_id for p in daemon.last_observation.snapshot.pending}
                           and "node1" in daemon.last_observation.node_faults, 30, "a tick that sees both")
    finally:
        stop.set()
        ticker.join(timeout=30)
    assert failures == []
    assert not node3_flags & {"POWERED_DOWN", "POWERING_DOWN", "POWER_DOWN"}, node3_flags  # never suspended
    assert not any(e.kind == "sleep" and e.node == "node3" for e in store.entries())
    seen = daemon.last_observation
    assert seen is not None and seen.snapshot.node_states["node1"].power is PowerState.FAILED
    assert "node1" not in {v.name for v in seen.sleep.asleep}
    assert "ResumeTimeout" in seen.node_faults["node1"] or "DOWN" in seen.node_faults["node1"]
    assert daemon.metrics.registry.get_sample_value("greengpu_daemon_nodes", {"state": "failed"}) == 1.0
    alerts = [r for r in audit.records() if r.get("alert") == "node_failed"]
    assert [a["node"] for a in alerts] == ["node1"]
    assert daemon.last_result is not None
    assert not any(isinstance(a, WakeNode) and a.node == "node1" for a in daemon.last_result.actions)
    slurm_cluster.run("scancel", pinned, check=False)
