"""One brain, proved differentially: the same trace through `simulate` (the simulator's engine, its figures
unchanged) and through the daemon on the fake cluster (`Daemon.tick` over `FakeCluster`, the real NVML
adapter on fake GPUs) gives the same actions.

Same clock: a manual clock that the daemon ticks at exactly the instants the simulator ran its scheduling
cycles; job arrivals and completions come from the same trace (the fake cluster releases a job at its
submit time and ends it after its duration, as the replay does for a job that runs at full speed).
Compared: every placement (job, instant, GPUs), every preemption signal and every stop, each job's
finish time, and the GPUs' limits.

The policy is `always-on` (no capping, no sleep): the fake cluster's jobs always run at full speed and its
nodes take fixed times to suspend, where the replay paces a capped job by the power model and boots and
suspends by the inventory's timings, so with those levers on the two would part for reasons of the fake,
not of the brain (docs/ARCHITECTURE.md, "One path"). Making them agree found two places where the fake
cluster combined differently from the replay, both fixed in the fake: fractional jobs could not share a
GPU there, and a preempted job kept all its work (and lost its preemption record) where the replay keeps
only what its last checkpoint saved.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from manual_clock import ManualClock

from greengpu.config.inventory import load_cluster
from greengpu.config.policy import load_policy
from greengpu.control.audit import Alerts, AuditLog
from greengpu.control.daemon import Daemon
from greengpu.control.daemon_store import DaemonStore
from greengpu.control.fake_cluster import FakeCluster
from greengpu.model import Cluster, Job, KillJob, PlaceJob, PreemptJob
from greengpu.policy import Policy
from greengpu.sim.engine import Simulation
from greengpu.sim.traces import read_trace

REPO = Path(__file__).resolve().parents[2]
Step = tuple[float, str, str, tuple[tuple[str, int, int], ...]]
"""(instant, kind, job, GPUs as (node, index, milli-GPUs)) of one job action."""


def _slots(action: PlaceJob) -> tuple[tuple[str, int, int], ...]:
    return tuple(sorted((s.node, s.gpu_index, s.units) for s in action.slots))


def replayed(cluster: Cluster, policy: Policy, jobs: list[Job]) -> tuple[list[float], list[Step], dict[str, float]]:
    """The simulator's cycles' instants, the job actions its job runner carried out, and each job's finish."""
    sim = Simulation(cluster, policy, jobs)
    instants: list[float] = []
    steps: list[Step] = []
    cycle, start, signal, kill = sim._cycle, sim.work.start, sim.work.signal, sim.work.kill

    def on_cycle() -> None:
        instants.append(sim.clock.now_s)
        cycle()

    def on_start(action: PlaceJob, lifted: bool) -> None:
        steps.append((sim.clock.now_s, "place", action.job_id, _slots(action)))
        start(action, lifted)

    def on_signal(action: PreemptJob) -> None:
        steps.append((sim.clock.now_s, "preempt", action.job_id, ()))
        signal(action)

    def on_kill(action: KillJob) -> None:
        steps.append((sim.clock.now_s, "kill", action.job_id, ()))
        kill(action)

    sim._cycle = on_cycle  # type: ignore[method-assign]
    sim.work.start, sim.work.signal, sim.work.kill = on_start, on_signal, on_kill  # type: ignore[method-assign]
    result = sim.run()
    assert result.invariant_violations == 0
    return instants, steps, dict(sim.work.finish_s)


def driven(tmp_path: Path, cluster: Cluster, policy: Policy, jobs: list[Job],
           instants: list[float]) -> tuple[list[Step], dict[str, float], FakeCluster, Daemon]:
    """The daemon on the fake cluster, ticked at `instants`: the job actions it carried out, each job's finish."""
    origin_s = jobs[0].submit_time_s
    clock = ManualClock(origin_s)
    state = tmp_path / "state"
    state.mkdir()
    body = FakeCluster(cluster, jobs, state, start_s=origin_s)
    audit = AuditLog(state / "audit.jsonl")
    daemon = Daemon(body, policy, DaemonStore(state), audit, Alerts(audit), clock=clock)
    steps: list[Step] = []
    for instant in sorted(set(instants)):
        clock.now_s = instant
        assert daemon.tick().ok
        assert daemon.last_result is not None
        for action in daemon.last_result.scheduled.cycle.actions:
            if isinstance(action, PlaceJob):
                steps.append((instant, "place", action.job_id, _slots(action)))
            elif isinstance(action, PreemptJob):
                steps.append((instant, "preempt", action.job_id, ()))
            elif isinstance(action, KillJob):
                steps.append((instant, "kill", action.job_id, ()))
    clock.now_s = max(instants[-1], *[j.submit_time_s + j.duration_s for j in jobs]) + 365 * 86_400.0
    body.observe(clock.now_s, 0, 0)  # the last jobs run to their end
    return steps, dict(body.finished), body, daemon


def first_difference(a: list[Any], b: list[Any]) -> str:
    for index, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return f"step {index}: replay {x} / daemon {y}"
    return f"lengths {len(a)} / {len(b)}"


@pytest.mark.parametrize("policy_name", ["always-on"])
def test_differential_the_lab_week_through_simulate_and_the_daemon_gives_the_same_actions(
        tmp_path: Path, policy_name: str) -> None:
    cluster = load_cluster(REPO / "examples" / "lab-a100.cluster.yaml")
    policy = load_policy(policy_name)
    jobs = read_trace(REPO / "examples" / "lab-a100.week.trace.csv").jobs

    instants, replay_steps, replay_finish = replayed(cluster, policy, jobs)
    live_steps, live_finish, body, daemon = driven(tmp_path, cluster, policy, jobs, instants)

    assert live_steps == replay_steps, first_difference(replay_steps, live_steps)
    assert live_finish == replay_finish
    # Not a vacuous agreement: every job ran, fractional jobs shared GPUs, preemptions happened.
    assert len(replay_finish) == len(jobs)
    assert any(units < 1000 for _, kind, _, slots in replay_steps if kind == "place" for _, _, units in slots)
    assert {"place", "preempt", "kill"} <= {kind for _, kind, _, _ in replay_steps}
    assert not [r for r in daemon.audit.records() if r.get("alert")]  # every action carried out
    for node in cluster.nodes:  # capping off: every GPU at its default limit
        node_type = cluster.node_types[node.type_name]
        assert {body.gpu_limit_w(node.name, i) for i in range(node_type.gpus)} == {node_type.gpu_max_w}


STRESS_DAY = 1
"""The day of stress scenario d replayed (the Philly trace's busiest days on 320 GPUs): 2 October 2017, 1,353
jobs, a queue (p95 wait 40 minutes) and preemptions."""


def test_differential_a_slice_of_a_stress_day_through_simulate_and_the_daemon_gives_the_same_actions(
        tmp_path: Path) -> None:
    import sys

    sys.path.insert(0, str(REPO / "tests" / "benchmarks"))
    from test_bench_stress import scaled_philly_cluster, window_jobs

    cluster = scaled_philly_cluster(320)
    policy = load_policy("always-on")
    window = window_jobs()
    start_s = window[0].submit_time_s + STRESS_DAY * 86_400.0
    jobs = [j for j in window if start_s <= j.submit_time_s < start_s + 86_400.0]

    instants, replay_steps, replay_finish = replayed(cluster, policy, jobs)
    live_steps, live_finish, _, daemon = driven(tmp_path, cluster, policy, jobs, instants)

    assert live_steps == replay_steps, first_difference(replay_steps, live_steps)
    assert live_finish == replay_finish
    assert len(replay_finish) == len(jobs) and len(jobs) > 100
    submitted = {j.job_id: j.submit_time_s for j in jobs}
    waited = sum(1 for time_s, kind, job, _ in replay_steps if kind == "place" and time_s > submitted[job])
    assert waited > 100 and {"place", "preempt", "kill"} <= {kind for _, kind, _, _ in replay_steps}  # a queue
    assert not [r for r in daemon.audit.records() if r.get("alert")]
