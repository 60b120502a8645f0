"""A reclaim is worth its cost: a tenant within its quota stops borrowed work only when the work lost (GPU-seconds
since the victims' last checkpoints, whole gangs) is less than its GPUs times how much sooner it starts than when
the GPUs it needs free up on their own (after the jobs waiting since before it); otherwise it waits for them, until
its GPUs have been idle for as much GPU-time as the victims had unsaved when it arrived. Priority preemption is not
weighed."""

from __future__ import annotations

import math
from dataclasses import replace

from schedkit import Driver, job, make_cluster, node_type

from greengpu.model import GPU_UNITS, ClusterSnapshot, GpuSlot, PendingJob, PreemptJob, RunningJob, Tenant
from greengpu.policy import PreemptionPolicy, SchedulerPolicy
from greengpu.sched.core import CycleResult, schedule_cycle
from greengpu.sched.preemption import free_after_s
from greengpu.sched.waits import WaitReason

NOW_S = 1_000_000.0
HOUR_S = 3600.0
# Three 4-GPU nodes. "owner" has 4 GPUs of quota and uses none; "borrower" has none and borrows; "keeper" runs
# within its own quota (its jobs are never reclaimed, only their ends free GPUs).
CLUSTER = make_cluster([(3, node_type(4), "r")],
                       [Tenant("owner", quota_gpus=4), Tenant("borrower"), Tenant("keeper", quota_gpus=4)])
POLICY = SchedulerPolicy(preemption=PreemptionPolicy(min_runtime_s=0.0, grace_s=120.0))


def running(job_id: str, tenant: str, slots: list[tuple[str, int]], age_s: float, left_s: float,
            priority: int = 0) -> RunningJob:
    return RunningJob(job(job_id, gpus=len(slots), tenant=tenant, priority=priority),
                      tuple(GpuSlot(node, gpu) for node, gpu in slots), NOW_S - age_s, NOW_S + left_s)


def gang_on_two_nodes(age_s: float) -> RunningJob:
    """The borrower's 8-GPU gang filling n0000 and n0001."""
    return running("gang", "borrower", [(n, g) for n in ("n0000", "n0001") for g in range(4)], age_s, 40 * HOUR_S)


def keeper_on_n0002(left_s: float) -> RunningJob:
    """The keeper fills n0002; one of its 1-GPU jobs ends in `left_s`."""
    rest = tuple(running(f"keep{g}", "keeper", [("n0002", g)], HOUR_S, 40 * HOUR_S) for g in range(1, 4))
    return running("keep0", "keeper", [("n0002", 0)], HOUR_S, left_s), *rest


def cycle(runs: tuple[RunningJob, ...], claimant_gpus: int = 1, waited_s: float = 0.0,
          priority: int = 0, policy: SchedulerPolicy = POLICY, ahead: tuple[PendingJob, ...] = (),
          **claimant_fields: object) -> CycleResult:
    claimant = job("mine", gpus=claimant_gpus, tenant="owner", submit_time_s=NOW_S - waited_s, priority=priority,
                   **claimant_fields)
    snap = ClusterSnapshot(time_s=NOW_S, cluster=CLUSTER, running=runs, pending=(*ahead, PendingJob(claimant)))
    return schedule_cycle(snap, policy)


def stopped(result: CycleResult) -> list[str]:
    return sorted(a.job_id for a in result.actions if isinstance(a, PreemptJob))


def test_a_one_gpu_claimant_waits_for_a_gpu_that_frees_soon_rather_than_stop_a_gang_hours_old() -> None:
    # The gang has run 3 hours without a checkpoint (24 GPU-hours lost); a keeper GPU frees in 20 minutes.
    result = cycle((gang_on_two_nodes(3 * HOUR_S), *keeper_on_n0002(1200.0)))
    assert stopped(result) == []
    # It waits with the keeper's node reserved, so smaller jobs backfill there only if they end before it.
    assert result.waits["mine"].reason is WaitReason.RESERVATION
    assert result.waits["mine"].nodes == {"n0002"}


def test_the_claimant_reclaims_when_waiting_costs_it_more_than_the_victims_lose() -> None:
    # The same gang but only 10 minutes old (1.3 GPU-hours lost); the first free GPU is 10 hours away.
    assert stopped(cycle((gang_on_two_nodes(600.0), *keeper_on_n0002(10 * HOUR_S)))) == ["gang"]


def test_the_gang_is_charged_whole_not_per_node() -> None:
    # Half an hour old: 4 GPU-hours lost over the whole gang, 2 on the node the claimant would use. A 4-GPU
    # claimant whose first free node is 40 minutes away gains 4 x (40 - 2) min = 2.5 GPU-hours: less than 4.
    gang = gang_on_two_nodes(1800.0)
    keeper = tuple(running(f"keep{g}", "keeper", [("n0002", g)], HOUR_S, 2400.0) for g in range(4))
    assert stopped(cycle((gang, *keeper), claimant_gpus=4)) == []
    # Ninety minutes away it gains 4 x 88 min = 5.9 GPU-hours: more than the 4 lost.
    keeper = tuple(running(f"keep{g}", "keeper", [("n0002", g)], HOUR_S, 5400.0) for g in range(4))
    assert stopped(cycle((gang, *keeper), claimant_gpus=4)) == ["gang"]


def test_nobody_is_stopped_for_gpus_that_free_up_within_the_grace() -> None:
    # The borrower's young 4-GPU job on n0000 ends in a minute, before its checkpoint grace would run out.
    victim = running("ending", "borrower", [("n0000", g) for g in range(4)], 600.0, 60.0)
    others = tuple(running(f"b{n}{g}", "borrower", [(f"n000{n}", g)], 600.0, 40 * HOUR_S)
                   for n in (1, 2) for g in range(4))
    assert stopped(cycle((victim, *others), claimant_gpus=4)) == []


def test_gpus_that_free_up_serve_the_jobs_waiting_since_before_the_claimant_first() -> None:
    # A keeper job has waited two hours: the keeper GPU that frees in 20 minutes is its, and the next GPUs free
    # in 40 hours, so waiting would cost the claimant more than the gang's 24 GPU-hours: it reclaims.
    older = PendingJob(job("older", gpus=1, tenant="keeper", submit_time_s=NOW_S - 2 * HOUR_S))
    runs = (gang_on_two_nodes(3 * HOUR_S), *keeper_on_n0002(1200.0))
    assert stopped(cycle(runs, ahead=(older,))) == ["gang"]


def test_a_claimant_waits_at_most_until_its_idle_gpus_missed_what_the_victims_had_unsaved_when_it_came() -> None:
    # The gang is 3 hours old. A one-GPU claimant that came w hours ago found 8 x (3 - w) GPU-hours unsaved;
    # it reclaims once 1 x w reaches that: after 8/3 hours (2 h 40 min), whatever reclaiming costs now.
    runs = (gang_on_two_nodes(3 * HOUR_S), *keeper_on_n0002(1200.0))
    assert stopped(cycle(runs, waited_s=2.6 * HOUR_S)) == []
    assert stopped(cycle(runs, waited_s=2.7 * HOUR_S)) == ["gang"]


def test_victims_that_started_after_the_claimant_came_are_taken_back_at_once() -> None:
    # The gang started after the claimant was submitted: it took GPUs the claimant's quota guaranteed.
    runs = (gang_on_two_nodes(1800.0), *keeper_on_n0002(1200.0))
    assert stopped(cycle(runs, waited_s=1900.0)) == ["gang"]
    assert stopped(cycle(runs, waited_s=0.0)) == []


def test_priority_preemption_is_not_weighed() -> None:
    # A higher-priority job takes the borrower's work whatever it costs: the site said whose work matters more.
    runs = (gang_on_two_nodes(3 * HOUR_S), *keeper_on_n0002(1200.0))
    assert stopped(cycle(runs, priority=5)) == ["gang"]


def test_interactive_inference_and_deadline_claimants_are_not_weighed() -> None:
    # Their wait is what they are judged by: they reclaim at once, as before.
    runs = (gang_on_two_nodes(3 * HOUR_S), *keeper_on_n0002(1200.0))
    assert stopped(cycle(runs, job_class="interactive")) == ["gang"]
    assert stopped(cycle(runs, job_class="inference")) == ["gang"]
    assert stopped(cycle(runs, deadline_s=NOW_S + 10 * HOUR_S)) == ["gang"]
    assert stopped(cycle(runs, job_class="batch")) == []


def test_a_victim_that_checkpointed_just_now_costs_nothing() -> None:
    gang = gang_on_two_nodes(3 * HOUR_S)
    saved = replace(gang, last_checkpoint_s=NOW_S)
    assert stopped(cycle((saved, *keeper_on_n0002(1200.0)))) == ["gang"]


def test_free_after_s_counts_whole_gpus_fractional_shares_and_skipped_jobs() -> None:
    full, half = GPU_UNITS, GPU_UNITS // 2
    ends = ((100.0, "a", ((0, full),)), (200.0, "b", ((1, half),)), (300.0, "c", ((1, half),)))
    assert free_after_s([0, 0], 1, False, ends) == 100.0
    assert free_after_s([0, 0], 2, False, ends) == 300.0
    assert free_after_s([0, 0], 2, False, ends, skip={"a"}) is None
    assert free_after_s([0, half], half, True, ends) == -math.inf
    assert free_after_s([0, 0], half, True, ends, skip={"a"}) == 200.0


def test_over_cycles_the_claimant_starts_on_the_gpu_that_freed_and_the_gang_runs_on() -> None:
    # The first scenario, cycle by cycle with the remembered books cross-checked against fresh ones: the
    # claimant waits 20 minutes, then starts on the keeper's GPU; nobody is ever preempted.
    driver = Driver(CLUSTER, POLICY)
    driver.snapshot = replace(driver.snapshot, time_s=NOW_S)
    for run in (gang_on_two_nodes(3 * HOUR_S), *keeper_on_n0002(1200.0)):
        driver.start_running(run)
    driver.submit(job("mine", gpus=1, tenant="owner", submit_time_s=NOW_S))
    for _ in range(25):
        result = driver.tick()
        assert not any(isinstance(a, PreemptJob) for a in result.actions)
    assert driver.started_at["mine"] == NOW_S + 1200.0
    assert "gang" in driver.running()
