"""Lending only where it will not be taken back at once (greengpu.sched.claims): a borrower does not start on a
node where a waiting job of a tenant within its nominal quota would fit once the borrowers that started after it
came are gone; it starts elsewhere or waits. Within-quota jobs and nodes the claimant could not reclaim at no cost
are not held back."""

from __future__ import annotations

from dataclasses import replace

from schedkit import job, make_cluster, node_type, placed

from greengpu.model import (
    ClusterSnapshot,
    GpuSlot,
    Job,
    NodeState,
    PendingJob,
    PowerState,
    PreemptJob,
    RunningJob,
    Tenant,
)
from greengpu.policy import BackfillPolicy, PreemptionPolicy, SchedulerPolicy
from greengpu.sched.core import CycleResult, schedule_cycle
from greengpu.sched.waits import WaitReason

NOW_S = 1_000_000.0
HOUR_S = 3600.0
# "owner" is guaranteed 4 GPUs and runs nothing; "borrower" has no quota; "keeper" runs within its quota of 8;
# "spare" has 2 GPUs of quota it does not use.
TENANTS = [Tenant("owner", quota_gpus=4), Tenant("borrower"), Tenant("keeper", quota_gpus=8),
           Tenant("spare", quota_gpus=2)]
POLICY = SchedulerPolicy(preemption=PreemptionPolicy(min_runtime_s=300.0, grace_s=120.0))


def cluster(nodes: int = 2):
    return make_cluster([(nodes, node_type(4), "r")], TENANTS)


def running(job_id: str, tenant: str, slots: list[tuple[str, int]], age_s: float,
            left_s: float = 40 * HOUR_S) -> RunningJob:
    return RunningJob(job(job_id, gpus=len(slots), tenant=tenant), tuple(GpuSlot(n, g) for n, g in slots),
                      NOW_S - age_s, NOW_S + left_s)


def keeper_fills(node: str, gpus: range = range(4), left_s: float = 40 * HOUR_S) -> tuple[RunningJob, ...]:
    return tuple(running(f"keep-{node}-{g}", "keeper", [(node, g)], HOUR_S, left_s) for g in gpus)


CLAIMANT = job("mine", gpus=4, tenant="owner", submit_time_s=NOW_S - 600.0)


def cycle(runs: tuple[RunningJob, ...], later: Job, nodes: int = 2, claimant: Job = CLAIMANT,
          incremental: bool = True) -> CycleResult:
    later = replace(later, submit_time_s=NOW_S - 60.0)  # it came after the claimant: behind it in the queue
    snap = ClusterSnapshot(time_s=NOW_S, cluster=cluster(nodes), running=runs,
                           pending=(PendingJob(claimant), PendingJob(later)))
    return schedule_cycle(snap, POLICY, incremental=incremental)


def young_borrower_on_n0000() -> RunningJob:
    """A borrower's 2-GPU job that started after the claimant came, too young to preempt yet."""
    return running("young", "borrower", [("n0000", 0), ("n0000", 1)], age_s=60.0)


def test_a_borrower_does_not_start_on_gpus_a_waiting_claimant_would_take_back() -> None:
    runs = (young_borrower_on_n0000(), *keeper_fills("n0001"))
    for incremental in (True, False):
        result = cycle(runs, job("next", tenant="borrower"), incremental=incremental)
        # The claimant cannot start or preempt yet (the young job has not run min_runtime_s) ...
        assert not placed(result.actions) and not any(isinstance(a, PreemptJob) for a in result.actions)
        # ... and the borrower waits rather than run on n0000 for five minutes and be stopped.
        assert result.waits["next"].reason in (WaitReason.CAPACITY, WaitReason.RESERVATION)


def test_without_the_claimant_the_borrower_starts_there() -> None:
    runs = (young_borrower_on_n0000(), *keeper_fills("n0001"))
    snap = ClusterSnapshot(time_s=NOW_S, cluster=cluster(), running=runs,
                           pending=(PendingJob(job("next", tenant="borrower")),))
    assert placed(schedule_cycle(snap, POLICY).actions)["next"].slots[0].node == "n0000"


def test_the_borrower_starts_on_a_node_the_claimant_could_not_reclaim() -> None:
    # n0002 has three free GPUs and a keeper job (within its quota: never reclaimed), so the claimant cannot fit
    # there; best fit would pick n0000 (two free), which is owed. (n0001 frees first: the claimant's reservation.)
    runs = (young_borrower_on_n0000(), *keeper_fills("n0001", left_s=20 * HOUR_S), *keeper_fills("n0002", range(1)))
    result = cycle(runs, job("next", tenant="borrower"), nodes=3)
    assert placed(result.actions)["next"].slots[0].node == "n0002"


def test_a_job_within_its_own_quota_is_not_held_back() -> None:
    runs = (young_borrower_on_n0000(), *keeper_fills("n0001"))
    result = cycle(runs, job("next", tenant="spare", gpus=2))
    assert placed(result.actions)["next"].slots[0].node == "n0000"


def test_borrowers_that_were_there_first_leave_the_node_unowed() -> None:
    # The borrower's job started before the claimant came: a reclaim of it is weighed against its work
    # (reclaim_pays: 200 GPU-hours unsaved against n0001 freeing within the hour, so the claimant waits), not
    # owed, so lending the free GPUs next to it is not held back.
    old = running("old", "borrower", [("n0000", 0), ("n0000", 1)], age_s=100 * HOUR_S)
    result = cycle((old, *keeper_fills("n0001", left_s=HOUR_S)), job("next", tenant="borrower", duration_s=HOUR_S))
    assert not any(isinstance(a, PreemptJob) for a in result.actions)
    assert placed(result.actions)["next"].slots[0].node == "n0000"


def test_a_claimant_above_its_own_quota_claims_nothing() -> None:
    # The claimant asks for more than its tenant is guaranteed: it may not reclaim, so nothing is owed to it.
    runs = (young_borrower_on_n0000(), *keeper_fills("n0001"))
    greedy = job("mine", gpus=4, tenant="spare", submit_time_s=NOW_S - 600.0)
    result = cycle(runs, job("next", tenant="borrower"), claimant=greedy)
    assert placed(result.actions)["next"].slots[0].node == "n0000"


def test_a_claimant_behind_an_older_borrower_gets_the_free_gpu() -> None:
    # The borrower's job has waited for hours (its age boost puts it first); the owner's one-GPU job came a
    # minute ago. The one free GPU goes to the owner's job, which would otherwise stop the borrower minutes later.
    runs = (*keeper_fills("n0000", range(3)), *keeper_fills("n0001"))
    older = job("next", tenant="borrower", submit_time_s=NOW_S - 10 * HOUR_S)
    claimant = job("mine", tenant="owner", submit_time_s=NOW_S - 60.0)
    for incremental in (True, False):
        snap = ClusterSnapshot(time_s=NOW_S, cluster=cluster(), running=runs,
                               pending=(PendingJob(older), PendingJob(claimant)))
        result = schedule_cycle(snap, POLICY, incremental=incremental)
        assert set(placed(result.actions)) == {"mine"}
        assert "next" in result.waits


def test_a_borrower_refused_lending_before_the_claimant_started_is_asked_again_after() -> None:
    """With every preemption attempt and reservation spent, a borrower alike to one that waited takes that wait
    without being asked, but only while nothing started: once the claimant starts, the nodes it no longer needs
    are not owed, and the next borrower starts there."""
    policy = SchedulerPolicy(preemption=PreemptionPolicy(min_runtime_s=300.0, grace_s=120.0, max_attempts_per_cycle=0),
                             backfill=BackfillPolicy(reservations=0))
    first = job("first", gpus=2, tenant="borrower", priority=2, submit_time_s=NOW_S - 900.0, duration_s=HOUR_S)
    claimant = job("mine", gpus=4, tenant="owner", priority=1, submit_time_s=NOW_S - 600.0)
    second = job("second", gpus=2, tenant="borrower", priority=0, submit_time_s=NOW_S - 60.0, duration_s=2 * HOUR_S)
    for incremental in (True, False):
        snap = ClusterSnapshot(time_s=NOW_S, cluster=cluster(), running=(),
                               pending=tuple(PendingJob(j) for j in (first, claimant, second)))
        result = schedule_cycle(snap, policy, incremental=incremental)
        starts = placed(result.actions)
        # Both free nodes would take the claimant: the first borrower, ahead of it, is not lent either.
        assert "first" not in starts and result.waits["first"].reason is WaitReason.CAPACITY
        # The claimant takes one node; nobody is owed the other, so the second borrower starts there.
        assert {s.node for s in starts["mine"].slots} != {s.node for s in starts["second"].slots}


def test_a_node_of_a_model_the_tenants_own_quota_covers_is_not_held_back_from_it() -> None:
    """Per-model quotas: a tenant guaranteed H100s is not borrowing there, so a node owed to another tenant's
    claimant is held back from its jobs only where they would borrow (A100), and jobs alike are decided alike
    whichever node best fit tries first (a training job may take warning GPUs, an inference job keeps off them)."""
    tenants = [Tenant("owner", quota_gpus=8), Tenant("borrower", quota_gpus_by_model={"H100": 4.0}),
               Tenant("keeper", quota_gpus=8)]
    cl = make_cluster([(1, node_type(4, "A100"), "d"), (1, node_type(4, "H100"), "d"), (1, node_type(4, "A100"), "d")],
                      tenants)
    runs = (RunningJob(job("keep", gpus=1, tenant="keeper"), (GpuSlot("n0000", 0),), NOW_S - HOUR_S,
                       NOW_S + 40 * HOUR_S),)
    first = job("a", gpus=1, tenant="borrower", priority=5, submit_time_s=NOW_S - 900, duration_s=HOUR_S)
    second = job("b", gpus=1, tenant="borrower", priority=4, submit_time_s=NOW_S - 800, duration_s=2 * HOUR_S,
                 job_class="inference")
    claimant = job("mine", gpus=3, tenant="owner", submit_time_s=NOW_S - 600)
    states = {"n0000": NodeState(warning_gpus=frozenset({1, 2, 3})), "n0002": NodeState(PowerState.ASLEEP)}
    for incremental in (True, False):
        snap = ClusterSnapshot(time_s=NOW_S, cluster=cl, running=runs, node_states=states,
                               pending=tuple(PendingJob(j) for j in (first, second, claimant)))
        starts = placed(schedule_cycle(snap, POLICY, incremental=incremental).actions)
        assert {s.node for s in starts["a"].slots} == {s.node for s in starts["b"].slots} == {"n0001"}
        assert {s.node for s in starts["mine"].slots} == {"n0000"}


def test_a_cycle_that_asked_the_claims_leaves_nothing_for_the_cyclic_collector() -> None:
    """The kept claims read the cycle's changes (a reference back to the cycle): the cycle drops them when it ends.
    A replay runs with the collector off, so a cycle kept alive by a reference loop stayed for the whole replay (a
    1,000-GPU replay took 70% longer, then spent 5 s collecting them)."""
    import gc

    from greengpu.sched import core
    from greengpu.sched.claims_kept import KeptClaims

    runs = (young_borrower_on_n0000(), *keeper_fills("n0001"))
    gc.collect()
    was_enabled, flags = gc.isenabled(), gc.get_debug()
    gc.disable()
    gc.set_debug(gc.DEBUG_SAVEALL)  # what the collector frees goes to gc.garbage instead, to be looked at
    try:
        result = cycle(runs, job("next", tenant="borrower"))
        assert result.waits["next"].reason in (WaitReason.CAPACITY, WaitReason.RESERVATION)  # the claims were asked
        gc.collect()
        left = [o for o in gc.garbage if isinstance(o, (core._Cycle, KeptClaims))]
    finally:
        gc.garbage.clear()
        gc.set_debug(flags)
        if was_enabled:
            gc.enable()
    assert left == []
