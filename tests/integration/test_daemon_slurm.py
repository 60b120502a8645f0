"""The daemon on a real Slurm (the integration harness: slurmctld and slurmd from Debian's packages, munge,
magic packets on loopback): with Slurm's own idle timer out of the way, the daemon decides that the
idle nodes sleep and asks Slurm to power them down (Slurm runs greengpu's SuspendProgram); a submitted
GPU job makes them wake (Slurm runs greengpu's ResumeProgram, the daemon asks too) and the job runs
once, never requeued. Needs root and `slurm-wlm munge` (installed by .ci/run)."""

from __future__ import annotations

import json
import sys
import threading
import time
from dataclasses import replace

import pytest
from inventories import a100_type, wol_node, write_inventory
from slurm_harness import SlurmCluster
from test_slurm_power_save import (
    MACS,
    assert_back_in_service_and_not_requeued,
    slurm_cluster,  # noqa: F401 - the real Slurm fixture, used by its name
    write_hook_wrappers,
)

from greengpu.backends import slurm
from greengpu.cli import main
from greengpu.config.inventory import load_cluster
from greengpu.config.policy import load_policy
from greengpu.control.bodies.slurm_body import SlurmBody
from greengpu.control.daemon.audit import Alerts, AuditLog
from greengpu.control.daemon.daemon_meter import DaemonMeter
from greengpu.control.daemon.service import Daemon
from greengpu.control.daemon.store import DaemonStore


@pytest.mark.parametrize("slurm_cluster", [2], indirect=True)
def test_the_daemon_sleeps_idle_nodes_through_slurm_and_a_job_wakes_them(
        slurm_cluster: SlurmCluster, monkeypatch: pytest.MonkeyPatch,  # noqa: F811
        capsys: pytest.CaptureFixture[str]) -> None:
    root = slurm_cluster.root
    port = slurm_cluster.listen_for_magic_packets({n: MACS[n] for n in ("node1", "node2")})
    inventory = write_inventory(root / "cluster.yaml", {"gpu4": a100_type(gpus=4, host_idle_w=300, boot_s=10)},
                                [wol_node("node[1-2]", "gpu4", MACS["node1"], port)])
    hooks_state = root / "state.db"
    power_off = slurm_cluster.power_off_script()
    write_hook_wrappers(root, f"--cluster {inventory} --state {hooks_state} --log {root / 'log' / 'hooks.log'} "
                              f"--suspend-command '{sys.executable} {power_off} {root} {{node}}'")
    slurm_cluster.write_config(root / "suspend.sh", root / "resume.sh", root / "resume-failed.sh")
    slurm_cluster.start()
    monkeypatch.setenv("SLURM_CONF", str(slurm_cluster.conf))  # the body's scontrol, squeue and sinfo

    base = load_policy("default")
    policy = replace(base, sleep=replace(base.sleep, idle_timeout_s=3.0, min_awake_s=0.0, min_asleep_s=0.0,
                                         warm_reserve_gpus=0, warm_reserve_busy_fraction=0.0))
    state = root / "daemon"
    store = DaemonStore(state)
    audit = AuditLog(state / "audit.jsonl")
    cluster = load_cluster(inventory)
    ledger = state / "ledger.db"
    meter = DaemonMeter.open(cluster, ledger, None, policy.name, "slurm")
    daemon = Daemon(SlurmBody(cluster, run=slurm.run), policy, store, audit, Alerts(audit), meter=meter)
    stop = threading.Event()
    failures: list[str] = []

    def loop() -> None:
        while not stop.wait(1.0):
            report = daemon.tick()
            daemon.meter_energy()  # the loop's metering job
            if not report.ok:
                failures.append(report.message)

    ticker = threading.Thread(target=loop, daemon=True)
    ticker.start()
    try:
        slurm_cluster.wait(lambda: all("POWERED_DOWN" in slurm_cluster.states()[n] for n in ("node1", "node2")),
                           60, "the daemon to put both idle nodes to sleep through Slurm")
        assert slurm_cluster._is_off("node1") and slurm_cluster._is_off("node2")  # greengpu's SuspendProgram ran
        sleeps = {e.node for e in store.entries() if e.kind == "sleep" and e.state == "done"}
        assert sleeps == {"node1", "node2"}

        job = slurm_cluster.run("sbatch", "--parsable", "-A", "physics", "--gres=gpu:2", "--wrap",
                                "sleep 5").stdout.strip()
        slurm_cluster.wait(lambda: slurm_cluster.job_state(job) == "COMPLETED", 120, f"job {job} to complete")
    finally:
        stop.set()
        ticker.join(timeout=30)
    assert failures == []
    fields = slurm_cluster.run("scontrol", "-o", "show", "job", job).stdout.split()
    ran_on = next(f.split("=", 1)[1] for f in fields if f.startswith("NodeList="))
    assert_back_in_service_and_not_requeued(slurm_cluster, job, [ran_on])
    assert {node for node, _ in slurm_cluster.packets} >= {ran_on}  # woken by magic packet
    records = [r for r in audit.records() if r.get("kind") == "sleep"]
    assert records and all(r["rule"].startswith("idle") for r in records)  # the sleep lever's rule, audited
    assert store.open_entries() == []
    # The ledger holds the job's energy under its account, and that month's report lists it.
    month = time.strftime("%Y-%m", time.gmtime())
    assert main(["report", "--ledger", str(ledger), "--month", month, "--run", str(meter.run_id),
                 "--format", "json"]) == 0
    bill = json.loads(capsys.readouterr().out)
    rows = {row["name"]: row for row in bill["rows"]}
    assert "physics" in rows and rows["physics"]["energy_kwh"] > 0 and rows["physics"]["gpu_hours"] > 0
    # Slurm's body reads no GPU energy counters: the bill is modelled, never labelled measured (issue 36).
    assert bill["basis"] == "modelled" and rows["physics"]["basis"] == "modelled"
