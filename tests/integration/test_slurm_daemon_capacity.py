"""The daemon's capacity lever on real Slurm (issue 36): its tick decides spot or on-demand for the jobs waiting
for resources, and its Slurm body carries it out (`scontrol update JobId=N Features=spot AdminComment=...`, the
cloud partition added); Slurm then launches a cloud node through greengpu's ResumeProgram and runs the job
there. Uses test_slurm_cloud's cluster (one on-premises node, spot and on-demand cloud nodes); needs root and
`slurm-wlm munge`."""

from __future__ import annotations

import json

from slurm_harness import SlurmCluster
from test_slurm_cloud import _job_field, _waiting_for_resources, cloud_cluster  # noqa: F401 (the fixture)
from test_slurm_power_save import greengpu

from greengpu.control.daemon.audit import AuditLog


def test_the_daemon_s_tick_steers_waiting_jobs_to_cloud_capacity(
        cloud_cluster: SlurmCluster) -> None:  # noqa: F811 (the imported fixture)
    cluster = cloud_cluster
    root = cluster.root
    blocker = cluster.run("sbatch", "--parsable", "-p", "gpu", "--gres=gpu:4", "--wrap", "sleep 300").stdout.strip()
    cluster.wait(lambda: cluster.job_state(blocker) == "RUNNING", 30, "the blocker to run on node1")
    train = cluster.run("sbatch", "--parsable", "-p", "gpu", "--gres=gpu:4", "--time=30", "--comment",
                        "greengpu.class=training greengpu.interruptible=true greengpu.checkpoint-interval=10m",
                        "--wrap", "echo trained").stdout.strip()
    shell = cluster.run("sbatch", "--parsable", "-p", "gpu", "--gres=gpu:1", "--time=30", "--comment",
                        "greengpu.class=interactive", "--wrap", "echo shell").stdout.strip()
    cluster.wait(lambda: _waiting_for_resources(cluster, train) and _waiting_for_resources(cluster, shell), 30,
                 "both jobs to wait for resources")

    state = root / "daemon-state"
    ran = greengpu("daemon", "--backend", "real", "--source", "slurm", "--cluster", str(root / "cluster.yaml"),
                   "--policy", "default", "--state", str(state), "--once", "--listen", "127.0.0.1:0",
                   "--cloud-partition", "cloud", env=cluster.env)
    assert ran.returncode == 0, ran.stderr
    steered = {r["job"]: r for r in AuditLog(state / "audit.jsonl").records() if r.get("kind") == "choose_capacity"}
    assert set(steered) == {train, shell}
    assert steered[train]["outcome"] == "done" and "steered" in steered[train]["detail"]
    assert _job_field(cluster, train, "AdminComment") == "greengpu.steered=spot"
    assert _job_field(cluster, shell, "Features") == "on-demand"
    assert _job_field(cluster, shell, "Partition") == "gpu,cloud"
    cluster.run("scancel", shell)  # od1 has no capacity in this module

    # Slurm launches a spot node through greengpu's ResumeProgram and the steered job runs there.
    cluster.wait(lambda: cluster.job_state(train) == "COMPLETED", 60, f"steered job {train} to complete")
    assert _job_field(cluster, train, "NodeList") in ("spot1", "spot2")
    assert _job_field(cluster, train, "Features") == "spot"

    # A second tick steers nothing again: the blocker runs, nothing else waits.
    again = greengpu("daemon", "--backend", "real", "--source", "slurm", "--cluster", str(root / "cluster.yaml"),
                     "--policy", "default", "--state", str(state), "--once", "--listen", "127.0.0.1:0",
                     "--cloud-partition", "cloud", env=cluster.env)
    assert again.returncode == 0, again.stderr
    kinds = [r.get("kind") for r in AuditLog(state / "audit.jsonl").records()]
    assert kinds.count("choose_capacity") == 2, json.dumps(kinds)
    cluster.run("scancel", blocker)
