"""Real Slurm power saving driven by greengpu: suspend idle nodes through the hooks, then a GPU job
makes Slurm call greengpu's ResumeProgram, whose magic packets (received on loopback) power the nodes
back on, and the job completes. Needs root and `slurm-wlm munge` (installed by .ci/run)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from inventories import a100_type, wol_node, write_inventory
from slurm_harness import SlurmCluster, missing_binaries

from greengpu.control.jobclass import SlurmJobs

MACS = {f"node{i}": f"02:00:5e:00:00:0{i}" for i in range(1, 5)}


def require_slurm() -> None:
    reasons = []
    if os.geteuid() != 0:
        reasons.append("root is needed (mknod of fake GPU devices, munged, time namespaces)")
    missing = missing_binaries()
    if missing:
        reasons.append(f"missing {', '.join(missing)} (apt-get install slurm-wlm munge)")
    if reasons:
        message = "; ".join(reasons)
        if os.environ.get("CI"):
            pytest.fail(f"real Slurm integration test cannot run in CI: {message}")
        pytest.skip(message)


def greengpu(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "greengpu", *args], capture_output=True, text=True, timeout=60,
                          env=env, check=False)


@pytest.fixture
def slurm_cluster(tmp_path: Path) -> SlurmCluster:
    require_slurm()
    root = Path(os.environ.get("GREENGPU_SLURM_TEST_DIR", "/tmp")) / f"greengpu-slurm-{os.getpid()}-{tmp_path.name}"
    root.mkdir(parents=True, exist_ok=True)
    cluster = SlurmCluster(root)
    try:
        yield cluster
    finally:
        cluster.stop()
    shutil.rmtree(root, ignore_errors=True)  # kept when stop() itself failed, for its logs


def test_greengpu_suspends_idle_nodes_and_wakes_them_for_a_gpu_job(slurm_cluster: SlurmCluster) -> None:
    root = slurm_cluster.root
    port = slurm_cluster.listen_for_magic_packets(MACS)
    inventory = write_inventory(root / "cluster.yaml", {"gpu4": a100_type(gpus=4, host_idle_w=300, boot_s=60)},
                                [wol_node("node[1-4]", "gpu4", MACS["node1"], port)])
    state = root / "state.db"
    hook_log = root / "log" / "greengpu-hooks.log"
    power_off = slurm_cluster.power_off_script()
    common = (f"--cluster {inventory} --state {state} --log {hook_log} "
              f"--suspend-command '{sys.executable} {power_off} {root} {{node}}'")
    # Slurm's hooks: one hostlist argument, no PATH, stdout and stderr closed; the wrappers add our options.
    for hook in ("suspend", "resume"):
        wrapper = root / f"{hook}.sh"
        wrapper.write_text(f"#!/bin/sh\nexec {sys.executable} -m greengpu slurm {common} {hook} \"$1\"\n")
        wrapper.chmod(0o755)
    slurm_cluster.write_config(root / "suspend.sh", root / "resume.sh")
    slurm_cluster.start()
    env = slurm_cluster.env
    options = ["--cluster", str(inventory), "--state", str(state)]

    # A job holds one GPU of node1: greengpu refuses to power that node down.
    busy = slurm_cluster.run("sbatch", "--parsable", "-w", "node1", "--gres=gpu:1",
                             "--comment=greengpu.class=inference", "--wrap", "sleep 300").stdout.strip()
    slurm_cluster.wait(lambda: slurm_cluster.job_state(busy) == "RUNNING", 30, "the holding job to run")
    # The node agent's Slurm class source reads the real scontrol: GPU 0 of node1 runs it, as inference.
    on_node1 = SlurmJobs("node1", run=lambda argv: slurm_cluster.run(*argv).stdout).jobs([])
    assert {i: (j.job_id, j.job_class) for i, j in on_node1.items()} == {0: (busy, "inference")}
    assert SlurmJobs("node2", run=lambda argv: slurm_cluster.run(*argv).stdout).jobs([]) == {}
    # Four GPUs of node1 cannot be had while one is taken: the job waits with Reason=Resources, and the
    # agent's source reports capacity short (relax_when_queued then lifts caps) until it is cancelled.
    source = SlurmJobs("node1", run=lambda argv: slurm_cluster.run(*argv).stdout)

    def short_now() -> bool:
        source.jobs([])
        return source.capacity_short()

    blocked = slurm_cluster.run("sbatch", "--parsable", "-w", "node1", "--gres=gpu:4", "--wrap", "true").stdout.strip()
    slurm_cluster.wait(short_now, 30, f"job {blocked} to wait for resources")
    slurm_cluster.run("scancel", blocked)
    slurm_cluster.wait(lambda: not short_now(), 30, f"job {blocked} to leave the queue")
    refused = greengpu("slurm", *options, "power-down", "node1", env=env)
    assert refused.returncode == 2
    assert "node1: jobs are running there; a busy node is never powered down" in refused.stderr

    # greengpu's planner powers the idle nodes down; Slurm runs greengpu's SuspendProgram.
    assert greengpu("slurm", *options, "power-down", "node[3-4]", env=env).returncode == 0
    slurm_cluster.wait(lambda: all("POWERED_DOWN" in slurm_cluster.states()[n] for n in ("node3", "node4")), 60,
                       "node3 and node4 powered down")
    assert slurm_cluster._is_off("node3") and slurm_cluster._is_off("node4")  # the suspend command ran
    status = json.loads(greengpu("slurm", *options, "status", "--json", env=env).stdout)
    assert {(r["node"], r["state"], r["reason"]) for r in status} == {
        ("node3", "asleep", "Slurm SuspendProgram (power saving)"),
        ("node4", "asleep", "Slurm SuspendProgram (power saving)")}
    assert slurm_cluster.packets == []

    # A job needing 3 whole GPU nodes: node1 has only 3 GPUs free, so Slurm must resume node3 and node4.
    job = slurm_cluster.run("sbatch", "--parsable", "-N", "3", "--gres=gpu:4", "--wrap", "echo gpu job done").stdout
    job = job.strip()
    slurm_cluster.wait(lambda: slurm_cluster.job_state(job) == "COMPLETED", 120, f"job {job} to complete")

    woken = sorted(node for node, _ in slurm_cluster.packets)
    assert woken == ["node3", "node4"]
    for node, packet in slurm_cluster.packets:
        mac = bytes.fromhex(MACS[node].replace(":", ""))
        assert len(packet) == 102 and packet == b"\xff" * 6 + mac * 16
    log_text = hook_log.read_text()
    assert "wake-on-LAN sent to node3" in log_text and "wake-on-LAN sent to node4" in log_text
    assert f"Slurm ResumeProgram for job {job}" in log_text

    # Verification: Slurm reports the nodes up, so greengpu's open wake-ups are closed.
    verified = greengpu("slurm", *options, "verify", env=env)
    assert verified.returncode == 0, verified.stderr
    assert sorted(line.split(":")[0] for line in verified.stdout.splitlines()) == ["node3", "node4"]
    status = json.loads(greengpu("slurm", *options, "status", "--json", env=env).stdout)
    assert {(r["node"], r["state"]) for r in status} == {("node3", "up"), ("node4", "up")}
