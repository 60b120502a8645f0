"""One brain, proved differentially: the same trace through `simulate` (the simulator's engine, its figures
unchanged) and through the daemon on the fake cluster (`Daemon.tick` over `FakeCluster`, the real NVML
adapter on fake GPUs) gives the same actions, lever by lever (issue 36).

Same clock: a manual clock that the daemon ticks at exactly the instants the simulator decided at (its
scheduling cycles and its sleep lever's asks); job arrivals and completions come from the same trace.
Compared, in order and with their instants: every placement (job, GPUs), preemption signal and stop; every
sleep and wake; every change of a busy GPU's limit and locked clock (the setting of the first job on it);
and each job's finish time. Under `always-on` and under `default` (capping per class, locked clocks for
inference, sleep behind a warm reserve, caps lifting for jobs in a waiting job's way), on the lab week and
on a day of stress scenario d.

Making them agree found where the bodies combined differently, each fixed where it was wrong:
- the fake cluster: fractional jobs could not share a GPU; a preempted job kept all its work (and lost its
  preemption record) where the replay keeps only what its last checkpoint saved; capped jobs ran at full
  speed (now both bodies pace a job by its GPUs' settings through `greengpu.energy.job_pace`);
- the simulator: it asked the sleep lever only when an idle timeout came due (a node the warm reserve held
  slept later than under the daemon, which asks every tick), and at an idle check with work waiting it ran
  the sleep lever without a cycle (keeping the last cycle's verdict on which caps lift);
- the tick: its levers saw the GPUs of the jobs a cycle started as busy but those of the jobs it stopped as
  still busy, so a tick that preempted one job for another saw no slack and lifted every cap.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from manual_clock import ManualClock

from greengpu.brain.control_tick import TickAction
from greengpu.capping.gpu_power import gpu_setting
from greengpu.config.inventory import load_cluster
from greengpu.config.policy import load_policy
from greengpu.control.daemon.audit import Alerts, AuditLog
from greengpu.control.daemon.service import Daemon
from greengpu.control.daemon.store import DaemonStore
from greengpu.control.fakes.fake_cluster import FakeCluster
from greengpu.model import (
    Cluster,
    Job,
    KillJob,
    PlaceJob,
    PowerState,
    PreemptJob,
    RunningJob,
    SleepNode,
    WakeNode,
)
from greengpu.policy import Policy
from greengpu.sim.engine import Simulation
from greengpu.sim.nodes import SimNode
from greengpu.sim.traces import read_trace

REPO = Path(__file__).resolve().parents[2]
Step = tuple[float, str, str, tuple[tuple[str, int, int], ...]]
"""(instant, kind, job, GPUs as (node, index, milli-GPUs)) of one job action."""
Power = tuple[float, str, str]
"""(instant, "sleep" or "wake", node)."""
Setting = tuple[float, str, int, float, int | None]
"""(instant, node, GPU index, limit W, locked clock MHz or None): a busy GPU's setting from then."""


def _slots(action: PlaceJob) -> tuple[tuple[str, int, int], ...]:
    return tuple(sorted((s.node, s.gpu_index, s.units) for s in action.slots))


def _first_jobs(running: Iterable[RunningJob]) -> dict[tuple[str, int], RunningJob]:
    """Each busy GPU's job, the first started of those on it (a shared GPU is set for that one)."""
    first: dict[tuple[str, int], RunningJob] = {}
    for job in running:
        for slot in job.slots:
            first.setdefault((slot.node, slot.gpu_index), job)
    return first


def _changes(now_s: float, held: dict[tuple[str, int], tuple[float, int | None]],
             seen: dict[tuple[str, int], tuple[float, int | None]], out: list[Setting]) -> None:
    """Append the busy GPUs' settings that changed since `seen` (which follows)."""
    for (node, index), setting in sorted(held.items()):
        if seen.get((node, index)) != setting:
            out.append((now_s, node, index, *setting))
    seen.clear()
    seen.update(held)


@dataclass
class Run:
    """What one body did: its decision instants, job actions, sleeps and wakes, busy GPUs' settings, finishes."""

    instants: list[float] = field(default_factory=list)
    steps: list[Step] = field(default_factory=list)
    power: list[Power] = field(default_factory=list)
    settings: list[Setting] = field(default_factory=list)
    finish: dict[str, float] = field(default_factory=dict)


def replayed(cluster: Cluster, policy: Policy, jobs: list[Job]) -> Run:
    """The simulator's decision instants (its cycles and its sleep lever's), the job actions its job runner
    carried out, its sleeps and wakes, its busy GPUs' settings (what the capping lever gives each GPU's
    first job, the setting its pace follows) and each job's finish."""
    sim = Simulation(cluster, policy, jobs)
    run = Run()
    seen: dict[tuple[str, int], tuple[float, int | None]] = {}
    cycle, ask, start, signal, kill = sim._cycle, sim.sleep.ask, sim.work.start, sim.work.signal, sim.work.kill
    set_power = sim.fleet.set_power

    decided: dict[tuple[str, str, bool], tuple[float, int | None]] = {}

    def setting(node: str, index: int, running: RunningJob) -> tuple[float, int | None]:
        sim_node = sim.fleet.nodes[node]
        key = (sim_node.type_name, running.job.job_class, running.job.job_id in sim.pacer.lifted)
        if key not in decided:  # GPUs of a type are alike in a replay
            gpu = sim.pacer.observation(sim_node, index, running.job.job_class)
            decision = gpu_setting(gpu, policy.capping, key[2])
            limit_w = decision.limit_w if decision.limit_w is not None else gpu.constraints.default_w
            decided[key] = (limit_w, decision.locked_clock_mhz)
        return decided[key]

    def settings() -> None:
        held = {slot: setting(*slot, running) for slot, running in _first_jobs(sim.work.running.values()).items()}
        _changes(sim.clock.now_s, held, seen, run.settings)

    def on_cycle() -> None:
        run.instants.append(sim.clock.now_s)
        cycle()
        settings()

    def on_ask(asked: list[WakeNode], waiting: Any) -> None:
        run.instants.append(sim.clock.now_s)
        ask(asked, waiting)
        settings()

    def on_start(action: PlaceJob, lifted: bool) -> None:
        run.steps.append((sim.clock.now_s, "place", action.job_id, _slots(action)))
        start(action, lifted)

    def on_signal(action: PreemptJob) -> None:
        run.steps.append((sim.clock.now_s, "preempt", action.job_id, ()))
        signal(action)

    def on_kill(action: KillJob) -> None:
        run.steps.append((sim.clock.now_s, "kill", action.job_id, ()))
        kill(action)

    def on_power(node: SimNode, power: PowerState, now_s: float) -> None:
        if power in (PowerState.SUSPENDING, PowerState.WAKING):
            run.power.append((now_s, "sleep" if power is PowerState.SUSPENDING else "wake", node.name))
        set_power(node, power, now_s)

    sim._cycle = on_cycle  # type: ignore[method-assign]
    sim.sleep.ask = on_ask  # type: ignore[method-assign]
    sim.fleet.set_power = on_power  # type: ignore[method-assign]
    sim.work.start, sim.work.signal, sim.work.kill = on_start, on_signal, on_kill  # type: ignore[method-assign]
    result = sim.run()
    assert result.invariant_violations == 0
    run.finish = dict(sim.work.finish_s)
    return run


def driven(tmp_path: Path, cluster: Cluster, policy: Policy, jobs: list[Job],
           instants: list[float]) -> tuple[Run, FakeCluster, Daemon]:
    """The daemon on the fake cluster, ticked at `instants`: the job actions, sleeps and wakes it carried out,
    the settings its busy GPUs hold after each tick, and each job's finish."""
    origin_s = jobs[0].submit_time_s
    clock = ManualClock(origin_s)
    state = tmp_path / "state"
    state.mkdir()
    body = FakeCluster(cluster, jobs, state, start_s=origin_s)
    audit = AuditLog(state / "audit.jsonl")
    daemon = Daemon(body, policy, DaemonStore(state), audit, Alerts(audit), clock=clock)
    run = Run(instants=sorted(set(instants)))
    seen: dict[tuple[str, int], tuple[float, int | None]] = {}
    act = body.act

    def on_act(action: TickAction, now_s: float) -> str:
        done = act(action, now_s)
        if isinstance(action, SleepNode):
            run.power.append((now_s, "sleep", action.node))
        elif isinstance(action, WakeNode) and done.endswith(": waking"):
            run.power.append((now_s, "wake", action.node))
        return done

    body.act = on_act  # type: ignore[method-assign]
    for instant in run.instants:
        clock.now_s = instant
        assert daemon.tick().ok
        assert daemon.last_result is not None
        for action in daemon.last_result.scheduled.cycle.actions:
            if isinstance(action, PlaceJob):
                run.steps.append((instant, "place", action.job_id, _slots(action)))
            elif isinstance(action, PreemptJob):
                run.steps.append((instant, "preempt", action.job_id, ()))
            elif isinstance(action, KillJob):
                run.steps.append((instant, "kill", action.job_id, ()))
        held = {}
        for (node, index) in _first_jobs(body.running.values()):
            gpu = body.fakes[node].gpus[index]
            held[(node, index)] = (gpu.limit_w, gpu.locked_clock_mhz)
        _changes(instant, held, seen, run.settings)
    clock.now_s = max(instants[-1], *[j.submit_time_s + j.duration_s for j in jobs]) + 365 * 86_400.0
    body.observe(clock.now_s, 0, 0)  # the last jobs run to their end
    run.finish = dict(body.finished)
    return run, body, daemon


def first_difference(a: list[Any], b: list[Any]) -> str:
    for index, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return f"step {index}: replay {x} / daemon {y}"
    return f"lengths {len(a)} / {len(b)}"


def assert_alike(replay: Run, live: Run) -> None:
    """The same actions in the same order at the same instants, lever by lever, and the same finishes."""
    assert live.steps == replay.steps, first_difference(replay.steps, live.steps)
    assert live.power == replay.power, first_difference(replay.power, live.power)
    assert live.settings == replay.settings, first_difference(replay.settings, live.settings)
    assert live.finish == replay.finish


@pytest.mark.parametrize("policy_name", ["always-on", "default"])
def test_differential_the_lab_week_through_simulate_and_the_daemon_gives_the_same_actions(
        tmp_path: Path, policy_name: str) -> None:
    cluster = load_cluster(REPO / "examples" / "lab-a100.cluster.yaml")
    policy = load_policy(policy_name)
    jobs = read_trace(REPO / "examples" / "lab-a100.week.trace.csv").jobs

    replay = replayed(cluster, policy, jobs)
    live, body, daemon = driven(tmp_path, cluster, policy, jobs, replay.instants)

    assert_alike(replay, live)
    # Not a vacuous agreement: every job ran, fractional jobs shared GPUs, preemptions happened.
    assert len(replay.finish) == len(jobs)
    assert any(units < 1000 for _, kind, _, slots in replay.steps if kind == "place" for _, _, units in slots)
    assert {"place", "preempt", "kill"} <= {kind for _, kind, _, _ in replay.steps}
    assert not [r for r in daemon.audit.records() if r.get("alert")]  # every action carried out
    if policy_name == "always-on":
        assert not replay.power  # sleep off
        for node in cluster.nodes:  # capping off: every GPU at its default limit
            node_type = cluster.node_types[node.type_name]
            assert {body.gpu_limit_w(node.name, i) for i in range(node_type.gpus)} == {node_type.gpu_max_w}
    else:  # the levers at work: nodes slept and woke, GPUs were capped and their clocks locked
        assert {"sleep", "wake"} <= {kind for _, kind, _ in replay.power}
        maxima = {n.name: cluster.node_types[n.type_name].gpu_max_w for n in cluster.nodes}
        assert any(limit_w < maxima[node] for _, node, _, limit_w, _ in replay.settings)
        assert any(clock is not None for *_, clock in replay.settings)


STRESS_DAY = 1
"""The day of stress scenario d replayed (the Philly trace's busiest days on 320 GPUs): 2 October 2017, 1,353
jobs, a queue (p95 wait 40 minutes) and preemptions."""


@pytest.mark.parametrize("policy_name", ["always-on", "default"])
def test_differential_a_slice_of_a_stress_day_through_simulate_and_the_daemon_gives_the_same_actions(
        tmp_path: Path, policy_name: str) -> None:
    import sys

    sys.path.insert(0, str(REPO / "tests" / "benchmarks"))
    from test_bench_stress import scaled_philly_cluster, window_jobs

    cluster = scaled_philly_cluster(320)
    policy = load_policy(policy_name)
    window = window_jobs()
    start_s = window[0].submit_time_s + STRESS_DAY * 86_400.0
    jobs = [j for j in window if start_s <= j.submit_time_s < start_s + 86_400.0]

    replay = replayed(cluster, policy, jobs)
    live, _, daemon = driven(tmp_path, cluster, policy, jobs, replay.instants)

    assert_alike(replay, live)
    assert len(replay.finish) == len(jobs) and len(jobs) > 100
    submitted = {j.job_id: j.submit_time_s for j in jobs}
    waited = sum(1 for time_s, kind, job, _ in replay.steps if kind == "place" and time_s > submitted[job])
    assert waited > 100 and {"place", "preempt", "kill"} <= {kind for _, kind, _, _ in replay.steps}  # a queue
    if policy_name == "default":  # the levers at work through the queue: sleeps, wakes, caps set and lifted
        assert {"sleep", "wake"} <= {kind for _, kind, _ in replay.power}
        maxima = {n.name: cluster.node_types[n.type_name].gpu_max_w for n in cluster.nodes}
        limits = [limit_w < maxima[node] for _, node, _, limit_w, _ in replay.settings]
        assert any(limits) and not all(limits)
    assert not [r for r in daemon.audit.records() if r.get("alert")]
