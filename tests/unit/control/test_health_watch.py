"""The agent's health watch on the fake NVML: history per GPU, alerts when a state worsens (logged once),
and the health metrics served over real HTTP on loopback."""

from __future__ import annotations

import logging
import urllib.request
from pathlib import Path

import pytest
from manual_clock import ManualClock
from prometheus_client.parser import text_string_to_metric_families

from greengpu.backends.fake_nvml import FakeNvml, make_gpus
from greengpu.backends.nvml import NvmlBackend
from greengpu.control.agent.exporter import agent_metrics_server
from greengpu.control.agent.health_watch import HealthWatch
from greengpu.control.agent.jobclass import LocalMap
from greengpu.control.agent.journal import Journal
from greengpu.control.agent.node_agent import Agent
from greengpu.health.score import HealthState
from greengpu.policy import CappingPolicy

HOUR_S = 3600.0


def make_watch(tmp_path: Path) -> tuple[HealthWatch, Agent, FakeNvml, ManualClock]:
    clock = ManualClock(0.0)
    fake = FakeNvml(make_gpus("2xA100"), clock=clock)
    backend = NvmlBackend(lib=fake, clock=clock)
    agent = Agent(backend, CappingPolicy(enabled=False), LocalMap({0: "inference"}, "training"),
                  Journal(tmp_path / "journal.jsonl"), clock=clock)
    agent.start()
    watch = HealthWatch(backend, "gpu-node-7", jobs=lambda: {i: c.job for i, c in agent.gpus.items()})
    return watch, agent, fake, clock


def test_climbing_errors_raise_one_warning_then_a_critical_xid_one_failing(tmp_path: Path,
                                                                            caplog: pytest.LogCaptureFixture) -> None:
    watch, agent, fake, clock = make_watch(tmp_path)
    fake.set_load(0, 0.9, [4242])
    caplog.set_level(logging.WARNING, logger="greengpu.health")
    raised = []
    for hour in range(30):
        clock.now_s += HOUR_S
        fake.gpus[0].ecc_corrected += 1 if hour % 2 == 0 else 0  # 12 a day
        agent.tick()
        raised += watch.tick()
    assert [(a.gpu_index, a.state) for a in raised] == [(0, HealthState.WARNING)]  # once, not every tick
    assert watch.assessments[1].state is HealthState.HEALTHY
    assert raised[0].jobs[0].job_class == "inference"
    fake.inject_xid(1, 48)
    clock.now_s += 10
    raised = watch.tick()
    assert [(a.gpu_index, a.state, a.critical) for a in raised] == [(1, HealthState.FAILING, ("Xid 48",))]
    lines = [r.getMessage() for r in caplog.records if r.name == "greengpu.health"]
    assert lines[0].startswith("GPU health warning: gpu-node-7 GPU 0 (GPU-fake-0000) score 0.7")
    assert lines[-1].startswith("GPU health failing: gpu-node-7 GPU 1 (GPU-fake-0001) score 1.00; critical: Xid 48")
    assert [r.levelname for r in caplog.records if r.name == "greengpu.health"] == ["WARNING", "ERROR"]

    server = agent_metrics_server(agent, "127.0.0.1", 0, watch=watch).start()
    try:
        host, port = server.address
        with urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=5) as response:
            text = response.read().decode()
    finally:
        server.stop()
    families = {f.name: f for f in text_string_to_metric_families(text)}
    scores = {s.labels["gpu"]: s.value for s in families["greengpu_gpu_health_score"].samples}
    assert scores["0"] > 0.7 and scores["1"] == 1.0
    states = {(s.labels["gpu"], s.labels["state"]) for s in families["greengpu_gpu_health_state"].samples
              if s.value == 1.0}
    assert states == {("0", "warning"), ("1", "failing")}
    sbe = [s for s in families["greengpu_gpu_health_signal"].samples
           if s.labels["gpu"] == "0" and s.labels["signal"] == "sbe_per_day"]
    assert sbe[0].labels["unit"] == "errors/day" and sbe[0].value == pytest.approx(12, abs=1)
    shares = {s.labels["signal"]: s.value for s in families["greengpu_gpu_health_contribution"].samples
              if s.labels["gpu"] == "0"}
    assert shares["sbe_per_day"] == pytest.approx(scores["0"])
    critical = {s.labels["gpu"]: s.value for s in families["greengpu_gpu_health_critical_events"].samples}
    assert critical == {"0": 0.0, "1": 1.0}
