"""Cloud pools as real Slurm cloud nodes (State=CLOUD, Feature=spot / on-demand): a job submitted with
`--constraint=spot` makes slurmctld call greengpu's ResumeProgram (`greengpu cloud resume`), which runs the
pool's launch command (the fake provider in tests/helpers starts the node's slurmd as a fresh instance)
and gives Slurm the instance's address; the job runs there; after the partition's SuspendTime Slurm calls
greengpu's SuspendProgram, which releases the instance. A launch that fails (no capacity) is released,
its node handed back to Slurm's pool (powered down, not DOWN) and its job requeued. Not covered here:
Slurm's later retry of a requeued job (it holds the job ~2 minutes first), node weights preferring
on-premises nodes, and a real provider's API (the fake provider stands at the command-template seam). Needs root and
`slurm-wlm munge`, as tests/integration/test_slurm_power_save.py (whose fixture this uses)."""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from slurm_harness import DEPLOY_SLURM, SlurmCluster, _free_port
from test_slurm_power_save import greengpu, require_slurm

from greengpu.control.daemon.audit import AuditLog

PROVIDER = Path(__file__).resolve().parents[1] / "helpers" / "fake_cloud_provider.py"
CLOUD_SUSPEND_TIME_S = 1
"""The cloud partition's SuspendTime: idle cloud nodes are released this long after their last job."""


def _inventory(root: Path) -> Path:
    provider = f"{sys.executable} {PROVIDER} --root {root}"
    path = root / "cluster.yaml"
    path.write_text(f"""\
site: {{pue: 1.2, price_per_kwh: 0.1}}
node_types:
  gpu4: {{gpus: 4, gpu_model: A100, gpu_idle_w: 55, gpu_max_w: 400, host_idle_w: 300}}
nodes:
  - {{name: node1, type: gpu4}}
pools:
  spot:
    type: gpu4
    spot: true
    price_per_hour: 4.1
    interruptions_per_hour: 0.1
    instance_type: p4d.24xlarge
    region: us-east-1
    max_nodes: 2
    node_names: "spot[1-2]"
    launch_command: {provider} --conf {root}/slurm.conf launch {{node}} {{instance_type}} {{region}}
    release_command: {provider} release {{node}}
  ondemand:
    type: gpu4
    price_per_hour: 16.4
    instance_type: p4d.24xlarge
    region: us-east-1
    max_nodes: 1
    node_names: od1
    launch_command: {provider} --conf {root}/slurm.conf launch {{node}} {{instance_type}} {{region}}
    release_command: {provider} release {{node}}
""")
    return path


def _add_cloud_nodes(cluster: SlurmCluster) -> None:
    """The shipped lines of deploy/slurm/slurm.conf.greengpu-cloud and the node and partition lines it shows,
    for two spot nodes and one on-demand node."""
    root = cluster.root
    nodes = "\n".join(
        f"NodeName={name} Port={_free_port()} CPUs=2 RealMemory=1000 Gres=gpu:4 Feature={feature} Weight=100 "
        "State=CLOUD" for name, feature in (("spot1", "spot"), ("spot2", "spot"), ("od1", "on-demand")))
    shipped = [line for line in (DEPLOY_SLURM / "slurm.conf.greengpu-cloud").read_text().splitlines()
               if line and not line.startswith("#") and "Program=" not in line]  # the wrappers: below
    assert shipped == ["PrivateData=cloud", "TreeWidth=65533"]
    conf = cluster.conf.read_text()
    lines = "\n".join(shipped)
    cluster.conf.write_text(conf.replace("PartitionName=gpu", f"{lines}\n{nodes}\nPartitionName=gpu") +
                            f"PartitionName=cloud Nodes=spot[1-2],od1 SuspendTime={CLOUD_SUSPEND_TIME_S} "
                            "MaxTime=INFINITE State=UP\n")
    gres = root / "gres.conf"
    gres.write_text(gres.read_text() + f"NodeName=spot[1-2],od1 Name=gpu File={root}/dev/nvidia[0-3]\n")


def _write_wrappers(root: Path, inventory: Path, audit: Path, hook_log: Path) -> None:
    for hook in ("suspend", "resume", "resume-failed"):
        wrapper = root / f"cloud-{hook}.sh"
        wrapper.write_text(f"#!/bin/sh\nexec {sys.executable} -m greengpu cloud --cluster {inventory} --audit {audit} "
                           f"--log {hook_log} {hook} \"$1\"\n")
        wrapper.chmod(0o755)


def _provider_calls(root: Path) -> list[str]:
    path = root / "provider.log"
    return path.read_text().splitlines() if path.exists() else []


def _node_field(cluster: SlurmCluster, node: str, field: str) -> str:
    out = cluster.run("scontrol", "-o", "show", "node", node).stdout
    return next((part.split("=", 1)[1] for part in out.split() if part.startswith(f"{field}=")), "")


@pytest.fixture(scope="module")
def cloud_cluster() -> Iterator[SlurmCluster]:
    """One on-premises node (partition gpu) and the cloud nodes (partition cloud) behind greengpu's cloud hooks,
    started once for this module's tests."""
    require_slurm()
    root = Path(os.environ.get("GREENGPU_SLURM_TEST_DIR", "/tmp")) / f"greengpu-slurm-{os.getpid()}-cloud"
    root.mkdir(parents=True, exist_ok=True)
    cluster = SlurmCluster(root, node_count=1)
    try:
        inventory = _inventory(root)
        _write_wrappers(root, inventory, root / "cloud-audit.jsonl", root / "log" / "greengpu-cloud.log")
        cluster.write_config(root / "cloud-suspend.sh", root / "cloud-resume.sh", root / "cloud-resume-failed.sh",
                             resume_timeout_s=60)
        _add_cloud_nodes(cluster)
        cluster.start()
        yield cluster
    finally:
        cluster.stop()
    shutil.rmtree(root, ignore_errors=True)  # kept when stop() itself failed, for its logs


def test_a_spot_job_launches_a_cloud_node_that_is_released_when_idle(cloud_cluster: SlurmCluster) -> None:
    cluster = cloud_cluster
    root = cluster.root
    audit, hook_log = root / "cloud-audit.jsonl", root / "log" / "greengpu-cloud.log"
    assert {"CLOUD", "POWERED_DOWN"} <= cluster.states()["spot1"]
    assert _node_field(cluster, "spot1", "AvailableFeatures") == "spot"

    # No on-demand capacity: od1's launch fails (the fake provider refuses it while this file exists).
    (root / "fail-launch").mkdir()
    (root / "fail-launch" / "od1").touch()

    # A spot job: Slurm picks a spot node and runs greengpu's ResumeProgram, which launches its instance; an
    # on-demand job at the same time asks for od1, whose launch fails.
    job = cluster.run("sbatch", "--parsable", "-p", "cloud", "--constraint=spot", "--gres=gpu:4",
                      "--wrap", "echo on spot").stdout.strip()
    on_demand = cluster.run("sbatch", "--parsable", "-p", "cloud", "--constraint=on-demand", "--gres=gpu:1",
                            "--wrap", "echo on demand").stdout.strip()

    # The failed launch: the half-made instance is released, the node goes back to Slurm's pool (powered
    # down with the reason, not DOWN: a later try may find capacity) and its job is requeued, never lost.
    cluster.wait(lambda: any(r.get("kind") == "cloud_launch" for r in AuditLog(audit).records()), 30,
                 "od1's launch")
    cluster.wait(lambda: cluster.states()["od1"] & {"POWERING_DOWN", "POWERED_DOWN"}
                 and cluster.job_state(on_demand) == "PENDING", 30, "od1 back to the cloud pool and its job requeued")
    assert "DOWN" not in cluster.states()["od1"]
    assert "Reason=greengpu: launch failed: exit 3: InsufficientInstanceCapacity" in \
        cluster.run("scontrol", "show", "node", "od1").stdout
    assert cluster.job_state(on_demand) == "PENDING"
    assert "requeue job JobId=" + on_demand in (root / "log" / "slurmctld.log").read_text()
    od1 = [(r["kind"], r["outcome"], r["rule"]) for r in AuditLog(audit).records() if r.get("node") == "od1"
           and "kind" in r]
    assert od1[:2] == [("cloud_launch", "failed", "Slurm ResumeProgram"), ("cloud_release", "done", "launch failed")]
    assert all(outcome == "done" for kind, outcome, _ in od1[2:] if kind == "cloud_release"), od1
    alerts = [r for r in AuditLog(audit).records() if r.get("alert") == "cloud_launch_failed"]
    assert len(alerts) == 1 and "InsufficientInstanceCapacity" in alerts[0]["message"], alerts
    assert "od1: launch of ondemand failed: exit 3: InsufficientInstanceCapacity" in hook_log.read_text()
    assert not (root / "instances" / "od1").exists()
    cluster.run("scancel", on_demand)

    cluster.wait(lambda: cluster.job_state(job) == "COMPLETED", 60, f"spot job {job} to complete")
    record = dict(part.split("=", 1) for part in cluster.run("scontrol", "-o", "show", "job", job).stdout.split()
                  if "=" in part)
    ran_on = record["NodeList"]
    assert ran_on in ("spot1", "spot2")
    assert record["Restarts"] == "0"
    assert f"launch {ran_on} p4d.24xlarge us-east-1" in _provider_calls(root)
    launches = [r for r in AuditLog(audit).records() if r.get("kind") == "cloud_launch" and r["node"] == ran_on]
    assert [(r["outcome"], r["job"], r["capacity"], r["address"]) for r in launches] == \
        [("done", job, "spot", "127.0.0.1")]
    assert launches[0]["argv"][-3:] == [ran_on, "p4d.24xlarge", "us-east-1"]

    # Idle for the partition's SuspendTime: Slurm runs greengpu's SuspendProgram, which releases the instance.
    cluster.wait(lambda: any(r.get("kind") == "cloud_release" and r["node"] == ran_on
                             for r in AuditLog(audit).records()), 60, f"{ran_on} to be released")
    assert cluster.states()[ran_on] & {"POWERING_DOWN", "POWERED_DOWN"}
    assert [c for c in _provider_calls(root) if c.split()[1] == ran_on] == \
        [f"launch {ran_on} p4d.24xlarge us-east-1", f"release {ran_on}"]
    assert not (root / "instances" / ran_on).exists()  # the fake instance (its slurmd) is gone
    releases = [r for r in AuditLog(audit).records() if r.get("kind") == "cloud_release" and r["node"] == ran_on]
    assert [(r["outcome"], r["rule"]) for r in releases] == [("done", "Slurm SuspendProgram")]


def _job_field(cluster: SlurmCluster, job: str, field: str) -> str:
    out = cluster.run("scontrol", "-o", "show", "job", job).stdout
    return next((part.split("=", 1)[1] for part in out.split() if part.startswith(f"{field}=")), "")


def _waiting_for_resources(cluster: SlurmCluster, job: str) -> bool:
    return cluster.job_state(job) == "PENDING" and _job_field(cluster, job, "Reason") in ("Resources", "Priority")


def test_spot_steer_gives_waiting_jobs_the_capacity_the_decision_chooses(cloud_cluster: SlurmCluster) -> None:
    cluster = cloud_cluster
    root = cluster.root
    inventory = root / "cluster.yaml"
    # The on-premises node is full: what is submitted to its partition waits for resources.
    blocker = cluster.run("sbatch", "--parsable", "-p", "gpu", "--gres=gpu:4", "--wrap", "sleep 300").stdout.strip()
    cluster.wait(lambda: cluster.job_state(blocker) == "RUNNING", 30, "the blocker to run on node1")
    train = cluster.run("sbatch", "--parsable", "-p", "gpu", "--gres=gpu:4", "--time=30", "--comment",
                        "greengpu.class=training greengpu.interruptible=true greengpu.checkpoint-interval=10m",
                        "--wrap", "echo trained").stdout.strip()
    shell = cluster.run("sbatch", "--parsable", "-p", "gpu", "--gres=gpu:1", "--time=30", "--comment",
                        "greengpu.class=interactive", "--wrap", "echo shell").stdout.strip()
    cluster.wait(lambda: _waiting_for_resources(cluster, train) and _waiting_for_resources(cluster, shell), 30,
                 "both jobs to wait for resources")
    assert _job_field(cluster, train, "Features") == "(null)"

    steer_log = root / "log" / "greengpu-steer.log"
    steered = greengpu("spot", "steer", "--cluster", str(inventory), "--policy", "default", "--cloud-partition",
                       "cloud", "--log", str(steer_log), env=cluster.env)
    assert steered.returncode == 0, steered.stderr + steer_log.read_text()
    log_text = steer_log.read_text()
    assert f"job {train}: steered to spot (class training, interruptible true, 4 GPUs" in log_text
    assert f"job {shell}: steered to on-demand (class interactive, interruptible false, 1 GPUs" in log_text
    assert _job_field(cluster, shell, "Features") == "on-demand"
    assert _job_field(cluster, shell, "Partition") == "gpu,cloud"
    cluster.run("scancel", shell)  # od1 has no capacity in this module (see the test above)

    # Slurm launches a spot node through greengpu's ResumeProgram and the steered job runs there.
    cluster.wait(lambda: cluster.job_state(train) == "COMPLETED", 60, f"steered job {train} to complete")
    assert _job_field(cluster, train, "NodeList") in ("spot1", "spot2")
    assert _job_field(cluster, train, "Features") == "spot"
    assert _job_field(cluster, train, "AdminComment") == "greengpu.steered=spot"  # greengpu's to decide again
    launched = [r for r in AuditLog(root / "cloud-audit.jsonl").records()
                if r.get("kind") == "cloud_launch" and r.get("job") == train]
    assert [(r["outcome"], r["capacity"]) for r in launched] == [("done", "spot")]

    # A second pass finds nothing to steer: the blocker runs, nothing else waits.
    again = greengpu("spot", "steer", "--cluster", str(inventory), "--policy", "default", "--cloud-partition",
                     "cloud", "--log", str(steer_log), env=cluster.env)
    assert again.returncode == 0 and steer_log.read_text() == log_text
    cluster.run("scancel", blocker)
