"""Real Slurm power saving driven by greengpu: suspend idle nodes through the hooks, then a GPU job
makes Slurm call greengpu's ResumeProgram, whose magic packets (received on loopback) power the nodes
back on, and the job completes, once after a cold boot (power-off) and once after a resume from
suspend to RAM (a frozen slurmd and the shipped systemd-sleep hook). In both, Slurm's resume contract
holds: the node is back in service and its job ran once, never requeued. Needs root and
`slurm-wlm munge` (installed by .ci/run)."""

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

from greengpu.control.agent.jobclass import SlurmJobs

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


def write_hook_wrappers(root: Path, common: str) -> None:
    """Slurm's hooks: one hostlist argument, no PATH, stdout and stderr closed; the wrappers add our options."""
    for hook in ("suspend", "resume", "resume-failed"):
        wrapper = root / f"{hook}.sh"
        wrapper.write_text(f"#!/bin/sh\nexec {sys.executable} -m greengpu slurm {common} {hook} \"$1\"\n")
        wrapper.chmod(0o755)


def assert_back_in_service_and_not_requeued(cluster: SlurmCluster, job: str, nodes: list[str]) -> None:
    """Slurm's resume contract held: the nodes registered in time, the job ran once, nothing was set DOWN."""
    record = cluster.run("scontrol", "-o", "show", "job", job).stdout
    assert "Restarts=0" in record.split(), record
    for node in nodes:
        flags = cluster.states()[node]
        assert flags <= {"IDLE", "MIXED", "ALLOCATED", "COMPLETING"}, (node, flags)
    controller_log = (cluster.root / "log" / "slurmctld.log").read_text()
    for node in nodes:
        assert f"node {node} not resumed by ResumeTimeout" not in controller_log
    assert f"requeue job JobId={job}" not in controller_log


def greengpu(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "greengpu", *args], capture_output=True, text=True, timeout=60,
                          env=env, check=False)


@pytest.fixture
def slurm_cluster(tmp_path: Path, request: pytest.FixtureRequest) -> SlurmCluster:
    require_slurm()
    root = Path(os.environ.get("GREENGPU_SLURM_TEST_DIR", "/tmp")) / f"greengpu-slurm-{os.getpid()}-{tmp_path.name}"
    root.mkdir(parents=True, exist_ok=True)
    cluster = SlurmCluster(root, node_count=getattr(request, "param", 4))
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
    write_hook_wrappers(root, common)
    slurm_cluster.write_config(root / "suspend.sh", root / "resume.sh", root / "resume-failed.sh")
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
        return source.work_waiting().waiting

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
    assert_back_in_service_and_not_requeued(slurm_cluster, job, ["node3", "node4"])
    log_text = hook_log.read_text()
    assert "wake-on-LAN sent to node3" in log_text and "wake-on-LAN sent to node4" in log_text
    assert f"Slurm ResumeProgram for job {job}" in log_text
    assert "ResumeFailProgram" not in log_text

    # Verification: Slurm reports the nodes up, so greengpu's open wake-ups are closed.
    verified = greengpu("slurm", *options, "verify", env=env)
    assert verified.returncode == 0, verified.stderr
    assert sorted(line.split(":")[0] for line in verified.stdout.splitlines()) == ["node3", "node4"]
    status = json.loads(greengpu("slurm", *options, "status", "--json", env=env).stdout)
    assert {(r["node"], r["state"]) for r in status} == {("node3", "up"), ("node4", "up")}


@pytest.mark.parametrize("slurm_cluster", [2], indirect=True)
def test_a_node_resumed_from_ram_registers_again_and_keeps_its_job(slurm_cluster: SlurmCluster) -> None:
    """Suspend to RAM: slurmd frozen, thawed by the wake-up; the shipped sleep hook restarts it with -b, so
    slurmctld sees the new boot it waits for (without the hook it marks the node DOWN and requeues).
    Meanwhile node1's wake-up never arrives: Slurm gives up at ResumeTimeout and runs greengpu's
    ResumeFailProgram, which fails the wake-up and raises the alert."""
    root = slurm_cluster.root
    port = slurm_cluster.listen_for_magic_packets({"node2": MACS["node2"]})  # node1's packets are lost
    inventory = write_inventory(root / "cluster.yaml", {"gpu4": a100_type(gpus=4, host_idle_w=300, boot_s=10)},
                                [wol_node("node[1-2]", "gpu4", MACS["node1"], port)])
    state = root / "state.db"
    hook_log = root / "log" / "greengpu-hooks.log"
    suspend_to_ram = slurm_cluster.suspend_to_ram_script()
    write_hook_wrappers(root, f"--cluster {inventory} --state {state} --log {hook_log} "
                              f"--suspend-command '{sys.executable} {suspend_to_ram} {root} {{node}}'")
    slurm_cluster.ram_sleepers = {"node1", "node2"}
    slurm_cluster.write_config(root / "suspend.sh", root / "resume.sh", root / "resume-failed.sh",
                               resume_timeout_s=25)
    slurm_cluster.start()
    env = slurm_cluster.env
    options = ["--cluster", str(inventory), "--state", str(state)]

    assert greengpu("slurm", *options, "power-down", "node[1-2]", env=env).returncode == 0
    slurm_cluster.wait(lambda: all("POWERED_DOWN" in slurm_cluster.states()[n] for n in ("node1", "node2")), 60,
                       "node1 and node2 powered down")
    slurm_cluster.wait(lambda: slurm_cluster._is_frozen("node1") and slurm_cluster._is_frozen("node2"), 10,
                       "their slurmd frozen (suspended to RAM)")
    boot_before = _boot_time(slurm_cluster, "node2")

    job = slurm_cluster.run("sbatch", "--parsable", "-w", "node2", "--gres=gpu:1", "--wrap", "echo resumed").stdout
    job = job.strip()
    lost = slurm_cluster.run("sbatch", "--parsable", "-w", "node1", "--gres=gpu:1", "--wrap", "true").stdout.strip()
    slurm_cluster.wait(lambda: slurm_cluster.job_state(job) == "COMPLETED", 60, f"job {job} to complete on node2")

    assert sorted(node for node, _ in slurm_cluster.packets) == ["?", "node2"]
    assert [r.returncode for r in slurm_cluster.hook_results] == [0], slurm_cluster.hook_results
    assert_back_in_service_and_not_requeued(slurm_cluster, job, ["node2"])
    assert _boot_time(slurm_cluster, "node2") > boot_before  # reported by slurmd -b: a new boot, as Slurm wants
    assert not (root / "flags" / "node2.resumed").exists()  # -b once: a later slurmd restart is a plain one
    verified = greengpu("slurm", *options, "verify", env=env)
    assert verified.returncode == 0, verified.stderr
    assert verified.stdout.startswith("node2: up")

    # node1 never came back: Slurm's ResumeTimeout (25 s) ends in greengpu's ResumeFailProgram.
    slurm_cluster.wait(lambda: "ALERT node1" in hook_log.read_text(), 40, "the ResumeFailProgram's alert for node1")
    assert "ALERT node1: did not wake (Slurm ResumeFailProgram: not registered by ResumeTimeout) after 1 " \
        "wake-up(s)" in hook_log.read_text()
    status = json.loads(greengpu("slurm", *options, "status", "--json", env=env).stdout)
    assert {(r["node"], r["state"]) for r in status} == {("node1", "failed"), ("node2", "up")}
    assert slurm_cluster.job_state(lost) == "PENDING"  # requeued by Slurm, never run on a sleeping node


def _boot_time(cluster: SlurmCluster, node: str) -> str:
    record = cluster.run("scontrol", "-o", "show", "node", node).stdout
    return next(part.split("=", 1)[1] for part in record.split() if part.startswith("BootTime="))


@pytest.mark.parametrize("slurm_cluster", [2], indirect=True)
def test_a_failed_suspend_is_recorded_alerted_and_the_node_returned_to_service(slurm_cluster: SlurmCluster) -> None:
    """The shipped wrapper's ssh fails (exit 255) on node1 and `greengpu node-suspend` refuses on node2 (a GPU
    process runs): neither is recorded asleep, the alert names the exit code and stderr, and Slurm has both
    back in service (IDLE, not POWERED_DOWN) so the next job runs at once: no ResumeProgram, no ResumeTimeout,
    no requeue. Before the fix the hook logged "suspend command started", status said asleep, and the job
    waited out ResumeTimeout on a node Slurm held powered down while its slurmd ran."""
    root = slurm_cluster.root
    port = slurm_cluster.listen_for_magic_packets(MACS)
    inventory = write_inventory(root / "cluster.yaml", {"gpu4": a100_type(gpus=4, host_idle_w=300, boot_s=10)},
                                [wol_node("node[1-2]", "gpu4", MACS["node1"], port)])
    state = root / "state.db"
    hook_log = root / "log" / "greengpu-hooks.log"
    # node1: what ssh does when the node cannot be reached; node2: node-suspend with a GPU process on GPU 0.
    suspend = root / "suspend-node.sh"
    suspend.write_text(
        "#!/bin/sh\n"
        "if [ \"$1\" = node1 ]; then echo \"ssh: connect to host $1 port 22: Connection refused\" >&2; exit 255; fi\n"
        f"exec {sys.executable} -m greengpu node-suspend --backend fake --fake-gpus 2xA100 --fake-busy 0\n")
    suspend.chmod(0o755)
    write_hook_wrappers(root, f"--cluster {inventory} --state {state} --log {hook_log} "
                              f"--suspend-command '{suspend} {{node}}'")
    slurm_cluster.write_config(root / "suspend.sh", root / "resume.sh", root / "resume-failed.sh",
                               resume_timeout_s=30)
    slurm_cluster.start()
    env = slurm_cluster.env
    options = ["--cluster", str(inventory), "--state", str(state)]

    assert greengpu("slurm", *options, "power-down", "node[1-2]", env=env).returncode == 0
    alerted = ("ALERT node1", "ALERT node2")
    slurm_cluster.wait(lambda: hook_log.exists() and all(a in hook_log.read_text() for a in alerted), 30,
                       "the failed suspends' alerts")
    log_text = hook_log.read_text()
    assert "ALERT node1: suspend command exited 255" in log_text
    assert "ssh: connect to host node1 port 22: Connection refused" in log_text
    assert "ALERT node2: suspend command exited 1" in log_text
    assert "not suspending: work on GPU 0" in log_text
    status = json.loads(greengpu("slurm", *options, "status", "--json", env=env).stdout)
    assert {(r["node"], r["state"]) for r in status} == {("node1", "suspend_failed"), ("node2", "suspend_failed")}

    # Slurm has them back: IDLE and responding, not powered down, their slurmd never stopped.
    slurm_cluster.wait(lambda: all(slurm_cluster.states()[n] == {"IDLE"} for n in ("node1", "node2")), 90,
                       "node1 and node2 back in service")
    assert slurm_cluster.slurmd_run_state("node1") not in ("gone", "T", "t")
    slurm_cluster.wait(lambda: hook_log.read_text().count("back in service in Slurm") == 2, 10,
                       "the watcher to log both nodes back in service")
    job = slurm_cluster.run("sbatch", "--parsable", "-N", "2", "--gres=gpu:1", "--wrap", "echo ran").stdout.strip()
    slurm_cluster.wait(lambda: slurm_cluster.job_state(job) == "COMPLETED", 30, f"job {job} to complete at once")
    assert_back_in_service_and_not_requeued(slurm_cluster, job, ["node1", "node2"])
    assert slurm_cluster.packets == []  # never "resumed": Slurm knew they were awake
    assert "ResumeFailProgram" not in hook_log.read_text()
