"""The scheduling core's pinned scenarios (a)-(g) of the issue, plus quota, backfill and topology cases."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest
from schedkit import Driver, job, make_cluster, node_type, placed

from greengpu.model import GPU_UNITS, ClusterSnapshot, GpuSlot, KillJob, PendingJob, PreemptJob, RunningJob, Tenant
from greengpu.policy import BackfillPolicy, PreemptionPolicy, SchedulerPolicy
from greengpu.sched.core import WAIT_CAPACITY, schedule, schedule_cycle
from greengpu.sched.preemption import VictimFinder, lost_gpu_s
from greengpu.sched.quota import QuotaLedger
from greengpu.sched.state import PlacementState

A100x8 = node_type(8)


def running(job_id: str, node: str, gpus: list[int], *, tenant: str = "t", priority: int = 0,
            start_s: float = -7200, duration_s: float = 36_000, **kwargs: object) -> RunningJob:
    return RunningJob(job=job(job_id, gpus=len(gpus), tenant=tenant, priority=priority, duration_s=duration_s,
                              **kwargs),
                      slots=tuple(GpuSlot(node, g) for g in gpus), start_time_s=start_s,
                      expected_end_s=start_s + duration_s)


def preempts(actions: tuple[object, ...]) -> list[PreemptJob]:
    return [a for a in actions if isinstance(a, PreemptJob)]


# --------------------------------------------------------------------------- (a)

def _scenario_a(preemptible: bool) -> Driver:
    cluster = make_cluster([(4, A100x8, "rack1")])
    driver = Driver(cluster, SchedulerPolicy(preemption=PreemptionPolicy(grace_s=120, min_runtime_s=0)))
    for i in range(4):
        driver.start_running(running(f"old{i}", f"n{i:04d}", list(range(6)), priority=0,
                                     interruptible=preemptible))
    driver.submit(job("big", gpus=8, priority=5), job("small", gpus=1, priority=0))
    return driver


def test_a_eight_gpu_job_waits_without_preemption_and_small_job_starts_at_once() -> None:
    driver = _scenario_a(preemptible=False)
    result = driver.cycle()
    assert "big" not in placed(result.actions)
    assert "small" in placed(result.actions)
    assert result.waiting["big"] == WAIT_CAPACITY
    assert not preempts(result.actions)
    # The waiting gang holds nothing: 2 + 2 + 2 + 2 free minus the one small job.
    state = PlacementState(driver.snapshot)
    assert state.total_free_units() == 7 * GPU_UNITS


def test_a_eight_gpu_job_is_admitted_once_preemption_frees_one_whole_node() -> None:
    driver = _scenario_a(preemptible=True)
    first = driver.cycle()
    victims = preempts(first.actions)
    assert len(victims) == 1 and victims[0].for_job_id == "big"
    assert "big" not in placed(first.actions)
    assert "small" in placed(first.actions)
    victim_node = driver.running()[victims[0].job_id].slots[0].node
    assert placed(first.actions)["small"].slots[0].node != victim_node
    driver.tick()  # still inside the 120 s grace
    assert "big" in driver.pending_ids()
    result = driver.tick()  # grace over: kill, then place on the freed node
    assert [a.job_id for a in result.actions if isinstance(a, KillJob)] == [victims[0].job_id]
    slots = placed(result.actions)["big"].slots
    assert {s.node for s in slots} == {victim_node} and len(slots) == 8


# --------------------------------------------------------------------------- (b)

def test_b_two_by_one_then_one_by_two_both_placed() -> None:
    cluster = make_cluster([(3, node_type(2), "r")])
    driver = Driver(cluster)
    driver.start_running(running("x", "n0001", [0]))
    driver.start_running(running("y", "n0002", [0]))
    driver.submit(job("spread", gpus=2, gpus_per_node=1), job("pair", gpus=2))
    result = driver.cycle()
    got = placed(result.actions)
    assert {s.node for s in got["spread"].slots} == {"n0001", "n0002"}
    assert {s.node for s in got["pair"].slots} == {"n0000"}


# --------------------------------------------------------------------------- (c)

def test_c_two_full_cluster_gangs_run_one_after_the_other_never_partially() -> None:
    cluster = make_cluster([(100, A100x8, "hall")])
    driver = Driver(cluster)
    driver.submit(job("g1", gpus=800, duration_s=600), job("g2", gpus=800, duration_s=600))
    first = driver.cycle()
    assert list(placed(first.actions)) == ["g1"]
    assert len(placed(first.actions)["g1"].slots) == 800
    while "g2" not in driver.started_at:
        driver.tick()
        running_now = driver.running()
        assert len(running_now) <= 1
        assert all(len(r.slots) == 800 for r in running_now.values())
    assert driver.started_at["g2"] >= 600


# --------------------------------------------------------------------------- (d)

def test_d_preemption_that_needs_one_gpu_evicts_exactly_one_victim() -> None:
    cluster = make_cluster([(2, A100x8, "r")])
    driver = Driver(cluster, SchedulerPolicy(preemption=PreemptionPolicy(min_runtime_s=0)))
    rng = random.Random(4)
    for n in range(2):
        for g in range(8):
            start = -rng.uniform(600, 7200)
            driver.start_running(running(f"low{n}{g}", f"n{n:04d}", [g], start_s=start,
                                         checkpoint_interval_s=900))
    driver.submit(job("urgent", gpus=1, priority=10))
    result = driver.cycle()
    assert len(preempts(result.actions)) == 1
    assert "urgent" not in placed(result.actions)


def test_d_gang_victim_is_evicted_whole_and_only_when_needed() -> None:
    cluster = make_cluster([(2, A100x8, "r")])
    driver = Driver(cluster, SchedulerPolicy(preemption=PreemptionPolicy(min_runtime_s=0, grace_s=0)))
    slots = tuple(GpuSlot(f"n{n:04d}", g) for n in range(2) for g in range(8))
    gang = RunningJob(job=job("gang", gpus=16), slots=slots, start_time_s=-3600, expected_end_s=30_000)
    driver.start_running(gang)
    driver.submit(job("hi", gpus=4, priority=3))
    result = driver.cycle()
    assert [a.job_id for a in result.actions if isinstance(a, KillJob)] == ["gang"]
    assert "hi" in placed(result.actions)
    assert "gang" in driver.pending_ids()  # requeued whole, holding nothing


# --------------------------------------------------------------------------- (e)

def test_e_three_saturated_tenants_converge_to_weighted_shares() -> None:
    tenants = [Tenant("a", weight=3), Tenant("b", weight=2), Tenant("c", weight=1)]
    cluster = make_cluster([(12, A100x8, "r")], tenants)
    driver = Driver(cluster, SchedulerPolicy(preemption=PreemptionPolicy(enabled=False)))
    rng = random.Random(7)
    counter = 0
    for tenant in "abc":
        for _ in range(400):
            counter += 1
            driver.submit(job(f"{tenant}{counter}", tenant=tenant, gpus=rng.choice([1, 1, 2, 4]),
                              duration_s=rng.choice([600, 1200, 1800, 3600])))
    shares: dict[str, list[float]] = {t: [] for t in "abc"}
    for step in range(240):
        driver.tick()
        if step >= 60:
            held: dict[str, float] = dict.fromkeys("abc", 0.0)
            for r in driver.snapshot.running:
                held[r.job.tenant] += r.job.gpus
            total = sum(held.values())
            for t in "abc":
                shares[t].append(held[t] / total)
    means = {t: sum(v) / len(v) for t, v in shares.items()}
    for tenant, target in {"a": 0.5, "b": 1 / 3, "c": 1 / 6}.items():
        assert abs(means[tenant] - target) <= 0.05, means


# --------------------------------------------------------------------------- (f)

def test_f_tenant_reclaims_lent_quota_within_one_cycle_plus_grace() -> None:
    tenants = [Tenant("owner", quota_gpus=16), Tenant("borrower", quota_gpus=0)]
    cluster = make_cluster([(2, A100x8, "r")], tenants)
    grace_s = 120
    driver = Driver(cluster, SchedulerPolicy(preemption=PreemptionPolicy(grace_s=grace_s, min_runtime_s=300)))
    for i in range(16):
        driver.submit(job(f"b{i}", tenant="borrower", gpus=1, duration_s=86_400))
    driver.cycle()
    assert len(driver.running()) == 16
    for _ in range(6):
        driver.tick()  # past min_runtime
    driver.submit(job("mine", tenant="owner", gpus=8, duration_s=3600))
    submitted = driver.now_s
    first = driver.cycle()
    assert len(preempts(first.actions)) == 8  # one whole node's worth of 1-GPU borrowers
    while "mine" not in driver.started_at:
        driver.tick()
        assert driver.now_s - submitted <= driver.interval_s + grace_s + driver.interval_s
    assert driver.started_at["mine"] - submitted <= driver.interval_s + grace_s + 1e-9 + driver.interval_s
    assert len({s.node for s in driver.running()["mine"].slots}) == 1


def test_reclaim_never_takes_a_lender_below_its_own_quota() -> None:
    tenants = [Tenant("a", quota_gpus=8), Tenant("b", quota_gpus=8)]
    cluster = make_cluster([(2, A100x8, "r")], tenants)
    driver = Driver(cluster, SchedulerPolicy(preemption=PreemptionPolicy(min_runtime_s=0)))
    for n in range(2):
        driver.start_running(running(f"j{n}", f"n{n:04d}", list(range(8)), tenant="b" if n == 0 else "a",
                                     priority=0 if n == 0 else 9))
    driver.submit(job("a-more", tenant="a", gpus=8, priority=9))
    result = driver.cycle()
    assert not preempts(result.actions)  # b holds exactly its quota: not borrowing, never a victim


# --------------------------------------------------------------------------- (g)

def test_g_checkpoint_aware_victims_lose_at_most_half_of_newest_first() -> None:
    rng = random.Random(11)
    lost = {"least-lost-work": 0.0, "newest-first": 0.0}
    cluster = make_cluster([(1, A100x8, "r")])
    for _ in range(300):
        now_s = 100_000.0
        jobs = []
        for g in range(8):
            start = now_s - rng.uniform(1800, 6 * 3600)
            interval = rng.choice([600, 900, 1800, 3600])
            jobs.append(running(f"v{g}", "n0000", [g], start_s=start, checkpoint_interval_s=interval))
        snapshot = ClusterSnapshot(time_s=now_s, cluster=cluster, running=tuple(jobs))
        pending = PendingJob(job("p", gpus=2, priority=5))
        for order in lost:
            state = PlacementState(snapshot)
            ledger = QuotaLedger(cluster, {"n0000": "A100"}, {}, False)
            for r in jobs:
                ledger.charge(r)
            finder = VictimFinder(state, ledger, PreemptionPolicy(victim_order=order, min_runtime_s=0), now_s, jobs)
            choice = finder.find(pending, set())
            assert choice is not None and len(choice.victims) == 2
            lost[order] += sum(lost_gpu_s(v, now_s) for v in choice.victims) / 3600
    print(f"lost GPU-hours: checkpoint-aware {lost['least-lost-work']:.1f}, newest-first {lost['newest-first']:.1f}")
    assert lost["least-lost-work"] <= 0.5 * lost["newest-first"]


# --------------------------------------------------------------------------- other rules

def test_no_ping_pong_and_rate_cap() -> None:
    cluster = make_cluster([(1, A100x8, "r")])
    policy = SchedulerPolicy(preemption=PreemptionPolicy(min_runtime_s=0, max_per_job_per_hour=1))
    snapshot = ClusterSnapshot(
        time_s=10_000, cluster=cluster,
        running=(running("A", "n0000", list(range(8)), priority=0, start_s=0),),
        pending=(PendingJob(job("B", gpus=8, priority=5),
                            preemptions=(replace_record(9_000, "A"),)),),
    )
    assert not preempts(schedule(snapshot, policy))  # A once preempted B: B may not preempt A back
    capped = replace(snapshot, pending=(PendingJob(job("C", gpus=8, priority=5)),),
                     running=(replace(snapshot.running[0], preemptions=(replace_record(9_500, "Z"),)),))
    assert not preempts(schedule(capped, policy))  # A was already preempted once this hour
    later = replace(capped, time_s=9_500 + 3_601)
    assert preempts(schedule(later, policy))


def replace_record(time_s: float, by: str):  # noqa: ANN201
    from greengpu.model import PreemptionRecord

    return PreemptionRecord(time_s, by)


def test_min_runtime_protects_fresh_jobs() -> None:
    cluster = make_cluster([(1, A100x8, "r")])
    policy = SchedulerPolicy(preemption=PreemptionPolicy(min_runtime_s=600))
    snapshot = ClusterSnapshot(time_s=1000, cluster=cluster,
                               running=(running("fresh", "n0000", list(range(8)), start_s=700),),
                               pending=(PendingJob(job("hi", gpus=1, priority=9)),))
    assert not preempts(schedule(snapshot, policy))


def test_other_tenants_within_quota_are_never_preempted_for_priority() -> None:
    tenants = [Tenant("a", quota_gpus=8), Tenant("b", quota_gpus=8)]
    cluster = make_cluster([(1, A100x8, "r")], tenants)
    snapshot = ClusterSnapshot(time_s=10_000, cluster=cluster,
                               running=(running("b1", "n0000", list(range(8)), tenant="b", priority=0),),
                               pending=(PendingJob(job("a1", tenant="a", gpus=1, priority=99)),))
    policy = SchedulerPolicy(preemption=PreemptionPolicy(min_runtime_s=0))
    assert not preempts(schedule(snapshot, policy))


def test_backfill_does_not_delay_reserved_job() -> None:
    cluster = make_cluster([(2, A100x8, "r")])
    driver = Driver(cluster, SchedulerPolicy(preemption=PreemptionPolicy(enabled=False),
                                             backfill=BackfillPolicy(reservations=2)))
    driver.start_running(running("r0", "n0000", list(range(4)), start_s=0, duration_s=3600))
    driver.start_running(running("r1", "n0001", list(range(4)), start_s=0, duration_s=7200))
    driver.advance(60)
    driver.submit(job("wide", gpus=8, priority=5), job("short", gpus=4, duration_s=1800),
                  job("long", gpus=4, duration_s=20_000))
    result = driver.cycle()
    got = placed(result.actions)
    assert "wide" not in got
    assert result.reservations and result.reservations[0].job_id == "wide"
    reserved = {driver.snapshot.cluster.nodes[n].name for n in result.reservations[0].nodes}
    assert reserved == {"n0000"}  # the node that frees first
    assert got["short"].slots[0].node == "n0000" and got["short"].backfilled  # ends before the reservation
    assert got["long"].slots[0].node == "n0001"  # would delay "wide" on n0000, so goes elsewhere


def test_without_backfill_reservations_wide_job_can_starve() -> None:
    """The counterfactual that shows reservations matter: greedy lets long jobs take the freed node."""
    cluster = make_cluster([(1, A100x8, "r")])
    snapshot = ClusterSnapshot(
        time_s=60, cluster=cluster, running=(running("r0", "n0000", list(range(4)), start_s=0, duration_s=3600),),
        pending=(PendingJob(job("wide", gpus=8, priority=5)), PendingJob(job("long", gpus=4, duration_s=20_000))))
    with_reservations = schedule_cycle(snapshot, SchedulerPolicy())
    without = schedule_cycle(snapshot, SchedulerPolicy(backfill=BackfillPolicy(enabled=False)))
    assert "long" not in placed(with_reservations.actions)
    assert "long" in placed(without.actions)


def test_fractional_jobs_pack_onto_shared_gpus_first() -> None:
    cluster = make_cluster([(2, A100x8, "r")])
    driver = Driver(cluster)
    driver.submit(job("f1", gpus=0.5), job("f2", gpus=0.25), job("f3", gpus=0.25), job("f4", gpus=0.5))
    result = driver.cycle()
    slots = {k: v.slots[0] for k, v in placed(result.actions).items()}
    assert (slots["f1"].node, slots["f1"].gpu_index) == (slots["f2"].node, slots["f2"].gpu_index)
    assert (slots["f3"].node, slots["f3"].gpu_index) == (slots["f1"].node, slots["f1"].gpu_index)
    assert (slots["f4"].node, slots["f4"].gpu_index) != (slots["f1"].node, slots["f1"].gpu_index)
    assert slots["f4"].node == slots["f1"].node  # best fit: the already-used node, not a whole free one
    assert slots["f1"].units == 500


def test_best_fit_keeps_whole_nodes_free() -> None:
    cluster = make_cluster([(3, A100x8, "r")])
    driver = Driver(cluster)
    driver.start_running(running("x", "n0001", list(range(5))))
    driver.submit(job("j3", gpus=3))
    result = driver.cycle()
    assert placed(result.actions)["j3"].slots[0].node == "n0001"


def test_gang_prefers_one_domain() -> None:
    cluster = make_cluster([(3, A100x8, "rackA"), (4, A100x8, "rackB")])
    driver = Driver(cluster)
    driver.start_running(running("x", "n0000", [0]))
    driver.submit(job("g", gpus=24))
    result = driver.cycle()
    nodes = {s.node for s in placed(result.actions)["g"].slots}
    assert nodes <= {"n0003", "n0004", "n0005", "n0006"} and len(nodes) == 3


def test_a_whole_node_gang_goes_to_the_tightest_domain_that_holds_it() -> None:
    # rackA: 3 nodes, 2 of them whole and free; rackB: 4 whole free nodes. Both can hold a 2-node gang;
    # best fit at domain level takes rackA and keeps rackB's four whole nodes together.
    cluster = make_cluster([(3, A100x8, "rackA"), (4, A100x8, "rackB")])
    driver = Driver(cluster)
    driver.start_running(running("x", "n0000", [0]))
    driver.submit(job("g", gpus=16))
    nodes = {s.node for s in placed(driver.cycle().actions)["g"].slots}
    assert nodes == {"n0001", "n0002"}


def test_a_partial_node_gang_goes_to_the_tightest_domain_that_holds_it() -> None:
    # Two GPUs per node on 2 nodes. rackA has 4 + 4 free GPUs, rackB 8 + 8 + 8: both hold the gang,
    # rackA is the tighter fit, so rackB keeps its whole free nodes.
    cluster = make_cluster([(2, A100x8, "rackA"), (3, A100x8, "rackB")])
    driver = Driver(cluster)
    driver.start_running(running("x", "n0000", [0, 1, 2, 3]))
    driver.start_running(running("y", "n0001", [0, 1, 2, 3]))
    driver.submit(job("g", gpus=4, gpus_per_node=2))
    slots = placed(driver.cycle().actions)["g"].slots
    assert sorted((s.node, s.gpu_index) for s in slots) == [("n0000", 4), ("n0000", 5), ("n0001", 4), ("n0001", 5)]


def test_a_gang_no_domain_can_hold_spans_the_roomiest_domains_first() -> None:
    # rackA: 1 whole free node, rackB: 2, rackC: 1. A 3-node gang fits in no single rack: it takes
    # rackB's two nodes first (the roomiest), then one more, so it spans two domains, not three.
    cluster = make_cluster([(1, A100x8, "rackA"), (2, A100x8, "rackB"), (1, A100x8, "rackC")])
    driver = Driver(cluster)
    driver.submit(job("g", gpus=24))
    nodes = {s.node for s in placed(driver.cycle().actions)["g"].slots}
    assert nodes == {"n0000", "n0001", "n0002"}  # rackB's n0001, n0002, then rackA (domain name order)


def test_reclaim_takes_a_partly_borrowing_lender_down_to_its_quota_and_no_further() -> None:
    # One 8-GPU node. b (quota 4) holds 6, so it borrows 2; c (quota 1) holds 2 and borrows 1.
    # a (quota 3, holding nothing) reclaims 3 GPUs: b may give back its 2 borrowed GPUs and c its 1,
    # even though b's jobs are the cheapest victims: a third job of b would take b below its quota.
    tenants = [Tenant("a", quota_gpus=3), Tenant("b", quota_gpus=4), Tenant("c", quota_gpus=1)]
    cluster = make_cluster([(1, A100x8, "r")], tenants)
    run = [running(f"b{g}", "n0000", [g], tenant="b", start_s=-60) for g in range(6)]
    run += [running(f"c{g}", "n0000", [g], tenant="c", start_s=-7200) for g in (6, 7)]
    snapshot = ClusterSnapshot(time_s=0, cluster=cluster, running=tuple(run),
                               pending=(PendingJob(job("mine", tenant="a", gpus=3)),))
    actions = schedule(snapshot, SchedulerPolicy(preemption=PreemptionPolicy(min_runtime_s=0)))
    victims = sorted(p.job_id for p in preempts(actions))
    assert [v[0] for v in victims] == ["b", "b", "c"]
    left = {t: sum(r.job.units for r in run if r.job.tenant == t and r.job.job_id not in victims) for t in "bc"}
    assert left == {"b": 4 * GPU_UNITS, "c": 1 * GPU_UNITS}


def test_gpu_model_constraint_and_per_model_quota() -> None:
    tenants = [Tenant("t", quota_gpus_by_model={"V100": 4}, borrow_limit_gpus=0)]
    cluster = make_cluster([(1, node_type(8, "A100"), "r"), (1, node_type(8, "V100"), "r")], tenants)
    driver = Driver(cluster)
    driver.submit(job("v", gpus=4, gpu_types=frozenset({"V100"})), job("v2", gpus=1, gpu_types=frozenset({"V100"})),
                  job("a", gpus=1, gpu_types=frozenset({"A100"})))
    result = driver.cycle()
    got = placed(result.actions)
    assert got["v"].slots[0].node == "n0001"
    assert "v2" not in got and result.waiting["v2"].startswith("quota")
    assert "a" not in got  # no A100 quota and no borrowing allowed


def test_tenant_memory_cap() -> None:
    tenants = [Tenant("t", quota_gpus=8, max_gpu_memory_gb=160)]
    cluster = make_cluster([(1, A100x8, "r")], tenants)
    driver = Driver(cluster)
    driver.submit(job("two", gpus=2, submit_time_s=1), job("one-more", gpus=1, submit_time_s=2))
    result = driver.cycle()
    assert "two" in placed(result.actions) and "one-more" not in placed(result.actions)
    assert "memory" in result.waiting["one-more"]


def test_non_interruptible_jobs_do_not_borrow_by_default() -> None:
    tenants = [Tenant("t", quota_gpus=1)]
    cluster = make_cluster([(1, A100x8, "r")], tenants)
    jobs = (PendingJob(job("i1", gpus=1, job_class="inference", interruptible=False)),
            PendingJob(job("i2", gpus=1, job_class="inference", interruptible=False)))
    snapshot = ClusterSnapshot(time_s=0, cluster=cluster, pending=jobs)
    assert list(placed(schedule(snapshot, SchedulerPolicy()))) == ["i1"]
    allowed = SchedulerPolicy(borrow_non_interruptible=True)
    assert list(placed(schedule(snapshot, allowed))) == ["i1", "i2"]


def test_whole_node_reserve_keeps_nodes_for_big_jobs() -> None:
    cluster = make_cluster([(2, A100x8, "r")])
    snapshot = ClusterSnapshot(time_s=0, cluster=cluster,
                               pending=tuple(PendingJob(job(f"s{i}", gpus=8 if i == 9 else 1)) for i in range(10)))
    result = schedule_cycle(snapshot, SchedulerPolicy(whole_node_reserve=1))
    got = placed(result.actions)
    assert "s9" in got
    small_nodes = {got[f"s{i}"].slots[0].node for i in range(9) if f"s{i}" in got}
    assert len(small_nodes) == 1 and len([k for k in got if k != "s9"]) == 8


def test_age_boost_lets_old_jobs_overtake() -> None:
    cluster = make_cluster([(1, node_type(1), "r")])
    old = PendingJob(job("old", priority=0, submit_time_s=0))
    new = PendingJob(job("new", priority=3, submit_time_s=5 * 3600))
    snapshot = ClusterSnapshot(time_s=5 * 3600, cluster=cluster, pending=(new, old))
    assert list(placed(schedule(snapshot, SchedulerPolicy(age_boost_per_hour=1)))) == ["old"]
    assert list(placed(schedule(snapshot, SchedulerPolicy(age_boost_per_hour=0)))) == ["new"]


def test_sleeping_nodes_get_no_work() -> None:
    from greengpu.model import NodeState, PowerState

    cluster = make_cluster([(2, A100x8, "r")])
    snapshot = ClusterSnapshot(time_s=0, cluster=cluster, pending=(PendingJob(job("j", gpus=8)),),
                               node_states={"n0000": NodeState(PowerState.ASLEEP)})
    got = placed(schedule(snapshot, SchedulerPolicy()))
    assert {s.node for s in got["j"].slots} == {"n0001"}


@pytest.mark.parametrize(("grace_s", "kept_s"), [
    # Killed at once, at t=0: 3950 s run, 3 checkpoints of 1000 s kept, 7000 s of 10000 s left.
    (0, 7_000.0),
    # Signalled at t=0, killed at the first cycle after the 90 s grace (t=120, cycles every 60 s):
    # 4070 s run, a 4th checkpoint was taken during the grace, 6000 s left.
    (90, 6_000.0),
])
def test_requeued_victim_keeps_checkpointed_progress(grace_s: float, kept_s: float) -> None:
    cluster = make_cluster([(1, A100x8, "r")])
    driver = Driver(cluster, SchedulerPolicy(preemption=PreemptionPolicy(grace_s=grace_s, min_runtime_s=0)))
    driver.start_running(running("v", "n0000", list(range(8)), start_s=-3950, duration_s=10_000,
                                 checkpoint_interval_s=1000))
    driver.submit(job("hi", gpus=8, priority=5))
    while "hi" not in driver.started_at:
        driver.cycle()
        driver.advance()
    requeued = next(p for p in driver.snapshot.pending if p.job.job_id == "v")
    assert requeued.job.duration_s == kept_s
    assert requeued.preemptions and requeued.preemptions[0].by_job_id == "hi"
