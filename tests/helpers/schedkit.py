"""Builders for clusters, jobs and snapshots, and a small driver that runs scheduling cycles.

The driver is a faithful miniature body: it applies actions through the same transitions the
simulator uses, finishes jobs when their time is up, and checks every invariant after each cycle.
"""

from __future__ import annotations

from dataclasses import replace

from transitions import apply_scheduler_actions

from greengpu.model import (
    Action,
    Cluster,
    ClusterSnapshot,
    Job,
    Node,
    NodeType,
    PendingJob,
    PlaceJob,
    RunningJob,
    Site,
    Tenant,
)
from greengpu.policy import SchedulerPolicy
from greengpu.sched.core import CycleResult, SchedulerMemory, schedule_cycle
from greengpu.sched.invariants import check_invariants
from greengpu.sched.waits import distinct_of


def node_type(gpus: int = 8, model: str = "A100", name: str | None = None, memory_gb: float = 80.0) -> NodeType:
    return NodeType(name=name or f"{model.lower()}x{gpus}", gpus=gpus, gpu_model=model, gpu_idle_w=50,
                    gpu_max_w=400, gpu_min_limit_w=100, host_idle_w=400, host_sleep_w=8, boot_s=180,
                    gpu_memory_gb=memory_gb)


def make_cluster(groups: list[tuple[int, NodeType, str]], tenants: list[Tenant] | None = None,
                 prefix: str = "n") -> Cluster:
    """groups: (count, node type, domain)."""
    nodes: list[Node] = []
    types: dict[str, NodeType] = {}
    for count, ntype, domain in groups:
        types[ntype.name] = ntype
        for _ in range(count):
            nodes.append(Node(name=f"{prefix}{len(nodes):04d}", type_name=ntype.name, domain=domain))
    return Cluster(site=Site(), node_types=types, nodes=tuple(nodes),
                   tenants={t.name: t for t in (tenants or [])})


def job(job_id: str, gpus: float = 1, tenant: str = "t", duration_s: float = 3600, priority: int = 0,
        submit_time_s: float = 0.0, **kwargs: object) -> Job:
    return Job(job_id=job_id, tenant=tenant, gpus=gpus, duration_s=duration_s, priority=priority,
               submit_time_s=submit_time_s, **kwargs)  # type: ignore[arg-type]


def placed(actions: tuple[Action, ...]) -> dict[str, PlaceJob]:
    return {a.job_id: a for a in actions if isinstance(a, PlaceJob)}


class Driver:
    """Runs cycles: finish due jobs, schedule, apply, check invariants."""

    def __init__(self, cluster: Cluster, policy: SchedulerPolicy | None = None, interval_s: float = 60.0,
                 cross_check: bool = True) -> None:
        self.cross_check = cross_check
        self.policy = policy or SchedulerPolicy()
        self.interval_s = interval_s
        self.snapshot = ClusterSnapshot(time_s=0.0, cluster=cluster)
        self.memory = SchedulerMemory()
        """The scheduler's memory between this driver's cycles, as a body keeps it (greengpu.sched.memory)."""
        self.history: list[CycleResult] = []
        self.started_at: dict[str, float] = {}
        self.finished: list[str] = []

    @property
    def now_s(self) -> float:
        return self.snapshot.time_s

    def running(self) -> dict[str, RunningJob]:
        return {r.job.job_id: r for r in self.snapshot.running}

    def pending_ids(self) -> set[str]:
        return {p.job.job_id for p in self.snapshot.pending}

    def submit(self, *jobs: Job) -> None:
        stamped = [PendingJob(j if j.submit_time_s else replace(j, submit_time_s=self.now_s)) for j in jobs]
        self.snapshot = replace(self.snapshot, pending=(*self.snapshot.pending, *stamped))

    def start_running(self, running: RunningJob) -> None:
        self.snapshot = replace(self.snapshot, running=(*self.snapshot.running, running))

    def finish(self, *job_ids: str) -> None:
        gone = set(job_ids)
        self.finished.extend(job_ids)
        self.snapshot = replace(self.snapshot, running=tuple(r for r in self.snapshot.running
                                                             if r.job.job_id not in gone))

    def cycle(self, auto_finish: bool = True) -> CycleResult:
        if auto_finish:
            due = [r.job.job_id for r in self.snapshot.running if r.expected_end_s <= self.now_s]
            self.finish(*due)
        if self.cross_check:
            # The remembered, difference-updated books must decide exactly as books built afresh.
            fresh = schedule_cycle(self.snapshot, self.policy, self.interval_s, incremental=False)
        result = schedule_cycle(self.snapshot, self.policy, self.interval_s, memory=self.memory)
        if self.cross_check:
            assert result.actions == fresh.actions
            assert dict(result.waiting) == dict(fresh.waiting)
            assert dict(result.waits) == dict(fresh.waits)  # typed: reason, models, nodes in the way
            assert list(result.waits) == list(fresh.waits)  # in the same order (bodies act on waits in order)
            # The distinct waits the levers read (kept per kind of job on a full cycle) are those of the jobs.
            assert {id(w) for w in distinct_of(result.waits)} == {id(w) for w in dict(result.waits).values()}
            assert result.reservations == fresh.reservations and result.withdrawn == fresh.withdrawn
        assert not placed(result.actions).keys() & result.waits.keys()  # a job placed does not wait
        self.snapshot = apply_scheduler_actions(self.snapshot, result.actions)
        for action in result.actions:
            if isinstance(action, PlaceJob):
                self.started_at[action.job_id] = self.now_s
        problems = check_invariants(self.snapshot)
        assert problems == [], problems
        self.history.append(result)
        return result

    def advance(self, seconds: float | None = None) -> None:
        self.snapshot = replace(self.snapshot, time_s=self.now_s + (seconds or self.interval_s))

    def tick(self, auto_finish: bool = True) -> CycleResult:
        """Advance one interval, then run a cycle."""
        self.advance()
        return self.cycle(auto_finish)
