"""The daemon's Slurm body reads what a real Slurm 22.05 printed (`squeue --json`, `sinfo --json`,
captured from the integration harness into tests/data/slurm/) and asks Slurm to power nodes down and up.
The real round trip (a node put to sleep through Slurm, a job that wakes it) is in
tests/integration/test_daemon_slurm.py."""

from __future__ import annotations

from pathlib import Path

import pytest
from inventories import a100_type, write_inventory
from test_slurm_cli import dead_slurm  # noqa: F401 - a slurm.conf whose slurmctld does not listen

from greengpu.backends.slurm import SlurmError
from greengpu.backends.slurm_config import SuspendExclusions
from greengpu.config.inventory import load_cluster
from greengpu.control.bodies.body import ActionFailed
from greengpu.control.bodies.slurm_body import SlurmBody, node_power, parse_jobs
from greengpu.model import GpuSlot, PowerState, SleepNode, WakeNode

DATA = Path(__file__).parents[2] / "data" / "slurm"
SQUEUE = (DATA / "squeue-22.05.json").read_text()
SINFO = (DATA / "sinfo-22.05.json").read_text()


def test_running_jobs_hold_the_gpus_gres_detail_names_and_pending_ones_ask_per_node() -> None:
    running, pending = parse_jobs(SQUEUE, {"node1", "node2"})
    assert [(r.job.job_id, r.job.tenant, r.job.job_class, r.slots) for r in running] == [
        ("1", "root", "inference", (GpuSlot("node1", 0), GpuSlot("node1", 1)))]
    assert [(p.job.job_id, p.job.gpus, p.job.gpus_per_node, p.job.duration_s) for p in pending] == [
        ("2", 8, 4, 600.0)]  # two nodes of 4 GPUs, a 10-minute limit
    assert parse_jobs(SQUEUE, {"node2"})[0] == []  # GPUs on nodes greengpu does not manage are not its business


def _as_slurm_23(text: str) -> str:
    """The captured 22.05 reply as Slurm 23.02 and later print it: states as lists, numbers as
    `{"set", "infinite", "number"}` objects, GPU requests as `gres/gpu:N`."""
    import json

    document = json.loads(text)
    for record in document["jobs"]:
        record["job_state"] = [record["job_state"]]
        for key in ("node_count", "time_limit", "submit_time", "start_time"):
            value = record.get(key)
            record[key] = {"set": value is not None, "infinite": False, "number": value or 0}
        record["tres_per_node"] = str(record["tres_per_node"]).replace("gres:gpu", "gres/gpu")
    return json.dumps(document)


def test_slurm_23_records_read_as_the_same_jobs() -> None:
    """The body and spot steering share one reader of job records (greengpu.slurm_json): on 23.02 the 22.05
    body saw no job at all (a state list is not the string "RUNNING") or failed on a number object."""
    def seen(text: str) -> list[tuple[object, ...]]:
        running, pending = parse_jobs(text, {"node1", "node2"})
        return ([(r.job.job_id, r.job.gpus, r.job.duration_s, r.start_time_s, r.slots) for r in running]
                + [(p.job.job_id, p.job.gpus, p.job.gpus_per_node, p.job.duration_s, p.job.submit_time_s)
                   for p in pending])

    assert seen(_as_slurm_23(SQUEUE)) == seen(SQUEUE) != []


def test_a_pending_job_that_asks_gpus_per_job_is_seen() -> None:
    import json

    document = json.loads(SQUEUE)
    record = next(r for r in document["jobs"] if r["job_id"] == 2)
    record.update(tres_per_node="", tres_per_job="gres/gpu=6")
    _, pending = parse_jobs(json.dumps(document), {"node1", "node2"})
    assert [(p.job.job_id, p.job.gpus, p.job.gpus_per_node) for p in pending] == [("2", 6, None)]


@pytest.mark.parametrize("state, flags, power, drained", [
    ("idle", set(), None, None),
    ("idle", {"POWERED_DOWN"}, PowerState.ASLEEP, False),
    ("idle", {"POWERING_DOWN"}, PowerState.SUSPENDING, False),
    ("idle", {"POWERING_UP"}, PowerState.WAKING, False),
    ("idle", {"DRAIN"}, PowerState.AWAKE, True),
    ("down", set(), PowerState.FAILED, True),
    ("down", {"POWERED_DOWN"}, PowerState.FAILED, True),  # down~: ResumeTimeout reached
    ("idle", {"POWERED_DOWN", "NOT_RESPONDING"}, PowerState.FAILED, True),
    ("idle", {"POWERED_DOWN", "DRAIN"}, PowerState.ASLEEP, True),
    ("idle", {"NOT_RESPONDING"}, PowerState.AWAKE, True),
])
def test_node_states_map_to_the_cores(state: str, flags: set[str], power: PowerState | None,
                                      drained: bool | None) -> None:
    found = node_power(state, flags)
    if power is None:
        assert found is None
    else:
        assert found is not None and (found.power, found.drained) == (power, drained)


def body(tmp_path: Path, answers: dict[str, str], calls: list[tuple[str, ...]]) -> SlurmBody:
    cluster = load_cluster(write_inventory(tmp_path / "c.yaml", {"g": a100_type(gpus=4)},
                                           ['{name: "node[1-2]", type: g}']))

    def run(name: str, *args: str) -> str:
        calls.append((name, *args))
        if name in answers:
            return answers[name]
        raise SlurmError(f"{name} {' '.join(args)}: Invalid node state specified")

    return SlurmBody(cluster, run=run, exclusions=SuspendExclusions())


def test_the_observation_and_the_actions(tmp_path: Path) -> None:
    calls: list[tuple[str, ...]] = []
    slurm = body(tmp_path, {"squeue": SQUEUE, "sinfo": SINFO}, calls)
    seen = slurm.observe(1000.0, 0, 0)
    assert seen.snapshot.node_states["node2"].power is PowerState.SUSPENDING
    assert [p.job.job_id for p in seen.snapshot.pending] == ["2"] and len(seen.snapshot.running) == 1
    assert seen.sleep.idle_awake == () and seen.sleep.busy_gpus == 2.0  # node1 busy, node2 going to sleep
    assert seen.gpus == ()  # the node agents cap; the daemon only tells them whether work waits
    with pytest.raises(ActionFailed, match="Invalid node state"):
        slurm.act(SleepNode("node2", "idle 600 s"), 1000.0)
    assert calls[-1] == ("scontrol", "update", "nodename=node2", "state=POWER_DOWN", "reason=greengpu: idle 600 s")
    ok = body(tmp_path, {"squeue": SQUEUE, "sinfo": SINFO, "scontrol": ""}, calls)
    assert ok.act(WakeNode("node2", "needed by 2"), 1000.0) == "node2: power up asked of Slurm"
    assert calls[-1] == ("scontrol", "update", "nodename=node2", "state=POWER_UP")


UNREACHABLE = ('{"meta": {}, "errors": [{"description": "Unable to contact slurm controller (connect failure)", '
               '"source": "slurm_load_jobs", "error": "Unable to contact slurm controller", "error_number": 1007}], '
               '"jobs": [], "nodes": []}')


@pytest.mark.parametrize("failing", ["squeue", "sinfo"])
def test_a_reply_with_errors_is_not_an_empty_cluster(tmp_path: Path, failing: str) -> None:
    # `squeue --json` and `sinfo --json` exit 0 with an errors list and nothing else when slurmctld is
    # unreachable; read as an empty queue, idle nodes would look sleepable. The daemon fails safe on it.
    answers = {"squeue": SQUEUE, "sinfo": SINFO, failing: UNREACHABLE}
    with pytest.raises(SlurmError, match=f"{failing} --json: Unable to contact slurm controller"):
        body(tmp_path, answers, []).observe(1000.0, 0, 0)
    with pytest.raises(SlurmError, match="squeue --json: not Slurm's JSON"):
        body(tmp_path, {"squeue": "<html>", "sinfo": SINFO}, []).observe(1000.0, 0, 0)


def test_the_real_squeue_of_an_unreachable_controller_fails_the_observation(tmp_path: Path,
                                                                             dead_slurm: Path) -> None:  # noqa: F811
    cluster = load_cluster(write_inventory(tmp_path / "c.yaml", {"g": a100_type(gpus=4)},
                                           ['{name: "node[1-2]", type: g}']))
    with pytest.raises(SlurmError, match="squeue"):
        SlurmBody(cluster).observe(1000.0, 0, 0)
