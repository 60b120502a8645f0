"""A job's last checkpoint from its workload manager: the `greengpu.io/last-checkpoint=T` mark of a Slurm comment
(through `squeue --json`), the pod annotation; unbelievable marks are ignored."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from greengpu.control.bodies.checkpoint_marks import checkpoint_in_comment, checkpoint_value
from greengpu.control.bodies.slurm_body import parse_jobs

NOW = 1_700_000_000.0
SQUEUE = (Path(__file__).parents[2] / "data" / "slurm" / "squeue-22.05.json").read_text()


@pytest.mark.parametrize(("comment", "expected"), [
    ("greengpu.io/last-checkpoint=1699999400", 1_699_999_400.0),
    ("class=training greengpu.io/last-checkpoint=1699999400.5 other", 1_699_999_400.5),
    ("greengpu.io/last-checkpoint=1699990000 greengpu.io/last-checkpoint=1699999000", 1_699_999_000.0),
    ("greengpu.io/last-checkpoint=1700000050", 1_700_000_050.0),  # a clock a little ahead
    ("greengpu.io/last-checkpoint=1700009999", None),  # hours ahead: not believed
    ("greengpu.io/last-checkpoint=12", None),  # before 2000
    ("greengpu.io/last-checkpoint=1e9", None),
    ("greengpu.io/last-checkpoint=", None),
    ("", None),
    (None, None),
])
def test_the_comment_mark(comment: str | None, expected: float | None) -> None:
    assert checkpoint_in_comment(comment, NOW) == expected


def test_the_annotation_value() -> None:
    assert checkpoint_value(" 1699999400 ", NOW) == 1_699_999_400.0
    assert checkpoint_value("nan", NOW) is None and checkpoint_value("soon", NOW) is None
    assert checkpoint_value(None, NOW) is None


def test_squeue_comments_give_running_jobs_their_last_checkpoint() -> None:
    document = json.loads(SQUEUE)
    running = [r for r in document["jobs"] if "RUNNING" in str(r.get("job_state"))]
    assert running
    running[0]["comment"] = "greengpu.io/last-checkpoint=1699999400"
    jobs, _ = parse_jobs(json.dumps(document), {"node1", "node2"}, now_s=NOW)
    assert [r.last_checkpoint_s for r in jobs] == [1_699_999_400.0]
    jobs, _ = parse_jobs(SQUEUE, {"node1", "node2"}, now_s=NOW)
    assert [r.last_checkpoint_s for r in jobs] == [None]
