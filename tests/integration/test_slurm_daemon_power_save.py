"""Daemon-driven power saving on a real Slurm 22.05 (deploy/slurm/slurm.conf.greengpu-daemon): with
SuspendTime=INFINITE on the partition greengpu manages, Slurm's idle timer leaves its idle nodes
alone while it still suspends a node outside it; `scontrol update state=POWER_DOWN` (what the daemon
runs) powers a managed node down through greengpu's SuspendProgram; a job for that node makes Slurm
resume it through greengpu's ResumeProgram. A global SuspendTime=INFINITE
would switch power saving off as a whole: Slurm then refuses POWER_DOWN, which is why the shipped
lines keep it a number. Needs root and `slurm-wlm munge` (installed by .ci/run)."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
from inventories import a100_type, wol_node, write_inventory
from slurm_harness import SlurmCluster
from test_slurm_power_save import (  # the real-Slurm fixture and helpers of the power-save test
    MACS,
    slurm_cluster,  # noqa: F401 (a fixture, used by name)
    write_hook_wrappers,
)

DAEMON_CONF = Path(__file__).resolve().parents[2] / "deploy" / "slurm" / "slurm.conf.greengpu-daemon"
UNMANAGED_SUSPEND_TIME_S = 2
"""Slurm's own timer for the node outside greengpu's partition: short, so the test sees it fire."""


def shipped_partition_suspend_time() -> str:
    """The SuspendTime the shipped lines put on greengpu's partitions."""
    line = next(line for line in DAEMON_CONF.read_text().splitlines() if line.startswith("#PartitionName="))
    match = re.search(r"\bSuspendTime=(\S+)", line)
    assert match, line
    return match.group(1)


def daemon_managed_config(conf: Path, managed: str, unmanaged: str) -> None:
    """The harness's slurm.conf with the shipped daemon lines' split: the managed partition's timer off,
    the global timer on (short here) for a node outside it."""
    text = conf.read_text()
    partition = re.search(r"^PartitionName=gpu .*$", text, flags=re.M)
    assert partition and "\nSuspendTime=3600\n" in text
    # The power-save thread looks every 10 s by default; every second keeps the test short.
    text = text.replace("\nSuspendTime=3600\n", f"\nSuspendTime={UNMANAGED_SUSPEND_TIME_S}\n"
                        "SlurmctldParameters=power_save_interval=1\n")
    text = text.replace(partition.group(0),
                        f"PartitionName=gpu Nodes={managed} Default=YES MaxTime=INFINITE State=UP "
                        f"SuspendTime={shipped_partition_suspend_time()}\n"
                        f"PartitionName=other Nodes={unmanaged} MaxTime=INFINITE State=UP")
    conf.write_text(text)


@pytest.mark.parametrize("slurm_cluster", [3], indirect=True)
def test_slurm_timer_off_for_managed_nodes_and_power_down_still_works(
        slurm_cluster: SlurmCluster) -> None:  # noqa: F811 (the imported fixture)
    cluster = slurm_cluster
    root = cluster.root
    port = cluster.listen_for_magic_packets(MACS)
    inventory = write_inventory(root / "cluster.yaml", {"gpu4": a100_type(gpus=4, host_idle_w=300, boot_s=60)},
                                [wol_node("node[1-3]", "gpu4", MACS["node1"], port)])
    hook_log = root / "log" / "greengpu-hooks.log"
    write_hook_wrappers(root, f"--cluster {inventory} --state {root / 'state.db'} --log {hook_log} "
                              f"--suspend-command '{sys.executable} {cluster.power_off_script()} {root} {{node}}'")
    cluster.write_config(root / "suspend.sh", root / "resume.sh", root / "resume-failed.sh")
    daemon_managed_config(cluster.conf, managed="node[1-2]", unmanaged="node3")
    cluster.start()

    # The daemon decides: node2 goes down now, through greengpu's SuspendProgram.
    cluster.run("scontrol", "update", "nodename=node2", "state=POWER_DOWN")
    # Slurm's timer still runs (node3, outside the partition, is suspended by it) but leaves node1 alone,
    # idle exactly as long.
    cluster.wait(lambda: "POWERED_DOWN" in cluster.states()["node3"], 60, "Slurm's timer to power node3 down")
    cluster.wait(lambda: "POWERED_DOWN" in cluster.states()["node2"], 60, "node2 powered down on request")
    assert cluster._is_off("node2") and cluster._is_off("node3")  # greengpu's suspend command ran
    assert cluster.states()["node1"] == {"IDLE"} and not cluster._is_off("node1")
    assert "node1" not in hook_log.read_text()

    # Slurm resumes the node for a job it schedules there: greengpu's ResumeProgram sends the packet and
    # the node boots for the job. (That such a job then runs once, never requeued, test_slurm_power_save
    # shows; Slurm notices a finished boot only on its 30 s housekeeping pass, so it is not waited for.)
    job = cluster.run("sbatch", "--parsable", "-w", "node2", "--gres=gpu:1", "--wrap", "true").stdout.strip()
    cluster.wait(lambda: [node for node, _ in cluster.packets] == ["node2"] and not cluster._is_off("node2"), 30,
                 "greengpu's ResumeProgram to wake node2 for the job")
    assert cluster.job_state(job) in ("CONFIGURING", "RUNNING", "COMPLETED")
    assert "wake-on-LAN sent to node2" in hook_log.read_text() and f"Slurm ResumeProgram for job {job}" in \
        hook_log.read_text()
    assert cluster.states()["node1"] == {"IDLE"}

    # A global SuspendTime=INFINITE switches power saving off: Slurm refuses the daemon's POWER_DOWN.
    text = cluster.conf.read_text()
    cluster.conf.write_text(text.replace(f"\nSuspendTime={UNMANAGED_SUSPEND_TIME_S}\n", "\nSuspendTime=INFINITE\n"))
    cluster.run("scontrol", "reconfigure")
    refused = cluster.run("scontrol", "update", "nodename=node1", "state=POWER_DOWN", check=False)
    assert refused.returncode != 0 and "Invalid node state specified" in refused.stderr, refused
    assert cluster.states()["node1"] == {"IDLE"}
