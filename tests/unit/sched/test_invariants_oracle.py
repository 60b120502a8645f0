"""check_invariants is an independent oracle: quota limits recomputed by hand, not by the scheduler's ledger.

The quota part of the invariants once ran on the same `QuotaLedger` the scheduler admits jobs with, so
a doubled borrowing limit in the ledger let a tenant hold twice what it may, and the check agreed.
These tests pin the limits from first principles and show the oracle catching that planted bug.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from schedkit import job, make_cluster, node_type, placed
from transitions import apply_scheduler_actions

from greengpu.model import GPU_UNITS, ClusterSnapshot, GpuSlot, PendingJob, RunningJob, Tenant
from greengpu.policy import SchedulerPolicy
from greengpu.sched import invariants
from greengpu.sched.core import schedule_cycle
from greengpu.sched.invariants import check_invariants
from greengpu.sched.quota import QuotaLedger

A100x8 = node_type(8)


def holding(job_id: str, tenant: str, node: str, gpus: list[int], units: int = GPU_UNITS) -> RunningJob:
    share = units / GPU_UNITS
    return RunningJob(job=job(job_id, gpus=share * len(gpus) if units == GPU_UNITS else share, tenant=tenant),
                      slots=tuple(GpuSlot(node, g, units) for g in gpus), start_time_s=0, expected_end_s=3600)


def snapshot_of(tenants: list[Tenant], *running: RunningJob, groups: list | None = None) -> ClusterSnapshot:
    cluster = make_cluster(groups or [(2, A100x8, "r")], tenants)
    return ClusterSnapshot(time_s=0, cluster=cluster, running=running)


def test_the_oracle_imports_nothing_from_the_scheduler() -> None:
    source = Path(invariants.__file__).read_text()
    imported = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module:
            imported.add(node.module)
        elif isinstance(node, ast.Import):
            imported.update(alias.name for alias in node.names)
    assert imported, "the parse found no imports at all: the check would pass vacuously"
    assert not {m for m in imported if m.startswith("greengpu.sched")}, imported


def test_a_tenant_at_quota_plus_borrowing_is_fine_and_one_gpu_more_is_not() -> None:
    tenants = [Tenant("a", quota_gpus=2, borrow_limit_gpus=4)]
    at_limit = snapshot_of(tenants, holding("j1", "a", "n0000", [0, 1, 2, 3, 4, 5]))
    assert check_invariants(at_limit) == []
    over = snapshot_of(tenants, holding("j1", "a", "n0000", [0, 1, 2, 3, 4, 5]), holding("j2", "a", "n0001", [0]))
    assert check_invariants(over) == ["tenant a holds 7 GPUs on *, above quota plus borrowing 6"]


def test_quota_zero_and_borrow_limit_four_allows_four_gpus_not_eight() -> None:
    tenants = [Tenant("a", quota_gpus=0, borrow_limit_gpus=4)]
    four = snapshot_of(tenants, holding("j1", "a", "n0000", [0, 1, 2, 3]))
    eight = snapshot_of(tenants, holding("j1", "a", "n0000", [0, 1, 2, 3]), holding("j2", "a", "n0001", [0, 1, 2, 3]))
    assert check_invariants(four) == []
    assert check_invariants(eight) == ["tenant a holds 8 GPUs on *, above quota plus borrowing 4"]


def test_fractional_shares_count_to_the_milli_gpu() -> None:
    tenants = [Tenant("a", quota_gpus=1, borrow_limit_gpus=0.5)]
    fits = snapshot_of(tenants, holding("j1", "a", "n0000", [0]), holding("f1", "a", "n0000", [1], units=500))
    assert check_invariants(fits) == []
    over = snapshot_of(tenants, holding("j1", "a", "n0000", [0]), holding("f1", "a", "n0000", [1], units=500),
                       holding("f2", "a", "n0000", [2], units=250))
    assert check_invariants(over) == ["tenant a holds 1.75 GPUs on *, above quota plus borrowing 1.5"]


def test_per_model_quotas_are_checked_per_model() -> None:
    groups = [(1, node_type(8, "A100"), "r"), (1, node_type(8, "V100"), "r")]
    tenants = [Tenant("a", quota_gpus=100, quota_gpus_by_model={"V100": 2}, borrow_limit_gpus=1)]
    # 3 V100 = 2 nominal + 1 borrowed; 1 A100 = 0 nominal (no A100 quota) + 1 borrowed: both at the limit.
    fine = snapshot_of(tenants, holding("v", "a", "n0001", [0, 1, 2]), holding("x", "a", "n0000", [0]),
                       groups=groups)
    assert check_invariants(fine) == []
    # quota_gpus=100 does not apply once per-model quotas are given: a second A100 is over.
    over = snapshot_of(tenants, holding("v", "a", "n0001", [0, 1, 2]), holding("x", "a", "n0000", [0, 1]),
                       groups=groups)
    assert check_invariants(over) == ["tenant a holds 2 GPUs on A100, above quota plus borrowing 1"]


def test_tenants_without_a_borrowing_limit_and_unlisted_tenants_have_no_limit_to_break() -> None:
    tenants = [Tenant("free", quota_gpus=0, borrow_limit_gpus=None)]
    snapshot = snapshot_of(tenants, holding("f", "free", "n0000", list(range(8))),
                           holding("u", "unlisted", "n0001", list(range(8))))
    assert check_invariants(snapshot) == []


def test_two_tenants_are_judged_each_against_their_own_limits() -> None:
    tenants = [Tenant("a", quota_gpus=4, borrow_limit_gpus=0), Tenant("b", quota_gpus=1, borrow_limit_gpus=2)]
    snapshot = snapshot_of(tenants, holding("a1", "a", "n0000", [0, 1, 2, 3, 4]),
                           holding("b1", "b", "n0001", [0, 1, 2]))
    assert check_invariants(snapshot) == ["tenant a holds 5 GPUs on *, above quota plus borrowing 4"]


def test_structural_invariants_each_give_their_own_message() -> None:
    cluster = make_cluster([(1, node_type(2), "r")])
    gang = RunningJob(job=job("g", gpus=2), slots=(GpuSlot("n0000", 0),), start_time_s=0, expected_end_s=1)
    ghost = RunningJob(job=job("x", gpus=1), slots=(GpuSlot("n0000", 5),), start_time_s=0, expected_end_s=1)
    twice = RunningJob(job=job("t", gpus=2), slots=(GpuSlot("n0000", 1), GpuSlot("n0000", 1)),
                       start_time_s=0, expected_end_s=1)
    bad_share = RunningJob(job=job("s", gpus=1), slots=(GpuSlot("n0000", 1, 0), GpuSlot("n0000", 0, 1000)),
                           start_time_s=0, expected_end_s=1)
    problems = check_invariants(ClusterSnapshot(time_s=0, cluster=cluster, running=(gang, ghost, twice, bad_share)))
    assert problems == [
        "partial gang: g holds 1 of 2 GPUs",
        "x holds a GPU that does not exist: n0000:5",
        "t holds n0000:1 twice",
        "s holds an impossible share 0 on n0000",
        "over-committed GPU n0000:0: 2 GPUs allocated",
        "over-committed GPU n0000:1: 2 GPUs allocated",
    ]


def test_work_on_a_node_that_is_not_awake_is_reported() -> None:
    from greengpu.model import NodeState, PowerState

    cluster = make_cluster([(2, A100x8, "r")])
    snapshot = ClusterSnapshot(time_s=0, cluster=cluster, running=(holding("j", "t", "n0001", [0]),),
                               node_states={"n0001": NodeState(PowerState.SUSPENDING)})
    assert check_invariants(snapshot) == ["j runs on n0001, which is suspending"]


# --------------------------------------------------------------------------- the planted bug

def _borrowing_snapshot() -> ClusterSnapshot:
    cluster = make_cluster([(2, A100x8, "r")], [Tenant("a", quota_gpus=0, borrow_limit_gpus=4)])
    pending = tuple(PendingJob(job(f"j{i}", tenant="a", gpus=1)) for i in range(8))
    return ClusterSnapshot(time_s=0, cluster=cluster, pending=pending)


def test_a_tenant_with_quota_zero_and_borrow_limit_four_gets_four_gpus() -> None:
    snapshot = _borrowing_snapshot()
    result = schedule_cycle(snapshot, SchedulerPolicy(), incremental=False)
    assert sorted(placed(result.actions)) == ["j0", "j1", "j2", "j3"]
    assert check_invariants(apply_scheduler_actions(snapshot, result.actions)) == []


def test_the_oracle_catches_a_doubled_borrowing_limit_in_the_ledger(monkeypatch: pytest.MonkeyPatch) -> None:
    original = QuotaLedger.limit_units

    def doubled(self: QuotaLedger, tenant: Tenant, key: str) -> float:
        limit = original(self, tenant, key)
        return limit + tenant.borrow_limit_gpus * GPU_UNITS if tenant.borrow_limit_gpus is not None else limit

    monkeypatch.setattr(QuotaLedger, "limit_units", doubled)
    snapshot = _borrowing_snapshot()
    result = schedule_cycle(snapshot, SchedulerPolicy(), incremental=False)
    assert len(placed(result.actions)) == 8  # the planted bug lets the scheduler over-admit ...
    after = apply_scheduler_actions(snapshot, result.actions)
    # ... and the oracle, which never asks the ledger, says so.
    assert check_invariants(after) == ["tenant a holds 8 GPUs on *, above quota plus borrowing 4"]


def test_edges_of_the_structural_checks() -> None:
    cluster = make_cluster([(1, node_type(2), "r")], [Tenant("q", quota_gpus=0, borrow_limit_gpus=1)])
    # GPU index 2 on a 2-GPU node does not exist; a slot on an unknown node neither. After a bad slot
    # the job's other slots are still checked and counted: b's GPU 0 is over-committed with c's.
    b = RunningJob(job=job("b", gpus=3, tenant="q"),
                   slots=(GpuSlot("n0000", 2), GpuSlot("ghost", 0), GpuSlot("n0000", 0), GpuSlot("n0000", 1)),
                   start_time_s=0, expected_end_s=1)
    c = RunningJob(job=job("c", gpus=0.001, tenant="open"), slots=(GpuSlot("n0000", 0, 1),),  # 1 milli-GPU is fine
                   start_time_s=0, expected_end_s=1)
    problems = check_invariants(ClusterSnapshot(time_s=0, cluster=cluster, running=(b, c)))
    assert problems == [
        "partial gang: b holds 4 of 3 GPUs",
        "b holds a GPU that does not exist: n0000:2",
        "b holds a GPU that does not exist: ghost:0",
        "over-committed GPU n0000:0: 1.001 GPUs allocated",
        # q may hold 0 + 1 GPUs: the two real GPUs count, the ones that do not exist do not.
        "tenant q holds 2 GPUs on *, above quota plus borrowing 1",
    ]


def test_a_tenant_without_a_limit_does_not_hide_the_next_tenants_violation() -> None:
    tenants = [Tenant("a", quota_gpus=0), Tenant("b", quota_gpus=0, borrow_limit_gpus=1)]
    snapshot = snapshot_of(tenants, holding("a1", "a", "n0000", [0, 1, 2]), holding("b1", "b", "n0001", [0, 1]))
    assert check_invariants(snapshot) == ["tenant b holds 2 GPUs on *, above quota plus borrowing 1"]
