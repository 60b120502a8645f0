"""`greengpu spot steer` without a slurmctld: a pending Slurm job's facts from its comment, --time and
--deadline (greengpu/spot/slurm_facts.py), and one steering pass (greengpu/control/cloud/spot_steer.py) against a
fake Slurm at the adapter's seam: `squeue --json` answers with records of Slurm 22.05's own output
(tests/data/slurm), `scontrol update` checks its arguments as Slurm would and can refuse with SlurmError.
The real slurmctld run is tests/integration/test_slurm_cloud.py."""

from __future__ import annotations

import copy
import json
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from test_slurm_cli import dead_slurm  # noqa: F401 - a slurm.conf whose slurmctld does not listen

from greengpu.backends.slurm import SlurmError
from greengpu.cli import main
from greengpu.config.inventory import load_cluster_text
from greengpu.config.policy import load_policy
from greengpu.control.cloud.spot_steer import SpotSteering, cheapest_prices
from greengpu.model import Cluster
from greengpu.spot.pod_facts import BadAnnotation
from greengpu.spot.slurm_facts import job_facts, names_capacity, pending_job, steered_features

DATA = Path(__file__).resolve().parents[2] / "data" / "slurm" / "squeue-22.05.json"
NOW_S = 1_796_070_200.0
INVENTORY = """\
site: {{pue: 1.2, price_per_kwh: 0.1}}
node_types:
  gpu4: {{gpus: 4, gpu_model: A100, gpu_idle_w: 55, gpu_max_w: 400, host_idle_w: 300}}
nodes:
  - {{name: node1, type: gpu4}}
pools:
{pools}"""
SPOT_POOL = "  spot: {type: gpu4, spot: true, price_per_hour: 4.1, interruptions_per_hour: 0.1, max_nodes: 2}\n"
ON_DEMAND_POOL = "  od: {type: gpu4, price_per_hour: 16.4, max_nodes: 2}\n"
TRAINING = "greengpu.class=training greengpu.interruptible=true greengpu.checkpoint-interval=30m"
SPOT_MARK, ON_DEMAND_MARK = "AdminComment=greengpu.steered=spot", "AdminComment=greengpu.steered=on-demand"


def inventory(pools: str = SPOT_POOL + ON_DEMAND_POOL) -> Cluster:
    return load_cluster_text(INVENTORY.format(pools=pools), "cluster.yaml")


def pending_record(job_id: int, comment: str = "", **changes: Any) -> dict[str, Any]:
    """The pending job of Slurm 22.05's recorded `squeue --json` (2 nodes x 4 GPUs, 10 min, Reason=Resources)."""
    base = next(r for r in json.loads(DATA.read_text())["jobs"] if r["job_state"] == "PENDING")
    record = copy.deepcopy(base)
    record.update(job_id=job_id, comment=comment, node_count=1, tres_per_node="gres:gpu:4", time_limit=120)
    record.update(changes)
    return record


class FakeSlurm:
    """squeue --json and scontrol update, as the Slurm adapter's `run(name, *args)` seam sees them."""

    def __init__(self, records: list[dict[str, Any]], refuse: set[str] | None = None) -> None:
        self.records = records
        self.refuse = refuse or set()
        self.updates: list[tuple[str, ...]] = []

    def __call__(self, name: str, *args: str, timeout_s: float = 20.0) -> str:
        if name == "squeue" and args == ("--json",):
            return json.dumps({"jobs": self.records})
        if name == "scontrol" and args[:1] == ("update",):
            job_id = args[1].removeprefix("JobId=")
            assert args[1].startswith("JobId=") and all("=" in a for a in args[2:]), args
            if job_id in self.refuse:
                raise SlurmError(f"scontrol {' '.join(args)}: Job is no longer pending execution")
            self.updates.append(args[1:])
            record = next(r for r in self.records if str(r["job_id"]) == job_id)
            fields = {"Features": "features", "AdminComment": "admin_comment", "Partition": "partition"}
            for word in args[2:]:
                key, _, value = word.partition("=")
                record[fields[key]] = value  # KeyError: a field greengpu should not be updating
            return ""
        raise AssertionError(f"unexpected Slurm call {name} {args}")


def steering(records: list[dict[str, Any]], cluster: Cluster | None = None, **options: Any) -> tuple[
        SpotSteering, FakeSlurm]:
    slurm = FakeSlurm(records, options.pop("refuse", None))
    return SpotSteering(cluster or inventory(), load_policy("default"), run=slurm, clock=lambda: NOW_S,
                        **options), slurm


# ------------------------------------------------------------------ facts


def test_facts_come_from_the_comment_the_time_limit_and_the_deadline() -> None:
    record = pending_record(7, TRAINING + " greengpu.checkpoint-cost=90s", time_limit=240,
                            submit_time=NOW_S - 600, deadline=int(NOW_S + 10 * 3600))
    job = pending_job(record)
    assert job is not None and job.gpus == 4 and job.partitions == ("gpu",) and job.reason == "Resources"
    facts = job_facts(record, job, NOW_S, 60.0)
    assert (facts.job_class, facts.interruptible, facts.checkpoint_interval_s, facts.checkpoint_cost_s) == \
        ("training", True, 1800.0, 90.0)
    assert facts.remaining_s == facts.work_s == 4 * 3600.0
    assert facts.deadline_remaining_s == 10 * 3600.0 and facts.deadline_s == 10 * 3600.0 + 600


def test_defaults_are_the_safe_side_and_no_requeue_is_never_interruptible() -> None:
    bare = pending_record(8, time_limit=None, deadline=0)
    facts = job_facts(bare, pending_job(bare), NOW_S, 60.0)  # type: ignore[arg-type]
    assert (facts.job_class, facts.interruptible, facts.checkpoint_interval_s) == ("training", False, None)
    assert facts.remaining_s == 3600.0 and facts.deadline_remaining_s is None and facts.checkpoint_cost_s == 60.0
    no_requeue = pending_record(9, TRAINING, requeue=False)
    assert not job_facts(no_requeue, pending_job(no_requeue), NOW_S, 60.0).interruptible  # type: ignore[arg-type]


@pytest.mark.parametrize(("comment", "named"), [
    ("greengpu.class=serving", "greengpu.class"),
    ("greengpu.interruptible=maybe", "greengpu.interruptible"),
    ("greengpu.checkpoint-interval=often", "greengpu.checkpoint-interval"),
    ("greengpu.checkpiont-interval=30m", "greengpu.checkpiont-interval"),
])
def test_a_comment_greengpu_cannot_read_names_its_key(comment: str, named: str) -> None:
    record = pending_record(10, comment)
    with pytest.raises(BadAnnotation, match=named):
        job_facts(record, pending_job(record), NOW_S, 60.0)  # type: ignore[arg-type]


def test_only_pending_gpu_jobs_are_read() -> None:
    assert pending_job(pending_record(11, job_state="RUNNING")) is None
    assert pending_job(pending_record(12, tres_per_node="", tres_per_job="")) is None
    assert pending_job(pending_record(13, job_state=["PENDING"], node_count={"set": True, "number": 2})).gpus == 8  # type: ignore[union-attr]


def test_the_capacity_feature_joins_a_plain_constraint_and_leaves_expressions_alone() -> None:
    assert steered_features("", "spot") == "spot"
    assert steered_features("a100&ib", "on-demand") == "a100&ib&on-demand"
    assert steered_features("a100|v100", "spot") is None and steered_features("[rack1|rack2]", "spot") is None
    assert names_capacity("a100&spot") and names_capacity("on-demand") and not names_capacity("spotty&a100")


# ------------------------------------------------------------------ one pass


def test_interruptible_training_goes_to_spot_interactive_to_on_demand() -> None:
    records = [pending_record(20, TRAINING), pending_record(21, "greengpu.class=interactive"),
               pending_record(22, "greengpu.class=inference greengpu.interruptible=true")]
    steer, slurm = steering(records, cloud_partition="cloud")
    outcomes = steer.steer_once()
    assert [(o.job_id, o.outcome, o.capacity) for o in outcomes] == [
        ("20", "steered", "spot"), ("21", "steered", "on-demand"), ("22", "steered", "on-demand")]
    assert slurm.updates == [("JobId=20", "Features=spot", SPOT_MARK, "Partition=gpu,cloud"),
                             ("JobId=21", "Features=on-demand", ON_DEMAND_MARK, "Partition=gpu,cloud"),
                             ("JobId=22", "Features=on-demand", ON_DEMAND_MARK, "Partition=gpu,cloud")]
    assert steer.steer_once() == [] and len(slurm.updates) == 3  # the next pass: greengpu's choices stand


def test_a_deadline_too_close_for_an_interruption_keeps_training_off_spot() -> None:
    # Two hours of work due in two hours and five minutes: on pace, but no slack for one interruption and a restart.
    tight = pending_record(23, TRAINING, submit_time=NOW_S, deadline=int(NOW_S + 2 * 3600 + 300))
    roomy = pending_record(24, TRAINING, submit_time=NOW_S, deadline=int(NOW_S + 12 * 3600))
    steer, slurm = steering([tight, roomy])
    assert [(o.job_id, o.capacity) for o in steer.steer_once()] == [("23", "on-demand"), ("24", "spot")]
    assert slurm.updates == [("JobId=23", "Features=on-demand", ON_DEMAND_MARK),
                             ("JobId=24", "Features=spot", SPOT_MARK)]


def test_jobs_that_chose_or_do_not_wait_for_resources_are_not_touched() -> None:
    records = [pending_record(30, TRAINING, features="spot"), pending_record(31, TRAINING, features="a100&on-demand"),
               pending_record(32, TRAINING, state_reason="Dependency"),
               pending_record(33, TRAINING, job_state="RUNNING"),
               pending_record(34, TRAINING, eligible_time=int(NOW_S - 30))]
    steer, slurm = steering(records, min_wait_s=60.0)
    assert steer.steer_once() == [] and slurm.updates == []


def test_unsure_means_unchanged_with_one_log_line(caplog: pytest.LogCaptureFixture) -> None:
    records = [pending_record(40, "greengpu.interruptible=perhaps"), pending_record(41, TRAINING, features="a|b"),
               pending_record(42, TRAINING)]
    steer, slurm = steering(records)
    with caplog.at_level(logging.INFO, logger="greengpu.spot.steer"):
        first = steer.steer_once()
        slurm.records = records[:2]
        second = steer.steer_once()
    assert [(o.job_id, o.outcome) for o in first] == [("40", "left"), ("41", "left"), ("42", "steered")]
    assert [(o.job_id, o.outcome) for o in second] == [("40", "left"), ("41", "left")]
    assert slurm.updates == [("JobId=42", "Features=spot", SPOT_MARK)]
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings == ["job 40: left unchanged: its comment cannot be read: comment key greengpu.interruptible: "
                        "expected true or false, got 'perhaps'",
                        "job 41: left unchanged: its constraint 'a|b' is an expression greengpu does not rewrite"]


def test_without_a_pool_it_may_use_a_job_is_left_waiting() -> None:
    steer, slurm = steering([pending_record(50, "greengpu.class=inference"), pending_record(51, TRAINING)],
                            inventory(SPOT_POOL))
    outcomes = steer.steer_once()
    assert [(o.job_id, o.outcome, o.capacity) for o in outcomes] == [("50", "left", None), ("51", "steered", "spot")]
    assert "no cloud pool may take it (class inference" in outcomes[0].detail
    assert slurm.updates == [("JobId=51", "Features=spot", SPOT_MARK)]


def test_a_refused_update_is_logged_and_the_rest_still_steered(caplog: pytest.LogCaptureFixture) -> None:
    steer, slurm = steering([pending_record(60, TRAINING), pending_record(61, TRAINING)], refuse={"60"})
    with caplog.at_level(logging.INFO, logger="greengpu.spot.steer"):
        outcomes = steer.steer_once()
    assert [(o.job_id, o.outcome) for o in outcomes] == [("60", "failed"), ("61", "steered")]
    assert slurm.updates == [("JobId=61", "Features=spot", SPOT_MARK)]
    assert any("job 60: left unchanged, Slurm refused Features=spot" in r.getMessage() for r in caplog.records)


def test_a_job_greengpu_steered_is_decided_again_while_it_waits_and_the_users_own_choice_is_kept() -> None:
    """A deadline job steered to spot that still waits (no spot node yet, or requeued after an interruption and
    held by Slurm) goes to on-demand once the deadline is too close for spot; a job whose feature someone else
    changed since is theirs."""
    due = int(NOW_S + 3 * 3600)
    waiting = pending_record(90, TRAINING, submit_time=NOW_S, deadline=due, features="a100",
                             admin_comment="reserved for lab A")
    mine = pending_record(91, TRAINING, features="on-demand", admin_comment="greengpu.steered=spot")
    clock = [NOW_S]
    slurm = FakeSlurm([waiting, mine])
    steer = SpotSteering(inventory(), load_policy("default"), run=slurm, clock=lambda: clock[0])
    assert [(o.job_id, o.capacity) for o in steer.steer_once()] == [("90", "spot")]
    assert slurm.updates == [("JobId=90", "Features=a100&spot",
                              "AdminComment=reserved for lab A greengpu.steered=spot")]
    clock[0] += 1800  # half an hour later it still waits, now held after a requeue: 2 h of work, 2.5 h left
    waiting["state_reason"] = "BeginTime"
    outcomes = steer.steer_once()
    assert [(o.job_id, o.outcome, o.capacity) for o in outcomes] == [("90", "steered", "on-demand")]
    assert slurm.updates[-1] == ("JobId=90", "Features=a100&on-demand",
                                 "AdminComment=reserved for lab A greengpu.steered=on-demand")
    assert steer.steer_once() == [] and len(slurm.updates) == 2


def test_dry_run_changes_nothing() -> None:
    steer, slurm = steering([pending_record(70, TRAINING)], dry_run=True)
    assert [(o.outcome, o.capacity) for o in steer.steer_once()] == [("steered", "spot")]
    assert slurm.updates == []


def test_a_job_on_more_nodes_sees_each_nodes_interruptions() -> None:
    # Without checkpoints a job redoes everything after an interruption: on one node 30 minutes is still cheaper on
    # spot and redoes little (7% expected, within the default bound of 10%); on eight nodes (eight times the
    # interruptions) the expected rework is 48% of its spot time, and it goes to on-demand.
    one = pending_record(80, "greengpu.interruptible=true", time_limit=30)
    eight = pending_record(81, "greengpu.interruptible=true", time_limit=30, node_count=8)
    cluster = load_cluster_text(INVENTORY.format(pools=SPOT_POOL.replace("0.1,", "0.3,").replace("2}", "8}")
                                                 + ON_DEMAND_POOL.replace("2}", "8}")), "cluster.yaml")
    steer, _ = steering([one, eight], cluster)
    assert [(o.job_id, o.capacity) for o in steer.steer_once()] == [("80", "spot"), ("81", "on-demand")]


def test_prices_are_the_cheapest_pool_of_each_kind_per_gpu_hour() -> None:
    spot, on_demand = cheapest_prices(inventory(), load_policy("default"))
    assert spot is not None and on_demand is not None
    assert (spot.price_per_gpu_hour, spot.interruptions_per_hour) == (4.1 / 4, 0.1)
    assert (on_demand.price_per_gpu_hour, on_demand.interruptions_per_hour) == (16.4 / 4, 0.0)
    assert cheapest_prices(inventory(ON_DEMAND_POOL), load_policy("default"))[0] is None


# ------------------------------------------------------------------ the command


def test_bad_inventory_is_one_line_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "cluster.yaml"
    bad.write_text(INVENTORY.format(pools="  spot: {type: gpu9, spot: true, price_per_hour: 4.1, max_nodes: 2}\n"))
    assert main(["spot", "steer", "--cluster", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "cluster.yaml" in err and "Traceback" not in err


def test_slurm_unreachable_is_one_line_exit_1(tmp_path: Path, dead_slurm: Path,  # noqa: F811
                                              capsys: pytest.CaptureFixture[str]) -> None:
    good = tmp_path / "cluster.yaml"
    good.write_text(INVENTORY.format(pools=SPOT_POOL + ON_DEMAND_POOL))
    assert main(["spot", "steer", "--cluster", str(good), "--log", str(tmp_path / "steer.log")]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "squeue" in err and "Traceback" not in err


def test_as_a_service_it_outlives_an_unreachable_slurm_and_stops_on_sigterm(tmp_path: Path,
                                                                            dead_slurm: Path) -> None:  # noqa: F811
    good = tmp_path / "cluster.yaml"
    good.write_text(INVENTORY.format(pools=SPOT_POOL + ON_DEMAND_POOL))
    log_file = tmp_path / "steer.log"
    service = subprocess.Popen([sys.executable, "-m", "greengpu", "spot", "steer", "--cluster", str(good), "--every",
                                "1", "--log", str(log_file)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, env={**os.environ, "SLURM_CONF": str(dead_slurm)})
    try:
        deadline = time.monotonic() + 30
        def passes() -> int:
            return log_file.read_text().count("cannot read Slurm's queue") if log_file.exists() else 0

        while passes() < 2:
            assert service.poll() is None, service.communicate()
            assert time.monotonic() < deadline, "no second pass logged"
            time.sleep(0.1)
    finally:
        service.send_signal(signal.SIGTERM)
        out, err = service.communicate(timeout=30)
    assert service.returncode == 0 and out == "" and err == ""
    assert "Traceback" not in log_file.read_text()
