"""What the reports change in the daemon's tick, on a body without a drain of its own: the failing node is drained
in the daemon's books (and stays so in what the core sees); without reports nothing changes, object for object."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from inventories import a100_type, write_inventory

from greengpu.brain.control_tick import TickResult, control_tick
from greengpu.config.inventory import load_cluster
from greengpu.config.policy import load_policy
from greengpu.control.bodies.body import Observation
from greengpu.control.daemon.agent_reports import AgentReport, AgentReports, GpuReport
from greengpu.control.daemon.audit import Alerts, AuditLog
from greengpu.control.daemon.metrics import DaemonMetrics
from greengpu.control.daemon.report_effects import ReportEffects
from greengpu.health.score import HealthState
from greengpu.model import Cluster, ClusterSnapshot
from greengpu.sleep.sleep_wake import SleepObservation

NOW = 1_700_000_000.0


@dataclass
class NoDrainBody:
    """A body that cannot drain (the daemon keeps the drain in its books)."""

    cluster: Cluster
    name: str = "plain"


@dataclass
class Parts:
    body: NoDrainBody
    metrics: DaemonMetrics
    alerts: Alerts
    audit: AuditLog
    last_result: TickResult | None = None


def observation(cluster: Cluster) -> Observation:
    return Observation(ClusterSnapshot(NOW, cluster), (), SleepObservation(now_s=NOW), {}, {})


def test_without_reports_the_observation_is_what_the_body_saw(tmp_path: Path) -> None:
    cluster = load_cluster(write_inventory(tmp_path / "c.yaml", {"a8": a100_type()}, ["{name: n1, type: a8}"]))
    seen = observation(cluster)
    merged = ReportEffects(AgentReports(0.2)).merge(seen, NOW)
    assert merged.snapshot is seen.snapshot and merged.sleep is seen.sleep


def test_a_body_without_a_drain_keeps_it_in_the_daemons_books(tmp_path: Path) -> None:
    cluster = load_cluster(write_inventory(tmp_path / "c.yaml", {"a8": a100_type()},
                                           ["{name: n1, type: a8}", "{name: n2, type: a8}"]))
    reports = AgentReports(0.2)
    reports.put(AgentReport("n1", NOW, (GpuReport(3, 0.0, HealthState.FAILING, 0.95, None, (), ()),), {}), NOW)
    effects = ReportEffects(reports)
    audit = AuditLog(tmp_path / "audit.jsonl")
    parts = Parts(NoDrainBody(cluster), DaemonMetrics(), Alerts(audit), audit)
    merged = effects.merge(observation(cluster), NOW)
    assert merged.snapshot.node_states["n1"].failing_gpus == frozenset({3})
    assert not merged.snapshot.node_states["n1"].schedulable
    parts.last_result = control_tick(merged.snapshot, load_policy("default"), (), merged.sleep)
    assert [d.node for d in parts.last_result.drains] == ["n1"]  # the tick's health lever decides the drain
    effects.after_tick(parts, merged, NOW, act=True)  # type: ignore[arg-type]
    assert effects.kept_drained == {"n1"} and effects.drained == {"n1"}
    later = effects.merge(observation(cluster), NOW + 60)
    assert later.snapshot.node_states["n1"].drained and "n2" not in later.snapshot.node_states
    lines = (tmp_path / "audit.jsonl").read_text()
    assert "n1: drained in the daemon's books" in lines and "node_drained" in lines
    assert "n1: GPU 3 failing; no new work, drained once empty; no job left" in lines


def test_only_interruptible_training_and_batch_on_a_failing_node_are_asked_to_checkpoint(tmp_path: Path) -> None:
    from dataclasses import replace

    from greengpu.health.drain import plan_checkpoints, plan_drains
    from greengpu.model import GpuSlot, Job, NodeState, RunningJob

    cluster = load_cluster(write_inventory(tmp_path / "c.yaml", {"a8": a100_type()},
                                           ["{name: n1, type: a8}", "{name: n2, type: a8}"]))

    def running(job_id: str, node: str, job_class: str, interruptible: bool = True,
                signalled_s: float | None = None) -> RunningJob:
        job = Job(job_id=job_id, tenant="a", gpus=1, duration_s=600, submit_time_s=NOW, job_class=job_class,
                  interruptible=interruptible)
        return RunningJob(job=job, slots=(GpuSlot(node, 0),), start_time_s=NOW, expected_end_s=NOW + 600,
                          preempt_signalled_s=signalled_s)

    jobs = (running("t", "n1", "training"), running("b", "n1", "batch"), running("i", "n1", "inference"),
            running("x", "n1", "training", interruptible=False), running("s", "n1", "training", signalled_s=NOW),
            running("h", "n2", "training"))
    snapshot = ClusterSnapshot(NOW, cluster, jobs, (), {"n1": NodeState(failing_gpus=frozenset({0}))})
    assert plan_checkpoints(snapshot) == ("b", "t")
    assert plan_drains(snapshot) == ()  # jobs still there
    drained = replace(snapshot, node_states={"n1": NodeState(failing_gpus=frozenset({0}), drained=True)})
    assert plan_checkpoints(drained) == () and plan_checkpoints(replace(snapshot, node_states={})) == ()
    empty = replace(snapshot, running=jobs[5:])
    assert [d.node for d in plan_drains(empty)] == ["n1"]
