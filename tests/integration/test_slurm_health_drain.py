"""On a real Slurm (the integration harness): a running job's `greengpu.io/last-checkpoint=T` comment mark is its
last checkpoint in the daemon's Slurm body, and the daemon's drain for a failing GPU is Slurm's own drain (the
node shows DRAIN, takes no new job, and the body then observes it drained). Needs root and `slurm-wlm munge`."""

from __future__ import annotations

import sys

import pytest
from inventories import a100_type, wol_node, write_inventory
from slurm_harness import SlurmCluster
from test_slurm_power_save import (
    MACS,
    slurm_cluster,  # noqa: F401 - the real Slurm fixture, used by its name
    write_hook_wrappers,
)

from greengpu.backends import slurm
from greengpu.config.inventory import load_cluster
from greengpu.control.bodies.slurm_body import SlurmBody


@pytest.mark.parametrize("slurm_cluster", [2], indirect=True)
def test_slurm_drains_the_node_and_reports_the_jobs_checkpoint(slurm_cluster: SlurmCluster,  # noqa: F811
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    root = slurm_cluster.root
    port = slurm_cluster.listen_for_magic_packets({n: MACS[n] for n in ("node1", "node2")})
    inventory = write_inventory(root / "cluster.yaml", {"gpu4": a100_type(gpus=4, host_idle_w=300, boot_s=10)},
                                [wol_node("node[1-2]", "gpu4", MACS["node1"], port)])
    power_off = slurm_cluster.power_off_script()
    write_hook_wrappers(root, f"--cluster {inventory} --state {root / 'state.db'} --log {root / 'log' / 'h.log'} "
                              f"--suspend-command '{sys.executable} {power_off} {root} {{node}}'")
    slurm_cluster.write_config(root / "suspend.sh", root / "resume.sh", root / "resume-failed.sh")
    slurm_cluster.start()
    monkeypatch.setenv("SLURM_CONF", str(slurm_cluster.conf))
    body = SlurmBody(load_cluster(inventory), run=slurm.run)

    job = slurm_cluster.run("sbatch", "--parsable", "-w", "node1", "--gres=gpu:1",
                            "--comment=greengpu.class=training greengpu.io/last-checkpoint=1700000000",
                            "--wrap", "sleep 300").stdout.strip()
    slurm_cluster.wait(lambda: slurm_cluster.job_state(job) == "RUNNING", 30, "the job to run")
    seen = body.observe(1_700_000_100.0, 0, 0)
    running = {r.job.job_id: r for r in seen.snapshot.running}
    assert running[job].last_checkpoint_s == 1_700_000_000.0 and running[job].job.job_class == "training"

    assert body.drain_node("node2", "greengpu: failing GPU 0") == "node2: drained in Slurm"
    slurm_cluster.wait(lambda: any("DRAIN" in s for s in slurm_cluster.states()["node2"]), 30, "node2 to drain")
    record = slurm_cluster.run("scontrol", "-o", "show", "node", "node2").stdout
    assert "Reason=greengpu: failing GPU 0" in record, record
    assert seen.snapshot.node_states.get("node2") is None or not seen.snapshot.node_states["node2"].drained
    after = body.observe(1_700_000_160.0, 0, 0)
    assert after.snapshot.node_states["node2"].drained  # what the core and the report effects see next
    # Slurm keeps new work off it: a job for node2 waits.
    blocked = slurm_cluster.run("sbatch", "--parsable", "-w", "node2", "--gres=gpu:1", "--wrap", "true").stdout.strip()
    assert slurm_cluster.job_state(blocked) == "PENDING"
    slurm_cluster.run("scancel", job, blocked)
