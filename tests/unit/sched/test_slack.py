"""A lever may spend slack, never queue time: the core's typed waits decide which caps lift and which
nodes stay awake (greengpu.sched.slack), on saturated toy clusters."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st
from schedkit import job, make_cluster, node_type

from greengpu.model import Cluster, ClusterSnapshot, GpuSlot, PendingJob, PowerState, RunningJob, Tenant
from greengpu.policy import BackfillPolicy, SchedulerPolicy, SleepPolicy
from greengpu.sched.core import WAIT_CAPACITY, WAIT_QUOTA, CycleResult, schedule_cycle
from greengpu.sched.memory import SchedulerMemory
from greengpu.sched.slack import _GUARDS_KEPT, NO_WAIT, QueueGuard, queue_guard
from greengpu.sched.waits import Wait, WaitReason
from greengpu.sleep.suspends import NodeView, plan_suspends

X8 = node_type(8)
X4 = node_type(4, name="a100x4")
H8 = node_type(8, model="H100")


def running(job_id: str, node: str, gpus: int, tenant: str = "t", end_s: float = 36_000.0) -> RunningJob:
    return RunningJob(job=job(job_id, gpus=gpus, tenant=tenant, duration_s=end_s),
                      slots=tuple(GpuSlot(node, g) for g in range(gpus)), start_time_s=0.0, expected_end_s=end_s)


def run_cycle(cluster: Cluster, jobs_running: list[RunningJob], pending: list[object],
              policy: SchedulerPolicy | None = None) -> CycleResult:
    snapshot = ClusterSnapshot(time_s=600.0, cluster=cluster, running=tuple(jobs_running),
                               pending=tuple(PendingJob(j) for j in pending))  # type: ignore[arg-type]
    policy = policy or SchedulerPolicy()
    result = schedule_cycle(snapshot, policy, incremental=False)
    remembered = schedule_cycle(snapshot, policy, incremental=True, purpose="test-slack")
    assert dict(remembered.waits) == dict(result.waits)  # typed waits are part of the same decision
    return result


def test_a_job_waiting_for_its_tenants_own_jobs_lifts_the_caps_on_those_jobs_only() -> None:
    # Tenant "a" may not borrow: at its 8-GPU quota, its next job waits although n0002 is free.
    cluster = make_cluster([(3, X8, "r")], tenants=[Tenant("a", quota_gpus=8, borrow_limit_gpus=0),
                                                    Tenant("b", quota_gpus=16)])
    jobs_running = [running("a1", "n0000", 4, "a"), running("a2", "n0000", 4, "a"), running("b1", "n0001", 8, "b")]
    result = run_cycle(cluster, jobs_running, [job("a3", gpus=2, tenant="a")])
    assert result.waits["a3"].reason is WaitReason.QUOTA
    assert result.waiting["a3"].startswith(f"{WAIT_QUOTA}: ")  # the JSON text is unchanged
    guard = queue_guard(result.waits, cluster)
    assert guard.uncapped_jobs(jobs_running, cluster) == {"a1", "a2"}  # their ends let it start; b1's would not
    assert guard.keep_awake == frozenset()  # an extra node would not start it: n0002 may sleep


def test_a_gang_that_cannot_assemble_lifts_the_caps_on_the_jobs_that_free_its_nodes() -> None:
    # A 16-GPU gang needs two whole 8-GPU nodes; 4-GPU nodes cannot hold a piece of it.
    cluster = make_cluster([(3, X8, "r"), (2, X4, "r")])
    jobs_running = [running("x", "n0000", 8), running("y", "n0001", 4), running("z", "n0002", 8),
                    running("small", "n0003", 4)]
    no_reservations = SchedulerPolicy(backfill=BackfillPolicy(enabled=False))
    result = run_cycle(cluster, jobs_running, [job("gang", gpus=16)], no_reservations)
    wait = result.waits["gang"]
    assert wait.reason is WaitReason.GANG and result.waiting["gang"] == WAIT_CAPACITY
    guard = queue_guard(result.waits, cluster)
    assert guard.uncapped_jobs(jobs_running, cluster) == {"x", "y", "z"}
    assert guard.keep_awake == {"n0000", "n0001", "n0002"}  # n0004 (4 GPUs, idle) may sleep


def test_a_reserved_gang_lifts_the_caps_on_the_reserved_nodes_jobs() -> None:
    cluster = make_cluster([(3, X8, "r")])
    jobs_running = [running("soon", "n0000", 8, end_s=1_200.0), running("late", "n0001", 8, end_s=90_000.0),
                    running("half", "n0002", 4, end_s=80_000.0)]
    result = run_cycle(cluster, jobs_running, [job("gang", gpus=16)])
    wait = result.waits["gang"]
    assert wait.reason is WaitReason.RESERVATION
    assert wait.nodes == {"n0000", "n0002"}  # n0000 frees first, n0002 next: the reservation's nodes
    guard = queue_guard(result.waits, cluster)
    assert guard.uncapped_jobs(jobs_running, cluster) == {"soon", "half"}  # "late" is on no node the gang waits for


def test_no_node_sleeps_while_a_job_waits_that_it_could_serve() -> None:
    # The waiting job wants H100s; the idle A100 node may sleep, the idle H100 node may not.
    cluster = make_cluster([(1, X8, "r"), (2, H8, "r")])
    jobs_running = [running("h", "n0001", 8)]
    wanted = job("wants-h100", gpus=8, gpu_types=frozenset({"H100"}))
    blocker = job("blocker", gpus=8, gpu_types=frozenset({"H100"}))
    # n0002 is idle but held for nothing: make the waiting job wait by filling it first in the queue.
    result = run_cycle(cluster, jobs_running, [blocker, wanted])
    assert result.waits["wants-h100"].capacity_bound
    guard = queue_guard(result.waits, cluster)
    assert "n0001" in guard.keep_awake and "n0002" in guard.keep_awake and "n0000" not in guard.keep_awake
    policy = SleepPolicy(enabled=True, idle_timeout_s=300, min_awake_s=0, warm_reserve_gpus=0,
                         priority_aware=True)
    idle = [NodeView(name, 8, PowerState.AWAKE, -10_000.0, False, 0.0) for name in ("n0000", "n0002")]
    chosen = plan_suspends(3_600.0, idle, policy, blocked_pending=True, suspends_last_minute=0,
                           keep_awake=guard.keep_awake)
    assert [s.node for s in chosen] == ["n0000"]
    # A body that only knows "something waits for capacity" keeps every node awake (fail safe).
    assert plan_suspends(3_600.0, idle, policy, blocked_pending=True, suspends_last_minute=0) == []
    # Without priority awareness (the idle-timeout baseline) the rule does not apply.
    plain = SleepPolicy(enabled=True, idle_timeout_s=300, min_awake_s=0, priority_aware=False)
    assert len(plan_suspends(3_600.0, idle, plain, blocked_pending=True, suspends_last_minute=0,
                             keep_awake=guard.keep_awake)) == 2


def test_capacity_waits_of_one_gpu_jobs_keep_every_usable_node_in_their_way() -> None:
    cluster = make_cluster([(2, X8, "r")])
    jobs_running = [running("a", "n0000", 8), running("b", "n0001", 8)]
    result = run_cycle(cluster, jobs_running, [job(f"w{i}", gpus=1) for i in range(3)])
    assert {w.reason for w in result.waits.values()} <= {WaitReason.CAPACITY, WaitReason.RESERVATION}
    guard = queue_guard(result.waits, cluster)
    assert guard.uncapped_jobs(jobs_running, cluster) == {"a", "b"} and guard.keep_awake == {"n0000", "n0001"}


def test_nothing_waits_nothing_is_lifted() -> None:
    cluster = make_cluster([(2, X8, "r")])
    jobs_running = [running("a", "n0000", 8)]
    result = run_cycle(cluster, jobs_running, [job("fits", gpus=4)])
    assert result.waits == {}
    guard = queue_guard(result.waits, cluster)
    assert not guard.queue_waits and guard.uncapped_jobs(jobs_running, cluster) == frozenset()


def test_a_job_no_gpu_model_can_hold_blocks_no_lever() -> None:
    cluster = make_cluster([(1, X8, "r")])
    jobs_running = [running("a", "n0000", 8)]
    result = run_cycle(cluster, jobs_running, [job("tpu", gpus=1, gpu_types=frozenset({"TPU"}))])
    assert result.waits["tpu"].reason is WaitReason.NO_MODEL
    assert not queue_guard(result.waits, cluster).queue_waits



def test_the_typed_reasons_that_block_the_levers_are_those_whose_text_says_capacity_or_wake() -> None:
    """`work_waiting` reads the typed reason; the JSON outputs' words must say the same thing."""
    from greengpu.sched.waits import Wait, WaitReason
    from greengpu.sleep.work_waiting import LEVER_BLOCKED_REASONS, LEVER_BLOCKED_WAITS

    for reason in WaitReason:
        for detail in ("", "tenant t at its quota"):
            wait = Wait(reason, "t", detail=detail)
            assert (wait.text in LEVER_BLOCKED_REASONS) == (reason in LEVER_BLOCKED_WAITS), (reason, detail)
    assert WaitReason.GANG in LEVER_BLOCKED_WAITS and WaitReason.QUOTA not in LEVER_BLOCKED_WAITS


def _guard_by_the_rule(waits: list[Wait], cluster: Cluster) -> QueueGuard:
    """The module docstring's rule, written out job by job (no memo, no dedup)."""
    size = {n.name: cluster.node_types[n.type_name].gpus for n in cluster.nodes}
    model = {n.name: cluster.node_types[n.type_name].gpu_model for n in cluster.nodes}

    def shaped(wait: Wait) -> set[str]:
        return {name for name in size if model[name] in wait.models and size[name] >= wait.node_gpus}

    blocked: set[str] = set()
    awake: set[str] = set()
    quota: set[tuple[str, str]] = set()
    for wait in waits:
        if wait.reason is WaitReason.QUOTA:
            quota |= {(wait.tenant, m) for m in wait.models}
        elif wait.reason in (WaitReason.CAPACITY, WaitReason.GANG, WaitReason.WAKE):
            blocked |= shaped(wait)
            awake |= shaped(wait)
        elif wait.reason is WaitReason.RESERVATION:
            blocked |= wait.nodes
            awake |= shaped(wait)
    if not waits:
        return NO_WAIT
    return QueueGuard(frozenset(blocked), frozenset(quota), frozenset(awake), len(blocked) == len(size))


_GUARD_CLUSTER = make_cluster([(2, X8, "r"), (2, X4, "r"), (1, H8, "r")])
_WAIT_POOL = [
    Wait(WaitReason.CAPACITY, "a", ("A100",), 1),
    Wait(WaitReason.GANG, "b", ("A100",), 8),
    Wait(WaitReason.WAKE, "a", ("H100",), 4),
    Wait(WaitReason.QUOTA, "c", ("A100", "H100"), 1, detail="tenant at its quota plus borrowing limit"),
    Wait(WaitReason.RESERVATION, "a", ("A100",), 4, nodes=frozenset({"n0002"})),
    Wait(WaitReason.RESERVATION, "a", ("A100",), 4, nodes=frozenset({"n0000", "n0001"})),
    Wait(WaitReason.PREEMPTING, "b", ("A100",), 8, nodes=frozenset({"n0001"})),
    Wait(WaitReason.NO_MODEL, "d"),
    Wait(WaitReason.CAPACITY, "a", ("A100", "H100"), 1),
]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(st.tuples(st.integers(0, len(_WAIT_POOL) - 1), st.booleans()), max_size=6),
                min_size=1, max_size=12))
def test_a_guard_remembered_between_cycles_is_always_the_one_its_waits_give(
        cycles: list[list[tuple[int, bool]]]) -> None:
    """`queue_guard` keeps guards by the Wait objects they came from (the core shares them between cycles):
    cycle after cycle, with the same objects again, some of them, or new objects alike, each guard is the one
    the rule gives for that cycle's waits."""
    memory = SchedulerMemory()
    for cycle in cycles:
        # A fresh object alike (as a new cycle's memo might make) or the pooled one.
        waits = [replace(_WAIT_POOL[i]) if fresh else _WAIT_POOL[i] for i, fresh in cycle]
        by_job = {f"j{position}": wait for position, wait in enumerate(waits)}
        guard = queue_guard(by_job, _GUARD_CLUSTER, memory)
        assert guard == _guard_by_the_rule(waits, _GUARD_CLUSTER)
        # The same objects again (the next cycle of a queue whose kinds wait as before): the guard kept.
        assert queue_guard(dict(reversed(by_job.items())), _GUARD_CLUSTER, memory) is guard
        assert queue_guard(by_job, _GUARD_CLUSTER) == guard  # without a memory: the same guard, found again


def test_guards_are_right_after_more_distinct_waits_than_are_kept() -> None:
    reservations = [Wait(WaitReason.RESERVATION, "a", ("A100",), 4, nodes=frozenset({f"n000{i % 4}"}))
                    for i in range(3 * _GUARDS_KEPT)]
    memory = SchedulerMemory()
    for wait in reservations:
        assert queue_guard({"j": wait}, _GUARD_CLUSTER, memory).blocked_nodes == wait.nodes
    assert memory.shapes is not None and len(memory.shapes.guards) <= _GUARDS_KEPT
    first = reservations[0]
    assert queue_guard({"j": first, "k": _WAIT_POOL[0]}, _GUARD_CLUSTER, memory) == \
        _guard_by_the_rule([first, _WAIT_POOL[0]], _GUARD_CLUSTER)
