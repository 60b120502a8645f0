"""A cycle stops asking waiting jobs one by one once every job left would wait as the first of its kind did
(greengpu.sched.cycle: `_walk`, `_waiting_kinds`): free GPUs that no waiting job can use (too few on a node,
or owed to a claimant) no longer make it walk the whole queue, and a job that can start is still reached.

The Driver runs every cycle again with fresh books and no shortcuts, and asserts the same actions and the
same waits in the same order.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schedkit import Driver, job, make_cluster, node_type, placed

from greengpu.model import ClusterSnapshot, GpuSlot, NodeState, PendingJob, PowerState, RunningJob, Tenant
from greengpu.policy import BackfillPolicy, PreemptionPolicy, SchedulerPolicy
from greengpu.sched import core
from greengpu.sched.core import SchedulerMemory, schedule_cycle
from greengpu.sched.index_order import IndexOrder
from greengpu.sched.waits import WaitReason

NO_TRIES = SchedulerPolicy(preemption=PreemptionPolicy(enabled=False), backfill=BackfillPolicy(enabled=False))
"""No victim search and no reservation: every job after the first is decided as its kind is."""


def _busy(job_id: str, node: str, gpus: int, end_s: float = 99_999.0) -> RunningJob:
    return RunningJob(job(job_id, gpus=gpus, duration_s=end_s), tuple(GpuSlot(node, g) for g in range(gpus)),
                      start_time_s=0.0, expected_end_s=end_s)


def _fragmented(nodes: int = 4) -> Driver:
    """8-GPU nodes with 7 GPUs busy on each: one GPU free per node, which no 2- or 4-GPU job can use."""
    driver = Driver(make_cluster([(nodes, node_type(8), "d0")]), NO_TRIES)
    for n in range(nodes):
        driver.start_running(_busy(f"r{n}", f"n{n:04d}", 7))
    return driver


def _queue(count: int) -> list:
    """Two tenants, two sizes: four kinds of job, interleaved in the queue."""
    return [job(f"w{i:04d}", gpus=2 if i % 2 else 4, tenant="ab"[i % 4 // 2], duration_s=3600 + i,
                submit_time_s=float(i)) for i in range(count)]


@pytest.fixture
def asked(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The jobs the incremental cycle asked `wait_alike` about."""
    calls: list[str] = []
    wait_alike = core._Cycle.wait_alike

    def counting(self, item, models, key=None):  # noqa: ANN001, ANN202
        if self.shortcuts:
            calls.append(item.job.job_id)
        return wait_alike(self, item, models, key)

    monkeypatch.setattr(core._Cycle, "wait_alike", counting)
    return calls


def test_free_gpus_no_job_can_use_do_not_make_the_cycle_ask_every_job(asked: list[str]) -> None:
    driver = _fragmented()
    driver.submit(*_queue(400))
    result = driver.cycle(auto_finish=False)

    assert not placed(result.actions)
    assert len(result.waits) == 400 and {w.reason for w in result.waits.values()} == {WaitReason.CAPACITY}
    # One question per kind (its longest job), not one per job: the queue's 400 jobs are of four kinds.
    assert len(asked) <= 8, asked


def test_a_job_that_fits_the_free_gpus_deep_in_the_queue_still_starts(asked: list[str]) -> None:
    driver = _fragmented()
    driver.submit(*_queue(300), job("tiny", gpus=1, tenant="c", duration_s=60, submit_time_s=999.0))
    result = driver.cycle(auto_finish=False)

    assert set(placed(result.actions)) == {"tiny"}
    assert len(result.waits) == 300
    assert len(asked) <= 12, asked


def test_after_a_start_every_kind_is_asked_again() -> None:
    """Two GPUs free on n0000: the first 2-GPU job in the queue takes them, after which no 2-GPU job fits,
    though one did when the kinds were first asked."""
    driver = Driver(make_cluster([(2, node_type(8), "d0")]), NO_TRIES)
    driver.start_running(_busy("r0", "n0000", 6))
    driver.start_running(_busy("r1", "n0001", 7))
    driver.submit(*[job(f"big{i}", gpus=4, submit_time_s=float(i)) for i in range(50)],
                  *[job(f"two{i}", gpus=2, tenant="b", submit_time_s=100.0 + i) for i in range(50)])
    result = driver.cycle(auto_finish=False)

    assert set(placed(result.actions)) == {"two0"}
    assert all(result.waits[f"two{i}"].reason is WaitReason.CAPACITY for i in range(1, 50))


def test_the_waits_list_the_rest_of_the_queue_in_queue_order_even_when_read_after_the_next_cycle() -> None:
    cluster = make_cluster([(2, node_type(8), "d0")])
    running = (_busy("r0", "n0000", 7), _busy("r1", "n0001", 7))
    # Priorities out of submit order, so that queue order and snapshot order differ. At the lowest level,
    # which the walk does not reach before it stops, tenants "c" and "a" tie on fair share (neither runs
    # anything), so c's older jobs come first.
    queue = (*(PendingJob(replace(j, priority=i % 3)) for i, j in enumerate(_queue(60))),
             PendingJob(job("c0", gpus=2, tenant="c", priority=-1, submit_time_s=100.0)),
             PendingJob(job("c1", gpus=2, tenant="c", priority=-1, submit_time_s=101.0)),
             PendingJob(job("a-low", gpus=2, tenant="a", priority=-1, submit_time_s=200.0)))
    first = ClusterSnapshot(time_s=5000.0, cluster=cluster, running=running, pending=queue)
    expected = list(schedule_cycle(first, NO_TRIES, incremental=False).waits.items())
    memory = SchedulerMemory()  # the cycles share it, as a body's do
    result = schedule_cycle(first, NO_TRIES, memory=memory)
    # The next cycle: r0 has ended, half the queue started or left, new jobs came (one of c's starts, so
    # c's share grows in the ledger the cycles share); the kept queue changed.
    later = (*queue[30:], *(PendingJob(j) for j in _queue(80)[60:]),
             PendingJob(job("c-urgent", gpus=2, tenant="c", priority=9, submit_time_s=5030.0)))
    second = schedule_cycle(replace(first, time_s=5060.0, running=running[1:], pending=later), NO_TRIES,
                            memory=memory)

    assert "c-urgent" in placed(second.actions)
    assert [job_id for job_id, _ in expected][:3] != [p.job.job_id for p in queue][:3]
    assert [job_id for job_id, _ in expected][-3:] == ["c0", "c1", "a-low"]
    assert list(result.waits.items()) == expected


def test_a_job_holding_nodes_is_decided_before_the_walk_stops() -> None:
    """A job whose victims were stopped holds their node: it starts there when reached, though every kind
    around it waits."""
    policy = SchedulerPolicy(preemption=PreemptionPolicy(min_runtime_s=0.0, grace_s=0.0, max_attempts_per_cycle=1),
                             backfill=BackfillPolicy(enabled=False))
    driver = Driver(make_cluster([(3, node_type(8), "d0")]), policy)
    driver.start_running(_busy("r0", "n0000", 7))
    driver.start_running(_busy("r1", "n0001", 7))
    driver.start_running(replace(_busy("low", "n0002", 8), job=job("low", gpus=8, priority=0, duration_s=99_999)))
    driver.submit(*[replace(j, priority=1) for j in _queue(40)], job("urgent", gpus=8, priority=9, submit_time_s=50.0))
    result = driver.cycle(auto_finish=False)

    assert "urgent" in placed(result.actions)
    assert all(w.reason is WaitReason.CAPACITY for w in result.waits.values())


KINDS = st.lists(st.tuples(st.sampled_from([0.5, 1, 2, 3, 4, 8]), st.sampled_from("abc"), st.integers(0, 2),
                           st.integers(1, 30), st.sampled_from([60, 600, 3600, 36_000])), min_size=1, max_size=6)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(kinds=KINDS, busy=st.lists(st.integers(0, 8), min_size=2, max_size=5), attempts=st.integers(0, 1),
       reservations=st.integers(0, 2), quota=st.sampled_from([0, 2, 8]), cycles=st.integers(1, 3))
def test_stopping_early_decides_as_every_job_on_its_own(kinds, busy, attempts, reservations, quota,  # noqa: ANN001
                                                         cycles) -> None:  # noqa: ANN001
    """Fragmented clusters (each node partly busy until a random end), queues of a few kinds with random
    durations: the Driver asserts the incremental cycle with its early stops decides as the plain one."""
    tenants = [Tenant(name, quota_gpus=quota) for name in "abc"]
    driver = Driver(make_cluster([(len(busy), node_type(8), "d0")], tenants), SchedulerPolicy(
        preemption=PreemptionPolicy(max_attempts_per_cycle=attempts, min_runtime_s=60.0, grace_s=120.0),
        backfill=BackfillPolicy(reservations=reservations)))
    for n, gpus in enumerate(busy):
        if gpus:
            driver.start_running(replace(_busy(f"r{n}", f"n{n:04d}", gpus, 600.0 * (n + 1)),
                                         job=job(f"r{n}", gpus=gpus, tenant="abc"[n % 3], duration_s=600.0 * (n + 1))))
    counter = 0
    for gpus, tenant, priority, count, duration_s in kinds:
        for i in range(count):
            counter += 1
            driver.submit(job(f"j{counter}", gpus=gpus, tenant=tenant, priority=priority,
                              duration_s=duration_s * (1 + i % 4), submit_time_s=float(counter)))
    for _ in range(cycles):
        driver.tick()


def test_a_job_waiting_for_its_victims_deep_in_the_queue_keeps_the_walk_going() -> None:
    """"held" waits for a victim still in its checkpoint grace, behind jobs that all must wait: the walk may not
    stop before it (it is decided on its own, and here a free GPU elsewhere takes it at once)."""
    policy = SchedulerPolicy(preemption=PreemptionPolicy(max_attempts_per_cycle=0, grace_s=600.0),
                             backfill=BackfillPolicy(enabled=False))
    driver = _fragmented(3)
    driver.snapshot = replace(driver.snapshot, time_s=1000.0)
    driver.policy = policy
    victim = RunningJob(job("victim", gpus=1, priority=0), (GpuSlot("n0002", 7),), start_time_s=0.0,
                        expected_end_s=99_999.0, preempt_signalled_s=900.0, preempted_for="held")
    driver.start_running(victim)
    driver.submit(*[replace(j, priority=5) for j in _queue(40)], job("held", gpus=1, priority=1, submit_time_s=0.0))
    result = driver.cycle(auto_finish=False)

    assert set(placed(result.actions)) == {"held"}
    assert len(result.waits) == 40 and {w.reason for w in result.waits.values()} == {WaitReason.CAPACITY}


def test_jobs_alike_to_one_waiting_for_a_wake_are_not_asked_again_while_attempts_are_left(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Behind sleeping nodes every job that fits them waits for a wake, before any preemption attempt or
    reservation is spent: a job alike to one that waits so (ending no earlier) waits so without being asked."""
    asked: list[str] = []
    consider = core._Cycle.consider

    def counting(self, item, models):  # noqa: ANN001, ANN202
        if self.shortcuts:
            asked.append(item.job.job_id)
        return consider(self, item, models)

    monkeypatch.setattr(core._Cycle, "consider", counting)
    driver = Driver(make_cluster([(4, node_type(8), "d0")]))  # the default policy: attempts and reservations
    for n in range(2):
        driver.start_running(_busy(f"r{n}", f"n{n:04d}", 8))
    driver.snapshot = replace(driver.snapshot, node_states={f"n{n:04d}": NodeState(PowerState.ASLEEP)
                                                            for n in (2, 3)})
    driver.submit(*_queue(200))
    result = driver.cycle(auto_finish=False)

    assert not placed(result.actions)
    # The first jobs get the sleeping nodes' room (the wake plan); the rest wait for capacity.
    assert WaitReason.WAKE in {w.reason for w in result.waits.values()} and len(result.waits) == 200
    assert len(asked) <= 8, len(asked)  # one per kind (four), not one per job


def test_a_shorter_job_alike_to_one_waiting_for_a_wake_still_backfills() -> None:
    """The wake a kind waits for is taken without asking only by jobs ending no earlier than the one asked: a
    shorter one may still fit before a reservation starts, and backfills."""
    driver = Driver(make_cluster([(2, node_type(8), "d0"), (1, node_type(4, name="small"), "d0")]))
    driver.start_running(_busy("r0", "n0000", 4, end_s=7200.0))  # n0000: 4 free GPUs, whole at 7200 s
    driver.start_running(_busy("r1", "n0001", 8, end_s=36_000.0))
    driver.snapshot = replace(driver.snapshot, node_states={"n0002": NodeState(PowerState.ASLEEP)})
    big = job("big", gpus=8, duration_s=3600, submit_time_s=1.0)  # no sleeping node holds it: it reserves n0000
    long_one = job("long", gpus=1, duration_s=9000, submit_time_s=2.0)  # ends after 7200 s: waits for n0002
    short_one = job("short", gpus=1, duration_s=3000, submit_time_s=3.0)  # ends before: backfills on n0000
    driver.submit(big, long_one, short_one)
    result = driver.cycle(auto_finish=False)

    assert result.waits["big"].reason is WaitReason.RESERVATION
    assert result.waits["long"].reason is WaitReason.WAKE
    assert {s.node for s in placed(result.actions)["short"].slots} == {"n0000"}


@pytest.fixture
def one_by_one(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The jobs the walk took from the kept queue's order one at a time (the rest it took a run at a time)."""
    from greengpu.sched.index_order import IndexOrder

    taken: list[str] = []
    step = IndexOrder.__next__

    def counting(self):  # noqa: ANN001, ANN202
        item = step(self)
        taken.append(item.job.job_id)
        return item

    monkeypatch.setattr(IndexOrder, "__next__", counting)
    return taken


def test_jobs_that_only_wait_are_taken_a_run_at_a_time_up_to_the_one_that_backfills(one_by_one: list[str]) -> None:
    """n0000 has 4 GPUs free until its job ends at 10,000 s, and the 8-GPU head of the queue reserves it from
    then. Tenant b's 4-GPU jobs could backfill it if they end by then: only `b-short` does. Tenant c's 6-GPU
    jobs wait whatever their length. Once the head has taken the one reservation, every job whose kind's wait
    is known is taken in runs, not one by one: `b-twin` (it ends with `b-first`, which was asked) and, after
    `c002` (the first of c's kind, asked on its own), every job up to `b-short` (c's as their kind, b's as the
    first b job's, which ended no later). `b-short` is asked, and still backfills."""
    policy = SchedulerPolicy(preemption=PreemptionPolicy(enabled=False), backfill=BackfillPolicy(reservations=1))
    driver = Driver(make_cluster([(2, node_type(8), "d0")]), policy)
    driver.start_running(_busy("r0", "n0000", 4, end_s=10_000.0))
    driver.start_running(_busy("r1", "n0001", 6))
    queue = [job("head", gpus=8, tenant="a", priority=1)]
    queue.append(job("b-first", gpus=4, tenant="b", duration_s=20_000, submit_time_s=1.0))
    queue.append(job("b-twin", gpus=4, tenant="b", duration_s=20_000, submit_time_s=1.5))  # ends with b-first
    for i in range(2, 200):  # b's and c's jobs, all too long or too big to backfill, in runs of ten
        tenant = "b" if i // 10 % 2 else "c"
        queue.append(job(f"{tenant}{i:03d}", gpus=4 if tenant == "b" else 6, tenant=tenant,
                         duration_s=30_000 + i, submit_time_s=float(i)))
    queue.append(job("b-short", gpus=4, tenant="b", duration_s=600, submit_time_s=300.0))
    driver.submit(*queue)
    result = driver.cycle(auto_finish=False)  # the Driver checks the same decisions without shortcuts

    assert set(placed(result.actions)) == {"b-short"}
    assert placed(result.actions)["b-short"].backfilled
    assert len(result.waits) == 201
    assert one_by_one == ["head", "b-first", "c002", "b-short"]


def test_borrowers_refused_everywhere_take_their_wait_from_their_standing(monkeypatch: pytest.MonkeyPatch) -> None:
    """Forty tenants with two GPUs of quota each on 10 nodes, 640 jobs waiting: once the tenants below quota
    have claims on every node with free GPUs, each borrower's job is given its wait from what its kind reads of its
    tenant and the shared "every free node is owed" answer (`refused_wait`), never asked as a kind. Over cycles
    with ends and arrivals the Driver checks every action and wait, in order, against a cycle without shortcuts."""
    from greengpu.sched.cycle.alike import AlikeWaits

    answered = {"refused": 0, "blocked": 0, "vouched": 0}
    original = AlikeWaits.refused_wait

    def counting(self, job, key, epoch):  # noqa: ANN001, ANN202
        wait = original(self, job, key, epoch)
        if wait is not None:
            answered["refused" if wait.reason is not WaitReason.QUOTA else "blocked"] += 1
        return wait

    monkeypatch.setattr(AlikeWaits, "refused_wait", counting)
    take_while = IndexOrder.take_while

    def counting_takes(self, wait_of, waits, taken, known=None):  # noqa: ANN001, ANN202
        asked = []

        def asking(entry):  # noqa: ANN001, ANN202
            wait = wait_of(entry)
            asked.append(wait is not None)
            return wait

        before = len(taken)
        take_while(self, asking, waits, taken, known)
        answered["vouched"] += len(taken) - before - sum(asked)

    monkeypatch.setattr(IndexOrder, "take_while", counting_takes)
    tenants = [Tenant(f"t{i:02d}", quota_gpus=2, weight=1 + i % 3) for i in range(40)]
    # Reclaim on (the lending rule applies), one victim search a cycle, no reservation.
    policy = SchedulerPolicy(preemption=PreemptionPolicy(max_attempts_per_cycle=1),
                             backfill=BackfillPolicy(enabled=False))
    driver = Driver(make_cluster([(10, node_type(8), "d0")], tenants), policy)
    sizes = [1, 1, 2, 4, 8]
    for wave in range(4):
        driver.submit(*(job(f"w{wave}-{i}", gpus=sizes[i % 5], tenant=f"t{i % 40:02d}", duration_s=300 + 97 * (i % 13),
                            priority=i % 2) for i in range(160)))
        driver.tick()
    for _ in range(6):
        driver.tick()
    # The path is taken, and decides as the reference does: the first job of a kind is answered by `refused_wait`,
    # the rest of its kind by the vouched wait while its tenant's usage and "every free node is owed" hold.
    assert answered["refused"] > 20
    assert answered["vouched"] > 100
    assert driver.finished and len(driver.started_at) > 40


@pytest.mark.parametrize(("tenants", "quota_share", "seed"), [(30, 0.3, 5), (100, 0.3, 2)])
def test_many_tenants_with_small_quotas_decide_as_the_reference(tenants: int, quota_share: float, seed: int) -> None:
    """Tenants whose quotas cover a fraction of the cluster, a deep queue and ends and arrivals between cycles:
    most tenants borrow, and the few whose own claimants are the smallest read another "every free node is owed"
    answer than the rest (`KeptClaims.owed_everywhere_by_most`). Every cycle, with the memory kept between them,
    decides as a cycle without shortcuts: the same actions, and the same waits in the same order."""
    import random

    from sched_workloads import JobStream, churn, half_full, uniform_pending
    from transitions import apply_scheduler_actions

    rng = random.Random(seed)
    nodes = 60 if tenants <= 30 else 200
    cluster = make_cluster([(nodes, node_type(8), "hall")],
                           [Tenant(f"t{i}", quota_gpus=nodes * 8 * quota_share / tenants, weight=1 + i % 4)
                            for i in range(tenants)])
    pending = 25 * nodes
    snap = ClusterSnapshot(time_s=0.0, cluster=cluster, running=half_full(cluster, rng, tenants),
                           pending=tuple(uniform_pending(rng, pending, tenants)))
    arrivals = JobStream(lambda count, start, _: uniform_pending(rng, count, tenants, start=start), pending)
    policy = SchedulerPolicy()
    memory = SchedulerMemory()
    for _ in range(5):
        fresh = schedule_cycle(snap, policy, incremental=False)
        kept = schedule_cycle(snap, policy, memory=memory)
        assert kept.actions == fresh.actions
        assert list(kept.waits.items()) == list(fresh.waits.items())
        assert kept.reservations == fresh.reservations and kept.withdrawn == fresh.withdrawn
        snap = churn(apply_scheduler_actions(snap, kept.actions), rng, arrivals)


def test_standings_kept_between_cycles_follow_the_nodes_that_could_wake(monkeypatch: pytest.MonkeyPatch) -> None:
    """What a kind reads of its tenant (`refused_wait`'s standing) and the waits vouched from it are kept in the books
    between cycles, stamped with the tenant's usage version. Whether a refused kind waits for capacity or for a node
    to wake is not in that stamp: when nodes fall asleep, wake or stay the same between cycles, every cycle with the
    memory kept decides as one without shortcuts, waits and their order included."""
    import random

    from sched_workloads import JobStream, churn, half_full, uniform_pending
    from transitions import apply_scheduler_actions

    from greengpu.sched.cycle.alike import AlikeWaits

    read = [0]
    standing_of = AlikeWaits._standing_of

    def counting(self, *args):  # noqa: ANN001, ANN002, ANN202
        read[0] += 1
        return standing_of(self, *args)

    monkeypatch.setattr(AlikeWaits, "_standing_of", counting)
    rng = random.Random(3)
    tenants, nodes = 100, 200
    cluster = make_cluster([(nodes, node_type(8), "hall")],
                           [Tenant(f"t{i}", quota_gpus=nodes * 8 * 0.3 / tenants, weight=1 + i % 4)
                            for i in range(tenants)])
    snap = ClusterSnapshot(time_s=0.0, cluster=cluster, running=half_full(cluster, rng, tenants),
                           pending=tuple(uniform_pending(rng, 25 * nodes, tenants)))
    arrivals = JobStream(lambda count, start, _: uniform_pending(rng, count, tenants, start=start), 25 * nodes)
    policy = SchedulerPolicy()
    memory = SchedulerMemory()
    wakes = 0
    reads = []
    # No node states, then idle nodes asleep (the same ones twice: the kept standings hold), then awake again.
    for asleep in ((), (1, 3, 5), (1, 3, 5), (7,), ()):
        read[0] = 0
        busy = {slot.node for running in snap.running for slot in running.slots}
        names = [f"n{n:04d}" for n in asleep]
        snap = replace(snap, node_states={name: NodeState(PowerState.ASLEEP) for name in names if name not in busy})
        fresh = schedule_cycle(snap, policy, incremental=False)
        read[0] = 0
        kept = schedule_cycle(snap, policy, memory=memory)
        reads.append(read[0])
        assert kept.actions == fresh.actions
        assert list(kept.waits.items()) == list(fresh.waits.items())
        wakes += sum(wait.reason is WaitReason.WAKE for wait in kept.waits.values())
        snap = churn(apply_scheduler_actions(snap, kept.actions), rng, arrivals)
        snap = replace(snap, node_states={})
    assert wakes > 0  # sleeping nodes did change some waits
    # With the same sleeping nodes the standings are kept: only kinds whose tenant's usage moved are read again.
    assert reads[2] < reads[1] / 2, reads
