"""The pending queue kept between cycles (greengpu.sched.pending_index) stands exactly for the snapshot.

Arrivals, starts (jobs leaving anywhere), requeues (a new object for a job id), reorderings and a
repeated object: after each, the index brought up to date by differences equals one built afresh, its
lazy queue order equals `queue_order` (with fair shares that change as jobs are taken), and its
backfill-short prefixes equal a walk over every job.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from greengpu.model import Job, PendingJob
from greengpu.policy import SchedulerPolicy
from greengpu.sched.claimants import ClaimantFinder
from greengpu.sched.core import alike_key
from greengpu.sched.order import queue_order
from greengpu.sched.pending_index import PendingIndex
from greengpu.sched.waits import Wait, WaitReason


def capacity_wait(job: Job) -> Wait:
    return Wait(WaitReason.CAPACITY, job.tenant, ("A100",), int(job.gpus))


def make_job(number: int, tenant: str, priority: int, submit_s: float, duration_s: float, gpus: int) -> PendingJob:
    return PendingJob(Job(f"j{number}", tenant, float(gpus), duration_s, submit_time_s=submit_s, priority=priority))


JOBS = st.builds(lambda t, p, s, d, g: (t, p, s, d, g), st.sampled_from("abc"), st.integers(0, 2),
                 st.sampled_from([0.0, 600.0, 3600.0, 3601.0, 7200.0, 36000.0]),
                 st.sampled_from([60.0, 600.0, 3600.0, 86400.0]), st.sampled_from([1, 2, 8]))

STEPS = st.lists(st.one_of(
    st.tuples(st.just("arrive"), st.lists(JOBS, min_size=1, max_size=6)),
    st.tuples(st.just("leave"), st.lists(st.integers(0, 50), min_size=1, max_size=4)),
    st.tuples(st.just("requeue"), st.integers(0, 50)),
    st.tuples(st.just("shuffle"), st.randoms(use_true_random=False)),
    st.tuples(st.just("same"), st.just(0)),
), min_size=1, max_size=25)


def fresh(pending: tuple[PendingJob, ...]) -> PendingIndex:
    index = PendingIndex(alike_key)
    assert index.sync(pending, capacity_wait)
    return index


def assert_same(index: PendingIndex, pending: tuple[PendingJob, ...], now_s: float) -> None:
    built = fresh(pending)
    assert index.by_priority == built.by_priority
    assert index.by_kind == built.by_kind
    assert index.by_job_id == built.by_job_id
    assert set(index.by_obj) == {id(p) for p in pending}
    assert {t: set(kinds) for t, kinds in index.kinds_of_tenant.items()} == \
        {t: set(kinds) for t, kinds in built.kinds_of_tenant.items()}
    assert {t: set(levels) for t, levels in index.levels_of_tenant.items()} == \
        {t: set(levels) for t, levels in built.levels_of_tenant.items()}
    # Claimants from the queue's kept smallest and oldest jobs are those found afresh, whatever has started.
    for gone in (set(), {p.job.job_id for p in pending[::3]}):
        tenants = {p.job.tenant for p in pending if p.job.job_id in gone}
        kept_finder = ClaimantFinder(index, gone, ("A100",), lambda job, model: True, tenants)
        fresh_finder = ClaimantFinder(fresh(pending), gone, ("A100",), lambda job, model: True, tenants)
        for tenant in "abcd":
            assert kept_finder.profile_of(tenant) == fresh_finder.profile_of(tenant)
    policy = SchedulerPolicy(age_boost_per_hour=1.0, age_boost_max=2.0)
    # Fair shares read live: a tenant's share grows with each of its jobs taken, as admissions do.
    for name, run in (("lazy", index.ordered), ("sorted", None)):
        taken: dict[str, int] = {}

        def share_of(tenant: str, taken: dict[str, int] = taken) -> float:
            return taken.get(tenant, 0) / {"a": 1.0, "b": 2.0, "c": 0.5}[tenant]

        order = []
        source = run(now_s, policy, share_of) if run is not None else queue_order(pending, now_s, policy, share_of)
        for item in source:
            order.append(item.job.job_id)
            taken[item.job.tenant] = taken.get(item.job.tenant, 0) + 1
        if name == "lazy":
            lazy = order
    assert lazy == order
    latest_s = now_s + 3600.0
    short = {e[1] for _, entries, count in index.short_enough(now_s, latest_s) for e in entries[:count]}
    assert short == {p.job.job_id for p in pending if now_s + p.job.duration_s <= latest_s}
    # One capacity wait per kind of job (the core's are one object per kind; these compare by value).
    assert set(index.kind_waits(lambda job_id: False)) == {capacity_wait(p.job) for p in pending}
    some = {p.job.job_id for p in pending[::2]}
    assert set(index.kind_waits(some.__contains__)) == {capacity_wait(p.job) for p in pending[1::2]}
    # Each kind's first `covered` jobs (shortest first) are left out too.
    half = {kind: len(entries) // 2 for kind, entries in index.by_kind.items()}
    rest = {e[1] for kind, entries in index.by_kind.items() for e in entries[half[kind]:]}
    assert set(index.kind_waits(lambda job_id: False, half)) == {capacity_wait(p.job) for p in pending
                                                                  if p.job.job_id in rest}


@settings(max_examples=150, deadline=None)
@given(steps=STEPS, now_s=st.sampled_from([3600.0, 7200.0, 40000.0]))
def test_the_kept_queue_equals_a_fresh_one_after_every_change(steps, now_s) -> None:  # noqa: ANN001
    index = PendingIndex(alike_key)
    pending: list[PendingJob] = []
    counter = 0
    for step, value in steps:
        if step == "arrive":
            for tenant, priority, submit_s, duration_s, gpus in value:
                counter += 1
                pending.append(make_job(counter, tenant, priority, submit_s, duration_s, gpus))
        elif step == "leave" and pending:
            for position in sorted({v % len(pending) for v in value}, reverse=True):
                del pending[position]
        elif step == "requeue" and pending:
            gone = pending.pop(value % len(pending))
            pending.append(PendingJob(gone.job))  # the same job back as a new object, at the end
        elif step == "shuffle":
            value.shuffle(pending)
        snapshot = tuple(pending)
        assert index.sync(snapshot, capacity_wait)
        assert_same(index, snapshot, now_s)
        assert_same(index, snapshot, now_s)  # a second read finds the smallest and oldest jobs the first kept


def test_the_same_object_twice_is_refused_and_the_next_snapshot_rebuilds() -> None:
    first = make_job(1, "a", 0, 0.0, 60.0, 1)
    second = make_job(2, "b", 0, 0.0, 60.0, 1)
    index = PendingIndex(alike_key)
    assert index.sync((first, second), capacity_wait)
    assert not index.sync((first, second, first), capacity_wait)
    assert index.sync((second,), capacity_wait)
    assert_same(index, (second,), 100.0)


def test_a_requeued_job_in_place_of_its_old_object_is_replaced() -> None:
    old = make_job(1, "a", 0, 0.0, 60.0, 1)
    other = make_job(2, "a", 0, 10.0, 60.0, 1)
    index = PendingIndex(alike_key)
    assert index.sync((old, other), capacity_wait)
    again = PendingJob(old.job)
    assert index.sync((again, other), capacity_wait)
    assert index.by_job_id["j1"] is again
    assert_same(index, (again, other), 100.0)


@settings(max_examples=150, deadline=None)
@given(jobs=st.lists(JOBS, min_size=1, max_size=30), now_s=st.sampled_from([3600.0, 7200.0, 40000.0]),
       choices=st.lists(st.tuples(st.booleans(), st.integers(0, 30), st.booleans()), min_size=60, max_size=60))
def test_jobs_taken_while_they_wait_come_in_queue_order(jobs, now_s, choices) -> None:  # noqa: ANN001
    """The core takes the jobs it gives their kind's wait without asking them (`take_while`), and the rest one at
    a time, some of which start (raising their tenant's share): the jobs come in queue_order's order, and
    `take_while` stops before the first job it is given no wait for, leaving it to come next."""
    pending = tuple(make_job(n, *values) for n, values in enumerate(jobs))
    index = fresh(pending)
    policy = SchedulerPolicy(age_boost_per_hour=1.0, age_boost_max=2.0)
    weights = {"a": 1.0, "b": 2.0, "c": 0.5}
    taken: dict[str, int] = {}
    started: set[str] = set()

    def share_of(tenant: str) -> float:
        return taken.get(tenant, 0) / weights[tenant]

    order = index.ordered(now_s, policy, share_of)
    walked: list[str] = []
    waits: dict[str, object] = {}
    for by_take, count, starts in choices:
        if by_take:
            asked: list[str] = []

            def wait_of(entry: tuple[float, str, PendingJob], asked: list[str] = asked, count: int = count) -> object:
                asked.append(entry[1])
                return "waits" if len(asked) <= count else None

            taken_now: list[PendingJob] = []
            order.take_while(wait_of, waits, taken_now)
            walked.extend(item.job.job_id for item in taken_now)
            assert [item.job.job_id for item in taken_now] == asked[:count]
            assert all(waits[item.job.job_id] == "waits" for item in taken_now)
            if len(asked) > count:  # stopped before a job: it comes next
                job = next(order).job
                assert job.job_id == asked[count]
                walked.append(job.job_id)
        else:
            job = next(order, None)
            if job is None:
                break
            walked.append(job.job.job_id)
            if starts:
                started.add(job.job.job_id)
                taken[job.job.tenant] = taken.get(job.job.tenant, 0) + 1
    walked.extend(item.job.job_id for item in order)  # the rest, one at a time, none starting
    assert sorted(walked) == sorted(p.job.job_id for p in pending)
    taken.clear()
    expected = []
    for item in queue_order(pending, now_s, policy, share_of):
        expected.append(item.job.job_id)
        if item.job.job_id in started:
            taken[item.job.tenant] = taken.get(item.job.tenant, 0) + 1
    assert walked == expected


def test_the_kept_order_among_some_jobs_is_their_queue_order() -> None:
    pending = tuple(make_job(n, t, p, s, 60.0, 1) for n, (t, p, s) in
                    enumerate([("a", 1, 0.0), ("b", 1, 600.0), ("a", 0, 0.0), ("c", 1, 7200.0), ("b", 2, 3600.0)]))
    index = fresh(pending)
    policy = SchedulerPolicy(age_boost_per_hour=1.0, age_boost_max=2.0)
    among = {"j0", "j2", "j3"}

    def share_of(tenant: str) -> float:
        return 0.0

    lazy = [p.job.job_id for p in index.ordered(7200.0, policy, share_of, among=among)]
    assert lazy == [p.job.job_id for p in queue_order([p for p in pending if p.job.job_id in among], 7200.0,
                                                      policy, share_of)]
    assert sorted(lazy) == sorted(among)
