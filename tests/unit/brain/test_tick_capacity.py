"""Lever 3 in the tick (greengpu/brain/capacity_choice.py): spot, on-demand or wait for each job waiting for
capacity."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from greengpu.brain.capacity_choice import ChooseCapacity, plan_capacity
from greengpu.brain.control_tick import control_tick, schedule
from greengpu.config.inventory import load_cluster_text
from greengpu.config.policy import load_policy
from greengpu.model import (
    Cluster,
    ClusterSnapshot,
    GpuSlot,
    Job,
    NodeState,
    PendingJob,
    PowerState,
    RunningJob,
)
from greengpu.policy import Policy
from greengpu.sched.waits import WaitReason
from greengpu.sleep.sleep_wake import SleepObservation
from greengpu.spot.decide import SpotJobFacts

HOUR = 3600.0
NOW_S = 1000.0

CLUSTER_TEXT = """\
site: {{pue: 1.2, price_per_kwh: 0.1}}
node_types:
  a8: {{gpus: 8, gpu_model: A100, gpu_idle_w: 50, gpu_max_w: 400, gpu_min_limit_w: 100, host_idle_w: 400,
        host_sleep_w: 8, boot_s: 300}}
  c8: {{gpus: 8, gpu_model: A100, gpu_idle_w: 50, gpu_max_w: 400, gpu_min_limit_w: 100, host_idle_w: 400,
        host_sleep_w: 8, boot_s: 120}}
nodes:
  - {{name: n1, type: a8}}
tenants:
  t: {{quota_gpus: 32}}
{pools}"""
POOLS = """pools:
  sp: {type: c8, spot: true, price_per_hour: 5.47, interruptions_per_hour: 0.1, max_nodes: 4}
  od: {type: c8, price_per_hour: 24.48, max_nodes: 4}
"""


def cluster(pools: str = POOLS) -> Cluster:
    return load_cluster_text(CLUSTER_TEXT.format(pools=pools), "burst.yaml")


def policy() -> Policy:
    base = load_policy("always-on")
    return replace(base, spot=replace(base.spot, enabled=True, require_checkpointing=False))


def snapshot(jobs: list[Job], blocker_left_s: float = 200 * HOUR, the_cluster: Cluster | None = None,
             ) -> ClusterSnapshot:
    """The only on-premises node busy with a job that ends in `blocker_left_s`; `jobs` queued behind it."""
    blocker = Job("blocker", "t", 8, 300 * HOUR, submit_time_s=0.0, interruptible=False, priority=100)
    running = RunningJob(blocker, tuple(GpuSlot("n1", i) for i in range(8)), 0.0, NOW_S + blocker_left_s)
    return ClusterSnapshot(NOW_S, the_cluster or cluster(), (running,), tuple(PendingJob(j) for j in jobs))


def training(job_id: str = "j1", **extra: Any) -> Job:
    fields: dict[str, Any] = {"submit_time_s": NOW_S, "interruptible": True, "checkpoint_interval_s": 1800.0,
                              "job_class": "training", **extra}
    return Job(job_id, "t", 8, 4 * HOUR, **fields)


def decide(snap: ClusterSnapshot, facts: dict[str, SpotJobFacts] | None = None) -> dict[str, ChooseCapacity]:
    cycle = schedule(snap, policy()).cycle
    return {c.job_id: c for c in plan_capacity(snap, cycle, policy().spot, facts)}


def test_a_waiting_checkpointing_training_job_gets_spot() -> None:
    chosen = decide(snapshot([training()]))
    assert chosen["j1"].kind == "spot"
    assert chosen["j1"].pool == "sp"


def test_a_job_with_a_close_deadline_gets_on_demand() -> None:
    # 4 h of work due in 4 h 5 min: no slack to survive an interruption and a 600 s restart on spot.
    close = training("close", deadline_s=4 * HOUR + 300.0)
    far = training("far", deadline_s=12 * HOUR)
    chosen = decide(snapshot([close, far]))
    assert chosen["close"].kind == "on-demand"
    assert chosen["close"].pool == "od"
    assert chosen["far"].kind == "spot"


def test_a_job_the_on_premises_cluster_fits_soon_waits() -> None:
    # The blocker ends in 60 s, sooner than a cloud node's 120 s start-up: waiting delays nothing.
    chosen = decide(snapshot([training()], blocker_left_s=60.0))
    assert chosen["j1"].kind == "wait"
    assert chosen["j1"].pool is None
    # ... while the same job rents when the node stays busy for hours.
    assert decide(snapshot([training()]))["j1"].kind == "spot"


def test_inference_never_goes_to_spot() -> None:
    chosen = decide(snapshot([training("inf", job_class="inference", interruptible=False)]))
    assert chosen["inf"].kind == "on-demand"


def test_no_pool_of_a_kind_the_job_may_use_means_wait() -> None:
    spot_only = cluster("pools:\n  sp: {type: c8, spot: true, price_per_hour: 5.47, max_nodes: 4}\n")
    chosen = decide(snapshot([training("inf", job_class="inference", interruptible=False)], the_cluster=spot_only))
    assert chosen["inf"].kind == "wait"


def test_without_pools_the_lever_is_silent() -> None:
    assert decide(snapshot([training()], the_cluster=cluster(""))) == {}


def test_a_body_s_facts_choose_which_jobs_are_asked_and_what_they_are() -> None:
    snap = snapshot([training("a"), training("b")])
    never = SpotJobFacts("training", False, None, 60.0, 4 * HOUR, None, 8)
    chosen = decide(snap, {"b": never})
    assert set(chosen) == {"b"}  # `a` was not vouched for: not steered
    assert chosen["b"].kind == "on-demand"  # the body says it cannot be interrupted


def test_control_tick_returns_the_capacity_actions_with_the_others() -> None:
    snap = snapshot([training()])
    result = control_tick(snap, policy(), (), SleepObservation(now_s=NOW_S, busy_gpus=8.0))
    assert [c.kind for c in result.capacity] == ["spot"]
    assert result.capacity[0] in result.actions
    waits = snapshot([training()], blocker_left_s=60.0)
    result = control_tick(waits, policy(), (), SleepObservation(now_s=NOW_S, busy_gpus=8.0))
    assert [c.kind for c in result.capacity] == ["wait"]
    assert not any(isinstance(a, ChooseCapacity) for a in result.actions)  # a wait is no action


def test_a_job_waiting_for_a_sleeping_node_waits_when_the_boot_is_cheaper_than_the_cloud() -> None:
    asleep = {"n1": NodeState(power=PowerState.ASLEEP, since_s=0.0)}
    snap = ClusterSnapshot(NOW_S, cluster(), (), (PendingJob(training()),), asleep)
    cycle = schedule(snap, policy()).cycle
    assert cycle.waits["j1"].reason is WaitReason.WAKE
    chosen = plan_capacity(snap, cycle, policy().spot)
    # The node boots in 300 s, a spot node in 120 s: 3 minutes of 8 GPUs at on-demand value, against a boot of
    # cents; the rule waits for the node it wakes.
    assert [(c.job_id, c.kind) for c in chosen] == [("j1", "wait")]
    assert chosen[0].reason.startswith("waking an on-premises node costs less")
