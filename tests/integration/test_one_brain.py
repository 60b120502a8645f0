"""One brain, several bodies: the same sequence of cluster states, given to the simulator's observation
builders and to the live bodies' (the node agent on NVML; the Kubernetes sleep commands on a real HTTP
API server and a real SQLite state store), gives identical actions, for capping and for sleep and wake.

The capping half runs the real agent over the fake NVML (pynvml's seam), fed by `TickSource` (the
snapshot and the core's own "work waits" verdict); the simulator's half builds each GPU's observation
with the replay's own builder (`Pacer.observation`). The sleep half drives the replay's `SleepBody`
on simulated nodes and `KubeSleep` on the fake API server with the same states; both then carry out
what they chose, so the next step starts from the same cluster again.
"""

from __future__ import annotations

import socket
from dataclasses import replace
from pathlib import Path

from fake_kube import FakeKube, node, pod
from inventories import wol_node, write_inventory
from manual_clock import ManualClock

from greengpu.backends.fake_nvml import FakeNvml, make_gpus
from greengpu.backends.kubernetes import KubeApi, make_api_client
from greengpu.backends.nvml import NvmlBackend
from greengpu.backends.wol import Waker
from greengpu.brain.control_tick import schedule
from greengpu.capping.gpu_power import host_share_w, plan_power
from greengpu.config.inventory import load_cluster
from greengpu.config.policy import load_policy
from greengpu.control.agent.journal import Journal
from greengpu.control.agent.node_agent import Agent
from greengpu.control.agent.tick_source import TickSource
from greengpu.control.hooks.kube_sleep import KubeSleep
from greengpu.control.hooks.sleep_control import SleepControl
from greengpu.control.hooks.state_store import StateStore
from greengpu.model import (
    ClusterSnapshot,
    GpuSlot,
    Job,
    LockClocks,
    NodeState,
    PendingJob,
    PowerState,
    RunningJob,
    SetPowerLimit,
    WakeNode,
)
from greengpu.sim.clock import EventClock
from greengpu.sim.nodes import NodeFleet
from greengpu.sim.pace import Pacer
from greengpu.sim.sleep_body import SleepBody
from greengpu.sleep.sleep_wake import plan_sleep, plan_wakes
from greengpu.sleep.work_waiting import with_slack_verdict

# The fake NVML's A100 preset: limits 100-400 W, default 400 W, SM clock up to 1410 MHz.
A100X4 = ("{gpus: 4, gpu_model: A100, gpu_idle_w: 52, gpu_max_w: 400, gpu_min_limit_w: 100, host_idle_w: 300, "
          "host_sleep_w: 8, boot_s: 180, gpu_max_clock_mhz: 1410}")
T0 = 1_700_000_000.0


def running(job_id: str, job_class: str, node_name: str, gpus: list[int], start_s: float = T0) -> RunningJob:
    job = Job(job_id=job_id, tenant="t", gpus=len(gpus), duration_s=36_000, submit_time_s=start_s,
              job_class=job_class)
    return RunningJob(job=job, slots=tuple(GpuSlot(node_name, i) for i in gpus), start_time_s=start_s,
                      expected_end_s=start_s + 36_000)


def test_the_agent_and_the_simulator_cap_the_same_snapshots_alike(tmp_path: Path) -> None:
    inventory = write_inventory(tmp_path / "cluster.yaml", {"a100x4": A100X4},
                                ['{name: "n[1-2]", type: a100x4}'])
    cluster = load_cluster(inventory)
    policy = load_policy("default")
    assert policy.capping.relax_when_queued and policy.capping.idle_to_min_limit
    on_n2 = running("half", "training", "n2", [0, 1])
    big_wait = PendingJob(Job(job_id="wide", tenant="t", gpus=8, duration_s=600, submit_time_s=T0 + 60))
    snapshots = [
        # training and inference on n1, one GPU idle; nothing waits and 3 of 8 GPUs are free, more than the
        # warm reserve of a third of the 5 in use: caps and locked clocks
        ClusterSnapshot(T0, cluster, (running("train", "training", "n1", [0, 1]),
                                      running("serve", "inference", "n1", [2]), on_n2)),
        # an 8-GPU job waits for capacity: every cap lifts (relax_when_queued), the idle GPU stays at its minimum
        ClusterSnapshot(T0 + 60, cluster, (running("train", "training", "n1", [0, 1]),
                                           running("serve", "inference", "n1", [2]), on_n2), (big_wait,)),
        # the wait is over, a batch job took the idle GPU, the inference job left
        ClusterSnapshot(T0 + 120, cluster, (running("train", "training", "n1", [0, 1]),
                                            running("etl", "batch", "n1", [3]), on_n2)),
        # nothing waits, but 7 of 8 GPUs are in use: 1 free, 2 asked by the reserve: no slack, caps lift
        ClusterSnapshot(T0 + 180, cluster, (running("train", "training", "n1", [0, 1]),
                                            running("etl", "batch", "n1", [3]),
                                            running("full", "training", "n2", [0, 1, 2, 3]))),
    ]
    current = {"snapshot": snapshots[0]}
    clock = ManualClock(T0)
    fake = FakeNvml(make_gpus("4xA100"), clock=clock)
    agent = Agent(NvmlBackend(lib=fake, clock=clock), policy.capping,
                  TickSource("n1", lambda: current["snapshot"], policy), Journal(tmp_path / "journal.jsonl"),
                  clock=clock, node="n1", host_share_w=host_share_w(cluster.node_types["a100x4"]))
    agent.start()
    fleet = NodeFleet(cluster, None)
    pacer = Pacer(cluster, policy.capping)
    seen_limits: set[float] = set()
    for snapshot in snapshots:
        current["snapshot"] = snapshot
        clock.now_s = snapshot.time_s
        classes = {s.gpu_index: r.job.job_class for r in snapshot.running for s in r.slots if s.node == "n1"}
        for index in range(4):  # busy GPUs draw enough to reach a cap, so every cap binds as in a replay
            fake.set_load(index, 0.95 if index in classes else 0.0, [4000 + index] if index in classes else [])

        live = agent.tick().actions
        busy = sum(r.job.gpus for r in snapshot.running)  # what the replay counts as allocated
        waiting = with_slack_verdict(schedule(snapshot, policy).waiting, cluster.total_gpus, busy, policy.sleep)
        replayed = plan_power([pacer.observation(fleet.nodes["n1"], i, classes.get(i)) for i in range(4)],
                              policy.capping, waiting)

        assert live == list(replayed)
        limits = {a.gpu_index: a.limit_w for a in live if isinstance(a, SetPowerLimit)}
        clocks = {a.gpu_index: a.min_mhz for a in live if isinstance(a, LockClocks)}
        for index in range(4):  # and the agent really put the GPUs there
            assert fake.gpus[index].limit_w == limits[index]
            assert fake.gpus[index].locked_clock_mhz == clocks[index]
        seen_limits.update(limits.values())
        if waiting.waiting:
            assert limits[0] == 400.0 and clocks[2] is None  # lifted while the 8-GPU job waits
        if snapshot.time_s == T0 + 180:
            assert waiting.no_slack and not waiting.waiting and limits[0] == 400.0  # lifted: no slack left
    # Not a vacuous agreement: the sequence exercised a cap, the default limit and the idle minimum.
    assert {100.0, 400.0} <= seen_limits and any(100.0 < w < 400.0 for w in seen_limits)
    agent.stop()


def test_the_kubernetes_body_and_the_simulator_sleep_and_wake_the_same_nodes(
        tmp_path: Path, udp: socket.socket) -> None:
    port = udp.getsockname()[1]
    inventory = write_inventory(tmp_path / "cluster.yaml", {"a100x4": A100X4},
                                [wol_node("gpu[1-4]", "a100x4", "02:00:5e:40:00:01", port)])
    cluster = load_cluster(inventory)
    base = load_policy("default")
    policy = replace(base, sleep=replace(base.sleep, idle_timeout_s=900.0, warm_reserve_gpus=4,
                                         warm_reserve_busy_fraction=0.0, use_forecast=False, min_awake_s=0.0,
                                         min_asleep_s=600.0))
    clock = ManualClock(T0)
    with FakeKube() as kube:
        kube.nodes = {name: node(name) for name in ("gpu1", "gpu2", "gpu3", "gpu4")}
        control = SleepControl(StateStore(tmp_path / "state.db"), Waker(cluster), policy.sleep, clock=clock)
        sleeper = KubeSleep(KubeApi(make_api_client(host=kube.url)), control, cluster, policy,
                            suspend=lambda name: None)
        events = EventClock()
        fleet = NodeFleet(cluster, None)
        body = SleepBody(policy, fleet, events, (), lambda: (busy_gpus(), busy_gpus()))
        fleet.start(T0 - 86_400)
        for sim_node in fleet.nodes.values():
            sim_node.power_since_s = 0.0  # as the live body sees a node it never put to sleep
            sim_node.idle_since_s = T0  # and idle from the first time it looks

        def busy_gpus() -> float:
            return float(sum(p["gpus"] for p in pods_running.values()))

        pods_running: dict[str, dict[str, int]] = {}

        def set_work(now_s: float, work: dict[str, int]) -> None:
            """`work`: GPUs busy per node; both bodies see it (pods on the API server, jobs on simulated nodes)."""
            pods_running.clear()
            pods_running.update({name: {"gpus": gpus} for name, gpus in work.items()})
            kube.pods = [pod(f"job-{name}", f"u-{name}", name, gpus=gpus) for name, gpus in work.items()]
            for name, sim_node in fleet.nodes.items():
                busy_now = name in work
                if busy_now and sim_node.jobs == 0:
                    sim_node.jobs, sim_node.idle_since_s = 1, None
                elif not busy_now and sim_node.jobs:
                    sim_node.jobs, sim_node.idle_since_s = 0, now_s

        def step(now_s: float, pending: list[int]) -> tuple[list[str], list[str]]:
            clock.now_s = events.now_s = now_s
            kube.pods += [pod(f"wait-{i}", f"w-{i}", "", gpus=gpus, phase="Pending") for i, gpus in enumerate(pending)]
            # The replay's side: its own snapshot (the awake busy nodes full), the tick, its observations.
            states = {n: NodeState(power=s.power, since_s=s.power_since_s) for n, s in fleet.nodes.items()
                      if s.power is not PowerState.AWAKE}
            snap_running = tuple(running(f"job-{n}", "training", n, list(range(4))) for n in pods_running)
            snap_pending = tuple(PendingJob(Job(job_id=f"w-{i}", tenant="default", gpus=g, duration_s=3600,
                                                submit_time_s=now_s, gpus_per_node=g)) for i, g in enumerate(pending))
            scheduled = schedule(ClusterSnapshot(now_s, cluster, snap_running, snap_pending, states), policy)
            asked = [a for a in scheduled.cycle.actions if isinstance(a, WakeNode)]
            sim_sleeps = [a.node for a in plan_sleep(body.observe_for_sleep(), policy.sleep, scheduled.waiting)]
            sim_wakes = [a.node for a in plan_wakes(body.observe_for_wakes(), policy.sleep, asked)]
            # The live side, which carries its choices out itself.
            live_wakes = sleeper.wake_for_pending(now_s)
            live_sleeps = [o.node for o in sleeper.sleep_idle(now_s) if o.slept]
            assert sorted(live_sleeps) == sorted(sim_sleeps), f"at +{now_s - T0:.0f} s they chose different sleeps"
            for name in sim_sleeps:  # carry the replay's choices out too (suspend and boot take no time here)
                fleet.set_power(fleet.nodes[name], PowerState.ASLEEP, now_s)
            for name in sim_wakes:
                fleet.set_power(fleet.nodes[name], PowerState.AWAKE, now_s)
                fleet.nodes[name].idle_since_s = now_s
            for name in live_wakes:  # the live node comes up: Ready, verified, uncordoned
                control.verify([name])
            kube.pods = [p for p in kube.pods if p["status"]["phase"] != "Pending"]
            return sim_sleeps, sim_wakes if sorted(sim_wakes) == sorted(live_wakes) else ["differs"]

        history = []
        set_work(T0, {"gpu1": 4})
        steps = [(T0, {"gpu1": 4}, []),                     # everyone else just went idle
                 (T0 + 600, {"gpu1": 4}, []),               # not yet past the idle timeout
                 (T0 + 1000, {"gpu1": 4}, []),              # gpu2-4 idle 1000 s: two sleep, the reserve keeps one
                 (T0 + 1100, {"gpu1": 4, "gpu4": 4}, [4]),  # a pod waits: nothing sleeps, its node wakes at once
                 (T0 + 1200, {"gpu1": 4, "gpu4": 4, "gpu2": 4}, []),  # it runs there; the reserve lacks a
                                                                      # node, but gpu3 slept only 200 s
                 (T0 + 1700, {"gpu1": 4, "gpu4": 4, "gpu2": 4}, []),  # min_asleep passed: the reserve wakes it
                 (T0 + 1800, {"gpu1": 4}, [])]
        for now_s, work, pending in steps:
            set_work(now_s, work)
            sim_sleeps, sim_wakes = step(now_s, pending)
            live = kube_state(control)
            history.append((sim_sleeps, sim_wakes))
            assert sim_wakes != ["differs"], f"at +{now_s - T0:.0f} s the bodies woke different nodes"
            assert sorted(n for n, s in fleet.nodes.items() if s.power is PowerState.ASLEEP) == live, \
                f"at +{now_s - T0:.0f} s the bodies disagree on which nodes sleep"
        slept = [n for sleeps, _ in history for n in sleeps]
        woken = [n for _, wakes in history for n in wakes]
        assert len(slept) == 2 and len(woken) >= 1  # both levers acted, so the agreement is not vacuous
        assert history[3][0] == []  # nothing went to sleep while the pod waited


def kube_state(control: SleepControl) -> list[str]:
    """The nodes the live body holds asleep."""
    return sorted(r.node for r in control.store.records() if r.state == "asleep")
