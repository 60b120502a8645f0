"""Queue order by hand: priority with whole age-boost steps, then live weighted fair share, then age."""

from __future__ import annotations

import pytest
from schedkit import job

from greengpu.model import PendingJob
from greengpu.policy import SchedulerPolicy
from greengpu.sched.order import decay_usage, effective_priority, fair_share, queue_order

HOUR_S = 3600.0


def pending(job_id: str, tenant: str = "t", priority: int = 0, submit_time_s: float = 0.0) -> PendingJob:
    return PendingJob(job(job_id, tenant=tenant, priority=priority, submit_time_s=submit_time_s))


def test_the_age_boost_counts_whole_steps_and_stops_at_its_cap() -> None:
    policy = SchedulerPolicy(age_boost_per_hour=2.0, age_boost_max=5.0)
    assert effective_priority(pending("a", priority=3), 0.0, policy) == 3
    assert effective_priority(pending("a", priority=3), 1799.0, policy) == 3  # 0.999 steps: none yet
    assert effective_priority(pending("a", priority=3), 1800.0, policy) == 4  # half an hour at 2 per hour
    assert effective_priority(pending("a", priority=3), 10 * HOUR_S, policy) == 8  # 20 steps, capped at 5
    assert effective_priority(pending("a", priority=3, submit_time_s=90_000.0), 0.0, policy) == 3  # not yet waiting
    every_second = SchedulerPolicy(age_boost_per_hour=3600.0, age_boost_max=100.0)
    assert effective_priority(pending("a", priority=3, submit_time_s=50.0), 50.0, every_second) == 3
    assert effective_priority(pending("a", priority=3, submit_time_s=50.0), 51.0, every_second) == 4


def test_fair_share_is_allocated_plus_weighted_usage_over_weight() -> None:
    assert fair_share(4000, 0.0, 2.0, 0.5) == 2.0  # 4 GPUs / weight 2
    assert fair_share(4000, 7200.0, 2.0, 0.5) == 2.5  # (4 + 0.5 x 2 GPU-hours) / 2
    assert fair_share(0, 0.0, 1.0, 0.0) == 0.0


def test_usage_decays_by_its_half_life_and_grows_with_what_runs() -> None:
    assert decay_usage(1000.0, 0.0, 3600.0, 3600.0) == 500.0
    assert decay_usage(1000.0, 2.0, 7200.0, 3600.0) == 250.0 + 14_400.0
    assert decay_usage(0.0, 4.0, 10.0, 3600.0) == 40.0


def test_higher_priority_first_then_fair_share_then_age() -> None:
    policy = SchedulerPolicy(age_boost_per_hour=0.0)
    jobs = [pending("a-old", "a", submit_time_s=0.0), pending("a-new", "a", submit_time_s=10.0),
            pending("b-old", "b", submit_time_s=5.0), pending("urgent", "c", priority=5, submit_time_s=20.0)]
    shares = {"a": 1.0, "b": 2.0, "c": 9.0}
    order = [p.job.job_id for p in queue_order(jobs, 100.0, policy, shares.__getitem__)]
    # urgent first (priority); then a before b (a's share is lower), a's jobs oldest first; b's share is
    # read again after each admission but a's stays lower here.
    assert order == ["urgent", "a-old", "a-new", "b-old"]


def test_fair_share_is_read_live_between_admissions() -> None:
    policy = SchedulerPolicy(age_boost_per_hour=0.0)
    jobs = [pending(f"a{i}", "a", submit_time_s=float(i)) for i in range(3)] + \
           [pending(f"b{i}", "b", submit_time_s=10.0 + i) for i in range(3)]
    shares = {"a": 0.0, "b": 1.5}

    def share_of(tenant: str) -> float:
        return shares[tenant]

    order = []
    for item in queue_order(jobs, 100.0, policy, share_of):
        order.append(item.job.job_id)
        shares[item.job.tenant] += 1.0  # as the core does after admitting one GPU
    # a (0) -> a at 1 < b 1.5 -> a again; now a at 2 > b 1.5 -> b; b at 2.5 > a 2 -> a; then b, b.
    assert order == ["a0", "a1", "b0", "a2", "b1", "b2"]


def test_equal_shares_go_to_the_tenant_whose_head_job_waited_longest() -> None:
    policy = SchedulerPolicy(age_boost_per_hour=0.0)
    jobs = [pending("b1", "b", submit_time_s=5.0), pending("a1", "a", submit_time_s=9.0)]
    assert [p.job.job_id for p in queue_order(jobs, 100.0, policy, lambda t: 1.0)] == ["b1", "a1"]


@pytest.mark.parametrize(("now_s", "first"), [
    (0.0, "fresh"), (1799.0, "fresh"),
    (1800.0, "fresh"),  # boost 1: priority 1 < 2
    (3600.0, "old"),  # boost 2: equal priority, equal shares, the older job first
    (5 * HOUR_S, "old"), (100 * HOUR_S, "old"),  # boost capped at 5 > 2
])
def test_an_old_job_overtakes_a_fresh_one_once_its_boost_catches_up(now_s: float, first: str) -> None:
    policy = SchedulerPolicy(age_boost_per_hour=2.0, age_boost_max=5.0)
    old = pending("old", "a", priority=0, submit_time_s=0.0)
    fresh = pending("fresh", "b", priority=2, submit_time_s=now_s)
    assert next(iter(queue_order([fresh, old], now_s, policy, lambda t: 0.0))).job.job_id == first


def test_a_job_submitted_later_than_now_earns_no_negative_boost() -> None:
    policy = SchedulerPolicy(age_boost_per_hour=2.0, age_boost_max=5.0)
    early = pending("early", "a", priority=1, submit_time_s=10 * HOUR_S)  # clocks disagree: not yet submitted
    now = pending("now", "b", priority=0, submit_time_s=0.0)
    order = [p.job.job_id for p in queue_order([now, early], 0.0, policy, lambda t: 0.0)]
    assert order == ["early", "now"]


def test_the_boost_counts_a_step_the_moment_it_is_earned_and_stops_at_the_cap() -> None:
    policy = SchedulerPolicy(age_boost_per_hour=2.0, age_boost_max=5.0)
    # After exactly half an hour the old job has earned 1 step: equal to the fresh job's priority 1, and older.
    old, fresh = pending("old", "a", priority=0, submit_time_s=0.0), pending("fresh", "b", priority=1,
                                                                             submit_time_s=1800.0)
    assert [p.job.job_id for p in queue_order([fresh, old], 1800.0, policy, lambda t: 0.0)] == ["old", "fresh"]
    # After 100 hours it has 5 (the cap), not 200: a job of priority 6 still goes first.
    top = pending("top", "b", priority=6, submit_time_s=100 * HOUR_S)
    assert [p.job.job_id for p in queue_order([old, top], 100 * HOUR_S, policy, lambda t: 0.0)] == ["top", "old"]


def test_a_fractional_cap_is_reached_in_whole_steps_as_effective_priority_says() -> None:
    # age_boost_max 2.5 at 1 step an hour: after 2.7 hours the old job has 2 whole steps (not the cap 2.5), so it
    # ties a fresh priority-2 job, which goes first on its tenant's lower share; after 3 hours it has the cap.
    policy = SchedulerPolicy(age_boost_per_hour=1.0, age_boost_max=2.5)
    old = pending("old", "x", priority=0, submit_time_s=0.0)
    shares = {"x": 1.0, "y": 0.0}
    for now_s, boost, first in ((2.7 * HOUR_S, 2, "fresh"), (3 * HOUR_S, 2.5, "old")):
        fresh = pending("fresh", "y", priority=2, submit_time_s=now_s)
        assert effective_priority(old, now_s, policy) == boost
        assert next(queue_order([fresh, old], now_s, policy, shares.__getitem__)).job.job_id == first
