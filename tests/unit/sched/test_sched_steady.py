"""How long a cycle's result stands while only the clock moves (greengpu.sched.steady): the promise is never
too long (the order's head, a reservation's nodes and a whole replay decide alike before it ends) and it is
withheld where the clock moves a decision at any time."""

from __future__ import annotations

import itertools
import math

from hypothesis import example, given, settings
from hypothesis import strategies as st
from schedkit import job, make_cluster, node_type

from greengpu.config.policy import load_policy
from greengpu.model import ClusterSnapshot, GpuSlot, Job, PendingJob, RunningJob, Tenant
from greengpu.policy import FairSharePolicy, PreemptionPolicy, SchedulerPolicy
from greengpu.sched.backfill import ends_by_node, reservation_unchanged_until_s, reserve
from greengpu.sched.core import alike_key, schedule_cycle
from greengpu.sched.order import age_boost, queue_order
from greengpu.sched.pending_index import PendingIndex
from greengpu.sched.state import PlacementState
from greengpu.sched.steady import order_unchanged_until_s
from greengpu.sched.waits import Wait, WaitReason
from greengpu.sim.engine import Simulation

NOW = 100_000.0
BOOSTS = SchedulerPolicy(age_boost_per_hour=1, age_boost_max=3)


def _index_of(pending: list[PendingJob]) -> PendingIndex:
    index = PendingIndex(alike_key)
    assert index.sync(tuple(pending), lambda j: Wait(WaitReason.CAPACITY, j.tenant))
    return index


# (base priority, tenant, seconds waited): some jobs just submitted, or stamped a little after now (a body's
# clock behind the scheduler's), which earn no boost yet.
queued_jobs = st.lists(st.tuples(st.integers(0, 2), st.sampled_from("abc"), st.integers(-1_800, 30_000)),
                       min_size=1, max_size=25)


@settings(max_examples=200, deadline=None)
@given(queued_jobs, st.integers(1, 12), st.lists(st.sampled_from([0.0, 0.5, 1.0]), min_size=3, max_size=3),
       st.lists(st.floats(0.0, 1.0), min_size=6, max_size=6), st.integers(1, 3))
@example([(0, "a", 3_600), (0, "b", 1_800)], 1, [0.0, 0.0, 0.0], [0.5] * 6, 3)  # a job exactly one step old
def test_the_head_of_the_queue_order_stands_until_the_promise_ends(
        spec: list[tuple[int, str, int]], head_length: int, shares: list[float], probes: list[float],
        boost_max: int) -> None:
    policy = SchedulerPolicy(age_boost_per_hour=1, age_boost_max=boost_max)
    pending = [PendingJob(Job(f"j{n}", tenant, 1, 3600.0, NOW - age_s, priority=priority))
               for n, (priority, tenant, age_s) in enumerate(spec)]
    share = dict(zip("abc", shares, strict=True))
    index = _index_of(pending)
    head = list(itertools.islice(queue_order(pending, NOW, policy, share.__getitem__), head_length))
    until = order_unchanged_until_s(index, head, NOW, policy, share.__getitem__)

    def boosts(at: float) -> list[float]:
        return [age_boost((at - p.job.submit_time_s) / 3600, boost_max) for p in pending]

    horizon = min(until, NOW + 5 * 3600.0)
    for fraction in [*probes, 0.999999]:
        at = NOW + fraction * (horizon - NOW)
        if at >= until - 1.0:
            continue
        again = list(itertools.islice(queue_order(pending, at, policy, share.__getitem__), head_length))
        assert [p.job.job_id for p in again] == [p.job.job_id for p in head], at
    if until < math.inf:  # never shorter than needed: some job takes a boost step just at the promise's end
        assert until > NOW and boosts(until) != boosts(NOW)


def test_the_promise_ends_when_a_job_behind_the_head_reaches_its_level_and_place() -> None:
    old = PendingJob(Job("old", "a", 1, 3600.0, NOW - 3 * 3600.0))  # at the highest boost (3)
    younger = PendingJob(Job("younger", "a", 1, 3600.0, NOW - 2.5 * 3600.0))  # reaches 3 in half an hour
    other = PendingJob(Job("other", "b", 1, 3600.0, NOW - 1.2 * 3600.0))  # reaches 2 in 48 min, 3 in 1 h 48 min
    index = _index_of([old, younger, other])
    shares = {"a": 0.0, "b": 1.0}.__getitem__
    # The head is "old" alone: "younger" joins its level in 30 min, behind it (same tenant, younger).
    # "other" reaches the head's level in 1 h 48 min, with a higher share: behind it as well. "old" is at the cap.
    # Only a job passing "old" ends it: nobody can (the cap), so the order of one job stands.
    assert order_unchanged_until_s(index, [old], NOW, BOOSTS, shares) == math.inf
    # With "younger" in the head too (two jobs, both tenant a), "other" still comes after them at level 3.
    assert order_unchanged_until_s(index, [old, younger], NOW, BOOSTS, shares) == NOW + 0.5 * 3600.0  # younger steps
    # With "b" the lower share, "other" reaching level 3 would come first: the promise ends then.
    low_b = {"a": 1.0, "b": 0.0}.__getitem__
    assert order_unchanged_until_s(index, [old], NOW, BOOSTS, low_b) == NOW + 1.8 * 3600.0
    # No boost, no steps: the order never moves with the clock.
    flat = SchedulerPolicy(age_boost_per_hour=0)
    assert order_unchanged_until_s(index, [old], NOW, flat, shares) == math.inf


def _holding(job_id: str, node: str, gpus: int, end_s: float) -> RunningJob:
    return RunningJob(job(job_id, gpus=gpus, duration_s=end_s), tuple(GpuSlot(node, g) for g in range(gpus)),
                      0.0, end_s)


@settings(max_examples=120, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(1, 8), st.integers(-3_000, 20_000)), max_size=8),
       st.integers(1, 16), st.lists(st.floats(0.0, 1.0), min_size=5, max_size=5))
@example([(0, 8, 30), (1, 8, 60), (2, 8, 5_000)], 8, [0.5] * 5)  # ends within the next cycle, and just at it
def test_a_reservation_keeps_its_nodes_until_the_promise_ends(
        spec: list[tuple[int, int, int]], gpus: int, probes: list[float]) -> None:
    cluster = make_cluster([(4, node_type(8), "r")])
    running: list[RunningJob] = []
    used = dict.fromkeys(range(4), 0)
    for n, (node, size, ends_in_s) in enumerate(spec):
        size = min(size, 8 - used[node])
        if size <= 0:
            continue
        slots = tuple(GpuSlot(f"n000{node}", used[node] + g) for g in range(size))
        used[node] += size
        running.append(RunningJob(job(f"r{n}", gpus=size, duration_s=1.0), slots, 0.0, NOW + ends_in_s))
    state = PlacementState(ClusterSnapshot(time_s=NOW, cluster=cluster, running=tuple(running)))
    ends = ends_by_node(state, running)
    wanted = job("w", gpus=gpus)
    first = reserve(state, wanted, ends, set(), NOW, 60.0)
    until = reservation_unchanged_until_s(state, wanted, ends, NOW, 60.0)
    # Never shorter than needed: the promise ends when the next cycle's time reaches a node's own time.
    raw_ends = {r.expected_end_s for r in running}
    assert until == math.inf or (until > NOW and until + 60.0 in raw_ends)
    for fraction in probes:
        at = NOW + fraction * (min(until, NOW + 30_000.0) - NOW)
        if at >= until - 1.0:
            continue
        again = reserve(state, wanted, ends, set(), at, 60.0)
        assert (again is None) == (first is None)
        if first is not None and again is not None:
            assert again.nodes == first.nodes and (again.start_s <= at) == (first.start_s <= NOW)


def test_a_reservation_promise_reads_every_model_that_could_take_the_job() -> None:
    # The 4-GPU nodes cannot hold an 8-GPU-per-node job: the H100 nodes that can are the ones that count.
    cluster = make_cluster([(2, node_type(4, name="a100x4"), "r"), (2, node_type(8, model="H100", name="h100x8"), "r")])
    running = [_holding("h", "n0002", 8, NOW + 5_000.0), _holding("i", "n0003", 8, NOW + 9_000.0),
               _holding("s", "n0000", 4, NOW + 100.0)]
    state = PlacementState(ClusterSnapshot(time_s=NOW, cluster=cluster, running=tuple(running)))
    wanted = Job("w", "t", 8, 3_600.0, NOW, gpus_per_node=8)
    assert reserve(state, wanted, ends_by_node(state, running), set(), NOW, 60.0).nodes == {2}
    assert reservation_unchanged_until_s(state, wanted, ends_by_node(state, running), NOW, 60.0) == NOW + 4_940.0


def _saturated(tenants_borrow: bool = True) -> tuple[object, list[Job]]:
    cluster = make_cluster([(2, node_type(8), "r"), (2, node_type(4, name="a100x4"), "r")],
                           tenants=[Tenant("a", quota_gpus=12), Tenant("b", quota_gpus=12)])
    jobs = [Job(f"j{n}", "ab"[n % 2], gpus, duration_s, n * 90.0, priority=n % 3)
            for n, (gpus, duration_s) in enumerate(itertools.islice(itertools.cycle(
                [(1, 7_200.0), (4, 20_000.0), (8, 30_000.0), (2, 3_000.0), (1, 50_000.0)]), 60))]
    return cluster, jobs


@settings(max_examples=12, deadline=None)
@given(st.sampled_from(["always-on", "idle-timeout", "default"]), st.integers(0, 59), st.integers(0, 3))
def test_a_replay_that_reuses_known_cycles_asks_the_core_the_same_answer(policy_name: str, skip: int,
                                                                           extra_priority: int) -> None:
    """check_known_cycles: at every cycle the engine takes as known, the core is asked too and must decide the
    same (nothing, the same waits, the same reservations); the replay then fails otherwise."""
    cluster, jobs = _saturated()
    jobs = [j for n, j in enumerate(jobs) if n != skip]
    jobs[0] = Job(jobs[0].job_id, jobs[0].tenant, jobs[0].gpus, jobs[0].duration_s, jobs[0].submit_time_s,
                  priority=extra_priority)
    sim = Simulation(cluster, load_policy(policy_name), jobs, check_known_cycles=True)  # type: ignore[arg-type]
    sim.run()
    assert sim.known_cycles > 0  # a queue hours long behind a full cluster: most periodic cycles are known


def test_known_cycles_give_the_same_replay_as_asking_every_time() -> None:
    cluster, jobs = _saturated()
    figures = []
    for check in (False, True):
        sim = Simulation(cluster, load_policy("default"), jobs, check_known_cycles=check)  # type: ignore[arg-type]
        result = sim.run().to_json()
        figures.append((result["energy_kwh"], result["wait_s"], sim.work.finish_s))
    assert figures[0] == figures[1]


def _one_cycle(policy: SchedulerPolicy, running: list[RunningJob], pending: list[Job],
               tenants: tuple[Tenant, ...] = (Tenant("a", quota_gpus=0),)) -> float:
    # By default tenant "a" borrows (no quota of its own): its jobs reclaim nothing, so a search stops at its
    # cheap checks.
    cluster = make_cluster([(2, node_type(8), "r")], tenants=list(tenants))
    snapshot = ClusterSnapshot(time_s=NOW, cluster=cluster, running=tuple(running),
                               pending=tuple(PendingJob(j) for j in pending))
    return schedule_cycle(snapshot, policy, purpose="test-steady").unchanged_until_s


def test_no_promise_where_the_clock_moves_a_decision_at_any_time() -> None:
    full = [_holding("r", "n0000", 8, NOW + 7_200.0), _holding("s", "n0001", 8, NOW + 9_000.0)]
    waiting = [Job("w", "a", 4, 3_600.0, NOW - 600.0)]
    # A full cluster, a job waiting: it stands until just before the job's next boost step (600 s waited, the
    # step at 3,600 s) could reorder the queue, not at it (a step due at a cycle's time may round either way).
    assert NOW < _one_cycle(SchedulerPolicy(), full, waiting) < NOW + 3_000.0
    # It started something: the next cycle meets other jobs.
    assert _one_cycle(SchedulerPolicy(), [], waiting) == -math.inf
    # A job asked to stop: its grace runs out with the clock.
    signalled = [RunningJob(full[0].job, full[0].slots, 0.0, NOW + 7_200.0, preempt_signalled_s=NOW - 60.0),
                 full[1]]
    assert _one_cycle(SchedulerPolicy(), signalled, waiting) == -math.inf
    # Shares from decayed past usage move with the clock.
    decayed = SchedulerPolicy(fair_share=FairSharePolicy(usage_weight=0.5))
    assert _one_cycle(decayed, full, waiting) == -math.inf
    # A victim search past its cheap checks (a job that outranks a running one): victims age past
    # min_runtime_s, their lost work grows. Here none is old enough to stop: it waits, with no promise.
    urgent = [Job("w", "a", 4, 3_600.0, NOW - 600.0, priority=5)]
    searches = SchedulerPolicy(preemption=PreemptionPolicy(min_runtime_s=10**9))
    assert _one_cycle(searches, full, urgent) == -math.inf
    assert _one_cycle(searches, full, waiting) > NOW  # the same job at the running job's priority: no search
    # A job its tenant's quota blocks, above one of its own tenant's jobs that is still too young to stop: that
    # job may yield once it has run min_runtime_s, a time no boost step or reservation marks.
    capped = (Tenant("a", quota_gpus=8, borrow_limit_gpus=0),)
    own = [RunningJob(Job("own", "a", 8, 9_000.0, NOW - 120.0), tuple(GpuSlot("n0000", g) for g in range(8)),
                      NOW - 60.0, NOW + 9_000.0), full[1]]
    above_own = [Job("w", "a", 4, 3_600.0, NOW - 600.0, priority=5)]
    assert _one_cycle(SchedulerPolicy(), own, above_own, capped) == -math.inf
    assert _one_cycle(SchedulerPolicy(), own, waiting, capped) > NOW  # not above it: its quota wait stands
