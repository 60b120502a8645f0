"""The Slurm body reads what pins and constrains a pending job (`-w`, `-x`, `--constraint`, `-p`, `--exclusive`,
as a real slurmctld 22.05 printed them: tests/data/slurm/*-constraints.json, *-features.json) and the nodes'
features and partitions, so that the core wakes only nodes a job can use. The real round trip is in
tests/integration/test_slurm_node_rules.py."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest
from inventories import a100_type, write_inventory

from greengpu.backends.slurm import SlurmError
from greengpu.backends.slurm_config import SuspendExclusions
from greengpu.config.inventory import load_cluster
from greengpu.control.bodies.slurm_body import SlurmBody, parse_jobs
from greengpu.model import WakeNode
from greengpu.policy import SchedulerPolicy
from greengpu.sched.core import schedule_cycle
from greengpu.slurm_json import feature_alternatives, node_constraints

DATA = Path(__file__).parents[2] / "data" / "slurm"
SQUEUE = json.loads((DATA / "squeue-22.05-constraints.json").read_text())
SINFO = json.loads((DATA / "sinfo-22.05-features.json").read_text())
NODES = {f"node{i}" for i in range(1, 5)}
NO_EXCLUSIONS = SuspendExclusions()


def test_every_constraint_slurm_printed_is_read() -> None:
    _, pending = parse_jobs(json.dumps(SQUEUE), NODES)
    jobs = {p.job.job_id: p.job for p in pending}
    assert jobs["1"].required_nodes == {"node2"}
    assert jobs["2"].excluded_nodes == {"node1", "node2"}
    assert jobs["3"].features == (frozenset({"ib", "nvlink"}),)
    assert jobs["4"].exclusive is True
    assert jobs["5"].partitions == {"gpu", "debug"}
    assert jobs["6"].partitions == {"gpu"} and jobs["6"].required_nodes is None and not jobs["6"].exclusive


@pytest.mark.parametrize("text, alternatives", [
    ("ib", ({"ib"},)), ("ib&nvlink", ({"ib", "nvlink"},)), ("a|b&c", ({"a"}, {"b", "c"})),
    ("[a|b]&c*2", ({"a", "c"}, {"b", "c"})), ("(a|b),c", ({"a", "c"}, {"b", "c"})),
])
def test_constraint_expressions(text: str, alternatives: tuple[set[str], ...]) -> None:
    assert feature_alternatives(text) == tuple(frozenset(a) for a in alternatives)


@pytest.mark.parametrize("record, message", [
    ({"features": "a&"}, "ends too soon"), ({"features": "(a"}, "not closed"),
    ({"required_nodes": "node[1-"}, "required_nodes 'node\\[1-' is not a hostlist"),
])
def test_a_bad_constraint_is_one_clear_line(record: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        node_constraints(record)


def sinfo(power: dict[str, list[str]], state: dict[str, str] | None = None,
          reason: dict[str, str] | None = None) -> str:
    document = json.loads(json.dumps(SINFO))
    for record in document["nodes"]:
        record["state_flags"] = power.get(record["name"], [])
        record["state"] = (state or {}).get(record["name"], "idle")
        record["reason"] = (reason or {}).get(record["name"], "")
    return json.dumps(document)


def body(tmp_path: Path, squeue: dict[str, Any], sinfo_text: str,
         exclusions: SuspendExclusions | None = NO_EXCLUSIONS) -> SlurmBody:
    cluster = load_cluster(write_inventory(tmp_path / "c.yaml", {"g": a100_type(gpus=4)},
                                           ['{name: "node[1-4]", type: g}']))
    answers = {"squeue": json.dumps(squeue), "sinfo": sinfo_text}

    def run(name: str, *args: str) -> str:
        if name not in answers:
            raise SlurmError(f"{name} {' '.join(args)}: Unable to contact slurm controller")
        return answers[name]

    return SlurmBody(cluster, run=run, exclusions=exclusions)


def only_jobs(*job_ids: str) -> dict[str, Any]:
    return {**SQUEUE, "jobs": [j for j in SQUEUE["jobs"] if str(j["job_id"]) in job_ids]}


ALL_ASLEEP = {f"node{i}": ["POWERED_DOWN"] for i in range(1, 5)}


@pytest.mark.parametrize("job_id, woken", [
    ("1", ["node2"]),  # -w node2: only its node, where a free-to-go 4-GPU job would take node1
    ("2", ["node3"]),  # -x node[1-2]
    ("3", ["node3"]),  # -C ib&nvlink: node3 alone has both
    ("6", ["node1"]),  # unconstrained (its partition holds every node): the core's first choice
])
def test_a_constrained_job_wakes_only_a_node_it_can_use(tmp_path: Path, job_id: str, woken: list[str]) -> None:
    seen = body(tmp_path, only_jobs(job_id), sinfo(ALL_ASLEEP)).observe(1000.0, 0, 0)
    result = schedule_cycle(seen.snapshot, SchedulerPolicy(), incremental=False)
    assert [a.node for a in result.actions if isinstance(a, WakeNode)] == woken


def test_the_nodes_features_and_partitions_come_from_sinfo_and_no_op_constraints_are_dropped(tmp_path: Path) -> None:
    seen = body(tmp_path, SQUEUE, sinfo({})).observe(1000.0, 0, 0)
    nodes = {n.name: n for n in seen.snapshot.cluster.nodes}
    assert nodes["node3"].features == {"ib", "nvlink"} and nodes["node4"].partitions == {"gpu", "debug"}
    jobs = {p.job.job_id: p.job for p in seen.snapshot.pending}
    # Every managed node is in partition gpu: jobs 5 and 6 bar no node, and keep the core's fast path.
    assert jobs["5"].node_rule is None and jobs["6"].node_rule is None
    assert jobs["1"].node_rule is not None


def test_a_job_whose_constraint_does_not_parse_is_taken_unconstrained_with_one_warning(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    document = only_jobs("3")
    document["jobs"] = [{**document["jobs"][0], "features": "ib&(nvlink"}]
    slurm = body(tmp_path, document, sinfo(ALL_ASLEEP))
    with caplog.at_level(logging.WARNING):
        seen = slurm.observe(1000.0, 0, 0)
        slurm.observe(1060.0, 0, 0)
    assert seen.snapshot.pending[0].job.node_rule is None
    warned = [r.getMessage() for r in caplog.records if "taken as unconstrained" in r.getMessage()]
    assert len(warned) == 1 and "job 3" in warned[0] and "not closed" in warned[0]
