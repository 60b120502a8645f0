"""The victim search's shortcuts decide as the full search does: a search's set (or that it found none) is
remembered for claimants alike only while nothing it read has changed (quota ledger and free GPUs, jobs asked to
stop, excluded nodes), a reclaim judged not worth its cost is never remembered (the verdict reads the
claimant's own submit time), and a search that can take nobody ends at once."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from schedkit import job, make_cluster, node_type

from greengpu.model import ClusterSnapshot, GpuSlot, PendingJob, RunningJob, Tenant
from greengpu.policy import PreemptionPolicy
from greengpu.sched.preemption import VictimFinder
from greengpu.sched.quota import QuotaLedger
from greengpu.sched.state import PlacementState

NOW_S = 10_000.0
TWO_NODES = make_cluster([(2, node_type(8), "r")])


def one_gpu_jobs(priorities: dict[str, int], node: str = "n0000", tenant: str = "t") -> list[RunningJob]:
    """One-GPU jobs filling GPUs 0, 1, ... of `node` in the order given, started 3000 s ago."""
    return [RunningJob(job(job_id, gpus=1, priority=priority, tenant=tenant), (GpuSlot(node, gpu),),
                       NOW_S - 3000.0, NOW_S + 50_000.0)
            for gpu, (job_id, priority) in enumerate(priorities.items())]


def books(cluster: Any, running: list[RunningJob]) -> tuple[PlacementState, QuotaLedger]:
    snapshot = ClusterSnapshot(time_s=NOW_S, cluster=cluster, running=tuple(running))
    ledger = QuotaLedger(cluster, {n.name: "A100" for n in cluster.nodes}, {}, False)
    for running_job in running:
        ledger.charge(running_job)
    return PlacementState(snapshot), ledger


def count_searches(finder: VictimFinder, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The claimants the full search (not its memo) runs for, as they come."""
    searched: list[str] = []
    original: Callable[..., Any] = finder.cheapest._fitting_set

    def spy(pending: PendingJob, *args: Any) -> Any:
        searched.append(pending.job.job_id)
        return original(pending, *args)

    monkeypatch.setattr(finder.cheapest, "_fitting_set", spy)
    return searched


def crowded_node() -> tuple[PlacementState, QuotaLedger, list[RunningJob]]:
    """n0000: six priority-5 jobs and two priority-0 jobs; n0001 full of priority-5 jobs. A priority-5 claimant
    of 3 GPUs finds two victims, one short."""
    high = {f"h{g}": 5 for g in range(6)}
    running = one_gpu_jobs({**high, "low0": 0, "low1": 0}) + \
        one_gpu_jobs({f"k{g}": 5 for g in range(8)}, node="n0001")
    state, ledger = books(TWO_NODES, running)
    return state, ledger, running


def claimant(job_id: str, gpus: int = 3, **fields: Any) -> PendingJob:
    return PendingJob(job(job_id, gpus=gpus, priority=5, tenant="t", **fields))


def test_a_failed_search_answers_claimants_alike_until_a_job_ends(monkeypatch: pytest.MonkeyPatch) -> None:
    state, ledger, running = crowded_node()
    finder = VictimFinder(state, ledger, PreemptionPolicy(min_runtime_s=0), NOW_S, running)
    searched = count_searches(finder, monkeypatch)
    assert finder.find(claimant("a"), set()) is None
    assert finder.find(claimant("b"), set()) is None
    assert searched == ["a"]  # b asks what a asked, on the same books
    # A job unlike them (4 GPUs) is searched for on its own.
    assert finder.find(claimant("c", gpus=4), set()) is None
    assert searched == ["a", "c"]
    # One of n0000's priority-5 jobs ends: its GPU and the two low jobs are now enough.
    ended = running[0]
    state.release(ended.slots)
    ledger.charge(ended, -1)
    choice = finder.find(claimant("d"), set())
    assert choice is not None and sorted(v.job.job_id for v in choice.victims) == ["low0", "low1"]
    assert searched == ["a", "c", "d"]


def test_a_failed_search_is_asked_again_when_a_job_is_asked_to_stop_or_the_nodes_excluded_differ(
        monkeypatch: pytest.MonkeyPatch) -> None:
    state, ledger, running = crowded_node()
    finder = VictimFinder(state, ledger, PreemptionPolicy(min_runtime_s=0), NOW_S, running)
    searched = count_searches(finder, monkeypatch)
    assert finder.find(claimant("a"), set()) is None
    assert finder.find(claimant("b"), {1}) is None  # n0001 held for another job: another question
    finder.stopping.add("low0")
    assert finder.find(claimant("c"), set()) is None
    assert searched == ["a", "b", "c"]


def test_without_shortcuts_every_search_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    state, ledger, running = crowded_node()
    finder = VictimFinder(state, ledger, PreemptionPolicy(min_runtime_s=0), NOW_S, running, memo_searches=False)
    searched = count_searches(finder, monkeypatch)
    assert finder.find(claimant("a"), set()) is None
    assert finder.find(claimant("b"), set()) is None
    assert searched == ["a", "b"]


def test_a_search_that_can_take_nobody_ends_before_searching(monkeypatch: pytest.MonkeyPatch) -> None:
    # Everyone runs at priority 5 and no tenant has a quota to reclaim: a priority-5 claimant takes nobody.
    running = one_gpu_jobs({f"h{g}": 5 for g in range(8)})
    state, ledger = books(TWO_NODES, running)
    finder = VictimFinder(state, ledger, PreemptionPolicy(min_runtime_s=0), NOW_S, running)
    searched = count_searches(finder, monkeypatch)
    assert finder.find(claimant("a", gpus=8), set()) is None
    assert searched == []
    # One job at priority 4 on another tenant's books: the search runs, and its job alone would not do.
    running = running[:7] + one_gpu_jobs({"low": 4}, tenant="u")
    running[-1] = RunningJob(running[-1].job, (GpuSlot("n0000", 7),), NOW_S - 3000.0, NOW_S + 50_000.0)
    state, ledger = books(TWO_NODES, running)
    finder = VictimFinder(state, ledger, PreemptionPolicy(min_runtime_s=0), NOW_S, running)
    searched = count_searches(finder, monkeypatch)
    assert finder.find(claimant("b", gpus=8), set()) is None  # n0000 holds 7 GPUs of priority 5
    assert searched == ["b"]
    one = finder.find(claimant("c", gpus=1), {1})  # (n0001, free, held for another job)
    assert one is not None and [v.job.job_id for v in one.victims] == ["low"]


def test_a_reclaim_not_worth_its_cost_for_one_claimant_is_weighed_again_for_the_next(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # "owner" has 4 GPUs of quota and uses none; "borrower" fills n0000 with one 4-GPU job that has run an
    # hour without a checkpoint and ends in 10 minutes.
    cluster = make_cluster([(1, node_type(4), "r")], [Tenant("owner", quota_gpus=4), Tenant("borrower")])
    borrowed = RunningJob(job("borrowed", gpus=4, tenant="borrower"), tuple(GpuSlot("n0000", g) for g in range(4)),
                          NOW_S - 3600.0, NOW_S + 600.0)
    state, ledger = books(cluster, [borrowed])
    finder = VictimFinder(state, ledger, PreemptionPolicy(min_runtime_s=0, grace_s=60.0), NOW_S, [borrowed])
    searched = count_searches(finder, monkeypatch)
    # Just arrived: stopping 4 GPU-hours of work to start 9 minutes sooner does not pay.
    fresh = PendingJob(job("fresh", gpus=1, tenant="owner", submit_time_s=NOW_S))
    assert finder.find(fresh, set()) is None
    # Alike in everything but its submit time, from before the victim started: the quota guarantee says it
    # reclaims at once.
    waiting = PendingJob(job("waiting", gpus=1, tenant="owner", submit_time_s=NOW_S - 7200.0))
    choice = finder.find(waiting, set())
    assert choice is not None and [v.job.job_id for v in choice.victims] == ["borrowed"]
    assert searched == ["fresh"]  # the set found for "fresh" is the one weighed for "waiting"
    # A GPU is now promised to "owner": what the search reads changed, so a third claimant alike is searched
    # for again.
    finder.find(PendingJob(job("third", gpus=1, tenant="owner", submit_time_s=NOW_S - 7200.0)), set())
    assert searched == ["fresh", "third"]
