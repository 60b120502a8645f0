"""One brain with MIG: the bundled a100-lab day (MIG jobs, time-slice replicas, fractions) through `simulate`
and through the daemon on the fake cluster, where each `PartitionGpu` is carried out through the fake NVML and
the partitions the core sees are read back from it, gives the same placements, as many repartitions, and
the same finish times."""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "integration"))

from test_differential_one_brain import assert_alike, driven, replayed  # noqa: E402

from greengpu.config.inventory import load_cluster  # noqa: E402
from greengpu.config.policy import load_policy  # noqa: E402
from greengpu.sim.engine import Simulation  # noqa: E402
from greengpu.sim.traces import read_trace  # noqa: E402


def test_differential_the_mig_lab_day_through_simulate_and_the_daemon(tmp_path: Path) -> None:
    cluster = load_cluster(REPO / "examples" / "a100-lab.cluster.yaml")
    policy = load_policy("always-on")
    jobs = read_trace(REPO / "examples" / "a100-lab.day.trace.csv").jobs

    replay = replayed(cluster, policy, jobs)
    live, body, daemon = driven(tmp_path, cluster, policy, jobs, replay.instants)

    assert_alike(replay, live)
    live_finish = live.finish
    profiled = {j.job_id for j in jobs if j.gpu_profile and j.gpu_profile != "timeslice"}
    assert profiled and profiled <= set(live_finish)  # every MIG job ran
    partitions = [e for e in daemon.store.entries() if e.kind == "partition_gpu"]
    assert partitions and {e.state for e in partitions} == {"done"}
    assert body.mig.repartitions == len(partitions) == Simulation(cluster, policy, jobs).run().mig_reconfigurations
    assert not [r for r in daemon.audit.records() if r.get("alert")]  # every action carried out
