"""The last day's arrivals, which the warm reserve's share of use follows (greengpu.sleep.arrivals)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from schedkit import make_cluster, node_type

from greengpu.model import ClusterSnapshot, GpuSlot, Job, PendingJob, RunningJob
from greengpu.policy import SleepPolicy
from greengpu.sleep.arrivals import ARRIVAL_WINDOW_S, RecentArrivals
from greengpu.sleep.suspends import warm_reserve_target_gpus

T0 = 1_700_000_000.0
DAY = ARRIVAL_WINDOW_S


def job(job_id: str, gpus: int, submit_s: float) -> Job:
    return Job(job_id=job_id, tenant="t", gpus=gpus, duration_s=3600, submit_time_s=submit_s)


def test_arrivals_count_for_a_day_once_each() -> None:
    arrivals = RecentArrivals()
    arrivals.add(job("a", 8, T0))
    arrivals.add(job("b", 2, T0 + 3600))
    arrivals.add(job("a", 8, T0))  # the same job noted again (a requeue, a second snapshot): counted once
    assert arrivals.gpus(T0 + 3600) == 10
    assert arrivals.gpus(T0 + DAY - 1) == 10
    assert arrivals.gpus(T0 + DAY) == 2  # a's day is over
    assert arrivals.gpus(T0 + 3600 + DAY) == 0


def test_a_daemon_notes_the_jobs_of_its_snapshots_that_arrived_within_the_day() -> None:
    arrivals = RecentArrivals()
    old = job("old", 64, T0 - DAY - 10)  # running since before the window: no arrival of today
    fresh = job("fresh", 4, T0 - 600)
    arrivals.note_seen(T0, [old, fresh])
    arrivals.note_seen(T0 + 60, [old, fresh, job("next", 1, T0 + 30)])  # seen again: once
    assert arrivals.gpus(T0 + 60) == 5
    assert arrivals.gpus(T0 + DAY - 600) == 1


def test_the_reserve_follows_use_only_as_far_as_work_arrives() -> None:
    policy = SleepPolicy(enabled=True, warm_reserve_gpus=2, warm_reserve_busy_fraction=0.5)
    assert warm_reserve_target_gpus(policy, 100) == 50  # not known: use alone, as before
    assert warm_reserve_target_gpus(policy, 100, arrived_gpus=300) == 50
    assert warm_reserve_target_gpus(policy, 100, arrived_gpus=21) == 10  # floor(0.5 x 21)
    assert warm_reserve_target_gpus(policy, 100, arrived_gpus=0) == 2  # draining: the fixed floor stays
    forecasting = SleepPolicy(enabled=True, warm_reserve_busy_fraction=0.5, use_forecast=True)
    assert warm_reserve_target_gpus(forecasting, 100, forecast_headroom_gpus=7, arrived_gpus=0) == 7


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3 * int(DAY)), st.integers(1, 64), st.integers(0, 30)), max_size=60),
       st.integers(0, 4 * int(DAY)))
def test_in_order_arrivals_sum_what_a_fresh_count_gives(events: list[tuple[int, int, int]], probe_s: int) -> None:
    arrivals = RecentArrivals()
    first: dict[str, tuple[float, int]] = {}
    for time_s, gpus, ident in sorted(events):
        name = f"j{ident}"
        arrivals.add(job(name, gpus, T0 + time_s))
        first.setdefault(name, (T0 + time_s, gpus))
    last_s = max((t for t, _, _ in events), default=0)
    now_s = T0 + max(probe_s, last_s)
    expected = sum(g for t, g in first.values() if t > now_s - DAY)
    assert arrivals.gpus(now_s) == expected


def test_an_arrival_noted_at_its_own_time_is_forgotten_a_day_after_that_time() -> None:
    arrivals = RecentArrivals()
    arrivals.add(job("late", 4, T0 - DAY), time_s=T0)  # a replay notes the job when it arrives, not its stamp
    assert arrivals.gpus(T0 + DAY - 1) == 4
    assert arrivals.gpus(T0 + DAY) == 0


def test_jobs_submitted_a_day_ago_or_earlier_are_no_arrival_even_when_never_seen() -> None:
    arrivals = RecentArrivals()
    arrivals.note_seen(T0, [job("edge", 8, T0 - DAY), job("older", 16, T0 - 2 * DAY), job("in", 1, T0 - DAY + 1)])
    assert arrivals.gpus(T0) == 1


def test_a_forgotten_job_no_longer_takes_memory_and_counts_again_if_it_comes_back() -> None:
    """The set of job ids seen shrinks with the window (a daemon runs for months); an id noted again after
    its day is over (a resource manager reusing ids) is a new arrival."""
    arrivals = RecentArrivals()
    arrivals.add(job("j1", 2, T0))
    assert arrivals.gpus(T0 + DAY) == 0
    arrivals.add(job("j1", 2, T0 + DAY + 5))
    assert arrivals.gpus(T0 + DAY + 5) == 2


def test_a_snapshot_notes_its_running_and_pending_jobs_that_arrived_within_the_day() -> None:
    cluster = make_cluster([(2, node_type(8), "r")])
    running = tuple(RunningJob(j, (GpuSlot("n0", 0),), start_time_s=T0 - 100, expected_end_s=T0 + 3600)
                    for j in (job("ran-long", 1, T0 - 2 * DAY), job("ran-today", 1, T0 - 3600)))
    pending = (PendingJob(job("waits", 8, T0 - 60)), PendingJob(job("waits-since-last-week", 4, T0 - 7 * DAY)))
    arrivals = RecentArrivals()
    arrivals.note_snapshot(T0, ClusterSnapshot(time_s=T0, cluster=cluster, running=running, pending=pending))
    assert arrivals.gpus(T0) == 9
