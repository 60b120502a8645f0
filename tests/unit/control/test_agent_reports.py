"""The agents' reports as the daemon reads them: every field checked (one line naming it), the latest report per
node with its age, stale reports unknown (never idle, never unhealthy), energy per node per period."""

from __future__ import annotations

import json
from typing import Any

import pytest

from greengpu.control.daemon.agent_reports import MAX_REPORT_BYTES, AgentReports, ReportError, parse_report
from greengpu.health.score import HealthState

GPUS = {"n1": 2, "n2": 2}


def report(node: str = "n1", **gpu0: Any) -> dict[str, Any]:
    first = {"index": 0, "utilization": 0.9, "health": "healthy", "score": 0.0, "energy_mj": 1_000_000,
             "pids": [11], "jobs": ["j1"], **gpu0}
    return {"node": node, "time_s": 100.0, "gpus": [first, {"index": 1, "utilization": 0.0, "energy_mj": 2_000_000}],
            "jobs": {"j1": {"tenant": "a", "last_checkpoint_s": 50.0, "checkpoint_duration_s": 12.0}}}


def parse(value: Any) -> Any:
    return parse_report(json.dumps(value).encode(), GPUS)


def test_a_good_report_is_read_whole() -> None:
    got = parse(report())
    assert got.node == "n1" and [g.index for g in got.gpus] == [0, 1]
    assert got.gpus[0].pids == (11,) and got.gpus[0].jobs == ("j1",) and got.gpus[1].health is HealthState.HEALTHY
    assert got.jobs["j1"].last_checkpoint_s == 50.0 and got.jobs["j1"].checkpoint_duration_s == 12.0
    assert got.energy_j() == 3000.0


@pytest.mark.parametrize(("change", "where"), [
    ({"utilization": 1.5}, "report.gpus[0].utilization"),
    ({"utilization": "x"}, "report.gpus[0].utilization"),
    ({"utilization": True}, "report.gpus[0].utilization"),
    ({"index": 2}, "report.gpus[0].index"),
    ({"index": 1}, "report.gpus[1].index: GPU 1 reported twice"),
    ({"health": "dead"}, "report.gpus[0].health"),
    ({"health": []}, "report.gpus[0].health"),  # unhashable: once a 503 and a traceback in the log
    ({"energy_mj": -1}, "report.gpus[0].energy_mj"),
    ({"pids": ["a"]}, "report.gpus[0].pids[0]"),
    ({"jobs": [""]}, "report.gpus[0].jobs[0]"),
    ({"colour": 1}, "report.gpus[0].colour: unknown key"),
    ({"\n": 1}, "report.gpus[0].\\n: unknown key"),  # a client's key, escaped: the refusal stays one line
])
def test_a_bad_field_is_one_line_naming_it(change: dict[str, Any], where: str) -> None:
    with pytest.raises(ReportError) as error:
        parse(report(**change))
    assert where in str(error.value) and "\n" not in str(error.value)


def test_unknown_nodes_junk_and_oversized_bodies_are_refused() -> None:
    with pytest.raises(ReportError, match="not a node of the inventory"):
        parse(report(node="n9"))
    with pytest.raises(ReportError, match="not JSON"):
        parse_report(b"{", GPUS)
    with pytest.raises(ReportError, match="not JSON"):
        parse_report(b"\xff", GPUS)
    with pytest.raises(ReportError, match="report.time_s"):
        parse_report(b'{"node": "n1", "time_s": NaN, "gpus": []}', GPUS)
    with pytest.raises(ReportError, match="larger than"):
        parse_report(b" " * (MAX_REPORT_BYTES + 1), GPUS)
    with pytest.raises(ReportError, match="report.gpus: missing"):
        parse({"node": "n1", "time_s": 1.0})


def test_stale_reports_are_unknown_and_never_unhealthy_or_idle() -> None:
    store = AgentReports(idle_util_threshold=0.2, stale_after_s=60.0)
    store.put(parse(report(health="failing", utilization=0.0, pids=[], jobs=[])), received_s=1000.0)
    assert store.gpu_health(1030.0) == {"n1": {0: HealthState.FAILING}}
    use = store.node_use(1030.0)["n1"]
    assert use.gpu_util_max == 0.0 and use.job_processes == 0
    assert store.gpu_health(1061.0) == {}  # stale: says nothing, the node counts as healthy as before
    assert store.node_use(1061.0)["n1"].gpu_util_max is None  # stale: use unknown (kept awake)
    assert store.ages_s(1061.0) == {"n1": 61.0}


def test_energy_per_node_per_period_from_the_counters() -> None:
    store = AgentReports(idle_util_threshold=0.2)
    store.put(parse(report()), received_s=1000.0)
    assert store.energy_period("n1") is None  # first sight
    store.put(parse(report(energy_mj=1_500_000)), received_s=1060.0)
    period = store.energy_period("n1")
    assert period is not None and (period.start_s, period.end_s, period.energy_j) == (1000.0, 1060.0, 500.0)
    store.put(parse(report(energy_mj=10)), received_s=1120.0)  # a counter reset (a reboot): no period
    assert store.energy_period("n1") is None and store.energy_periods() == {}
    store.put(parse(report(energy_mj=None)), received_s=1180.0)  # a GPU without a counter: not measured
    assert store.energy_period("n1") is None


def test_the_last_busy_time_and_checkpoints_come_from_the_reports() -> None:
    store = AgentReports(idle_util_threshold=0.2)
    store.put(parse(report()), received_s=1000.0)
    store.put(parse(report(utilization=0.1, pids=[], jobs=[])), received_s=1060.0)
    use = store.node_use(1070.0)["n1"]
    assert use.last_busy_s == 1000.0 and use.job_processes == 0 and use.gpu_util_max == 0.1
    assert store.last_checkpoints(1070.0) == {"j1": 50.0}
