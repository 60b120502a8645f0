"""Health-aware scheduling: inference keeps off warning GPUs while healthy capacity fits it, interruptible
work takes them first, a failing GPU's node takes no new job and is drained once empty. Every cycle runs
through the schedkit driver, which cross-checks remembered against fresh books and checks invariants."""

from __future__ import annotations

from dataclasses import replace

from schedkit import Driver, job, make_cluster, node_type, placed

from greengpu.health.alerts import alert_dict, alert_line, build_alert, jobs_on_gpu
from greengpu.health.cluster import drains_due, node_states_with_health
from greengpu.health.score import HealthState, assess
from greengpu.health.signals import GpuHealthSample, SignalHistory
from greengpu.model import GpuSlot, NodeState, PowerState, RunningJob, Tenant, WakeNode
from greengpu.sched.placement import needs_healthy_gpus

A100x4 = node_type(4)
TENANTS = [Tenant("t", quota_gpus=64)]


def driver_with(health: dict[str, dict[int, HealthState]], nodes: int = 2) -> Driver:
    driver = Driver(make_cluster([(nodes, A100x4, "d0")], TENANTS))
    set_health(driver, health)
    return driver


def set_health(driver: Driver, health: dict[str, dict[int, HealthState]]) -> None:
    states = node_states_with_health(driver.snapshot.node_states, health)
    driver.snapshot = replace(driver.snapshot, node_states=states)


def gpus_of(driver: Driver, job_id: str) -> list[tuple[str, int]]:
    running = driver.running()[job_id]
    return sorted((s.node, s.gpu_index) for s in running.slots)


def test_inference_avoids_warning_gpus_while_healthy_capacity_exists() -> None:
    driver = driver_with({"n0000": {0: HealthState.WARNING}})
    driver.submit(*(job(f"inf{i}", job_class="inference", interruptible=False) for i in range(4)))
    driver.cycle()
    # The plain best fit would start at n0000 GPU 0; the healthy node takes all four.
    assert {gpus_of(driver, f"inf{i}")[0][0] for i in range(4)} == {"n0001"}
    driver.submit(*(job(f"more{i}", job_class="interactive") for i in range(3)))
    driver.cycle()
    # Healthy capacity left only on the warning node: its healthy GPUs, not the warning one.
    assert sorted(gpus_of(driver, f"more{i}")[0] for i in range(3)) == [("n0000", 1), ("n0000", 2), ("n0000", 3)]
    driver.submit(job("last", job_class="inference", interruptible=False))
    driver.cycle()
    assert gpus_of(driver, "last") == [("n0000", 0)]  # nothing healthy left: the warning GPU beats waiting


def test_interruptible_work_takes_the_warning_gpus_first() -> None:
    driver = driver_with({"n0000": {2: HealthState.WARNING}}, nodes=1)
    driver.submit(job("train", job_class="training", checkpoint_interval_s=600))
    driver.cycle()
    assert gpus_of(driver, "train") == [("n0000", 2)]
    driver.submit(job("batch", gpus=2, job_class="batch"))
    driver.cycle()
    assert gpus_of(driver, "batch") == [("n0000", 0), ("n0000", 1)]
    assert needs_healthy_gpus(job("x", job_class="training", interruptible=False))
    assert not needs_healthy_gpus(job("y", job_class="batch"))


def test_a_gang_of_inference_spans_healthy_nodes_before_a_warning_one() -> None:
    driver = driver_with({"n0000": {3: HealthState.WARNING}}, nodes=3)
    driver.submit(job("big", gpus=8, job_class="inference", interruptible=False))
    driver.cycle()
    assert {node for node, _ in gpus_of(driver, "big")} == {"n0001", "n0002"}


def test_a_failing_gpu_gets_no_new_jobs_and_its_node_is_drained_once_empty() -> None:
    driver = driver_with({}, nodes=2)
    driver.start_running(RunningJob(job("old", duration_s=600), (GpuSlot("n0000", 1),), 0.0, 600.0))
    set_health(driver, {"n0000": {1: HealthState.FAILING}})
    driver.submit(*(job(f"t{i}", job_class="training") for i in range(6)))
    driver.cycle()
    started = placed(driver.history[-1].actions)
    assert len(started) == 4 and all(s.node == "n0001" for p in started.values() for s in p.slots)
    assert drains_due(driver.snapshot) == ()  # "old" still runs there
    for _ in range(12):
        driver.tick()
    assert "old" not in driver.running()
    # The two jobs left wait rather than go near the failing GPU's node.
    assert not any(s.node == "n0000" for r in driver.snapshot.running for s in r.slots)
    assert drains_due(driver.snapshot) == ("n0000",)
    drained = {**driver.snapshot.node_states, "n0000": replace(driver.snapshot.node_states["n0000"], drained=True)}
    driver.snapshot = replace(driver.snapshot, node_states=drained)
    assert drains_due(driver.snapshot) == ()


def test_without_health_states_placement_is_unchanged() -> None:
    plain = Driver(make_cluster([(2, A100x4, "d0")], TENANTS))
    healthy = driver_with({"n0000": {0: HealthState.HEALTHY}, "n0001": {}})
    assert healthy.snapshot.node_states == {}
    for driver in (plain, healthy):
        driver.submit(*(job(f"j{i}", gpus=1 + i % 3, job_class="inference" if i % 2 else "training")
                        for i in range(5)))
        driver.cycle()
    assert plain.history[-1].actions == healthy.history[-1].actions


def test_node_states_keep_sleep_state_and_drop_nodes_back_to_healthy() -> None:
    asleep = {"n0002": NodeState(PowerState.ASLEEP)}
    states = node_states_with_health(asleep, {"n0000": {1: HealthState.WARNING, 2: HealthState.FAILING},
                                              "n0002": {0: HealthState.WARNING}})
    assert states["n0000"].warning_gpus == {1} and states["n0000"].failing_gpus == {2}
    assert not states["n0000"].schedulable
    assert states["n0002"].power is PowerState.ASLEEP and states["n0002"].warning_gpus == {0}
    assert node_states_with_health(states, {"n0002": {}}) == {"n0002": NodeState(PowerState.ASLEEP)}


def test_an_alert_names_the_gpu_its_score_signals_and_the_jobs_with_their_checkpoints() -> None:
    history = SignalHistory(86400.0)
    history.add(GpuHealthSample(0.0, ecc_corrected_total=0, pcie_replays_total=0))
    history.add(GpuHealthSample(86400.0, ecc_corrected_total=30, pcie_replays_total=100, xids=(79,)))
    assessment = assess(history.samples, history.critical, 86400.0)
    running = (
        RunningJob(job("serve", job_class="inference", tenant="web"), (GpuSlot("n7", 3, 500),), 80000.0, 90000.0),
        RunningJob(job("train", tenant="lab", checkpoint_interval_s=1800), (GpuSlot("n7", 3, 500),), 0.0, 1e6),
        RunningJob(job("elsewhere"), (GpuSlot("n7", 2),), 0.0, 1e6),
    )
    jobs = jobs_on_gpu(running, "n7", 3, 86400.0)
    alert = build_alert(86400.0, "n7", 3, "GPU-abc", assessment, jobs)
    assert alert is not None and alert.state is HealthState.FAILING
    assert [j.job_id for j in alert.jobs] == ["serve", "train"]
    assert alert.jobs[1].last_checkpoint_s == 86400.0 // 1800 * 1800
    line = alert_line(alert)
    assert line.startswith("GPU health failing: n7 GPU 3 (GPU-abc) score 1.00; critical: Xid 79; top signals: ")
    assert "serve (tenant web, inference, last checkpoint: none seen since start)" in line
    assert "train (tenant lab, training, last checkpoint 0 s ago)" in line
    data = alert_dict(alert)
    assert data["critical"] == ["Xid 79"] and data["gpu"] == 3
    assert [j["tenant"] for j in data["jobs"]] == ["web", "lab"]  # type: ignore[index]
    quiet = assess((GpuHealthSample(0.0, ecc_corrected_total=5),), (), 0.0)
    assert build_alert(0.0, "n7", 0, "GPU-x", quiet, ()) is None


def test_work_a_failing_node_cannot_take_wakes_a_sleeping_replacement() -> None:
    driver = driver_with({}, nodes=2)
    asleep = {"n0001": NodeState(PowerState.ASLEEP)}
    driver.snapshot = replace(driver.snapshot, node_states=node_states_with_health(
        asleep, {"n0000": {3: HealthState.FAILING}}))
    driver.submit(job("needs-a-gpu", job_class="inference", interruptible=False))
    result = driver.cycle()
    assert [a.node for a in result.actions if isinstance(a, WakeNode)] == ["n0001"]
    assert placed(result.actions) == {}
