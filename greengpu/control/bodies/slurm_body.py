"""The daemon's Slurm body: the cluster as `squeue --json` and `sinfo --json` show it, sleep and wake
through `scontrol update ... state=POWER_DOWN|POWER_UP`.

Slurm schedules its own jobs: the daemon reads them (account as tenant, QOS as priority, the GPUs each
running job holds per node from `gres_detail`, what each pending job asks for from `tres_per_node`)
so that the core can say which work waits and which sleeping nodes it needs, and greengpu decides
sleep with Slurm's own idle timer off for the nodes it manages (docs/DAEMON.md). Slurm still resumes
nodes for the jobs it schedules, through greengpu's ResumeProgram. Capping stays with the node agents.
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from typing import Any

import hostlist

from greengpu.backends import slurm
from greengpu.backends.slurm_config import SuspendExclusions, read_exclusions
from greengpu.brain.capacity_choice import ChooseCapacity
from greengpu.brain.control_tick import TickAction
from greengpu.control.bodies.body import ActionFailed, AgentsOwnTheGpus, Observation
from greengpu.control.bodies.checkpoint_marks import checkpoint_in_comment
from greengpu.control.bodies.slurm_nodes import fault_reason, node_features, node_partitions, node_power
from greengpu.control.cloud.spot_steer import SlurmCapacity, steer, steerable
from greengpu.json_types import JsonObject, JsonValue
from greengpu.model import (
    JOB_CLASSES,
    Cluster,
    ClusterSnapshot,
    GpuSlot,
    Job,
    Node,
    NodeState,
    PendingJob,
    PowerState,
    RunningJob,
    SleepNode,
    WakeNode,
)
from greengpu.sched.node_rules import node_allows
from greengpu.sleep.sleep_wake import SleepObservation
from greengpu.sleep.suspends import NodeView, idle_draw_w
from greengpu.sleep.work_waiting import gpus_in_use
from greengpu.slurm_json import QOS_PRIORITY, gpus_asked, job_states, json_number, node_constraints

log = logging.getLogger(__name__)

CLASS_COMMENT = re.compile(r"greengpu\.class=(\w+)")
GPU_IDX = re.compile(r"^gpu(?::[^:(]+)?:(\d+)\(IDX:([^)]*)\)")
DEFAULT_DURATION_S = 3600.0
"""A pending job's run time when it has no time limit (what the core's backfill and wake plans assume)."""
EXCLUSIONS_TTL_S = 300.0
"""How long SuspendExcNodes/SuspendExcParts as read from `scontrol show config` are used before asking again."""


def _indices(spec: str) -> list[int]:
    """`0-1,3` -> [0, 1, 3]."""
    out: list[int] = []
    for part in filter(None, spec.split(",")):
        low, _, high = part.partition("-")
        out.extend(range(int(low), int(high or low) + 1))
    return out


def _class(record: JsonObject) -> str:
    found = CLASS_COMMENT.search(str(record.get("comment") or ""))
    return found.group(1) if found and found.group(1) in JOB_CLASSES else "training"


def _job(record: JsonObject, gpus: float, per_node: int | None) -> Job:
    limit_min = json_number(record.get("time_limit"))
    duration_s = limit_min * 60.0 if limit_min is not None and limit_min > 0 else DEFAULT_DURATION_S
    return Job(job_id=str(record["job_id"]), tenant=str(record.get("account") or "default"), gpus=gpus,
               duration_s=duration_s, submit_time_s=json_number(record.get("submit_time")) or 0.0,
               priority=QOS_PRIORITY.get(str(record.get("qos") or "").lower(), 0), job_class=_class(record),
               gpus_per_node=per_node)


def parse_jobs(text: str, known: set[str], problems: list[str] | None = None, now_s: float = math.inf,
               ) -> tuple[list[RunningJob], list[PendingJob]]:
    """`squeue --json` -> running GPU jobs (with their GPU indices per node) and pending GPU jobs, with the
    nodes they may use (`-w`, `-x`, `--constraint`, `-p`, `--exclusive`: greengpu.slurm_json.node_constraints).

    Jobs without GPUs are left out (greengpu manages GPU nodes; a CPU job on a GPU node still keeps it
    from sleeping, which `sinfo`'s node state says). A pending job whose constraints do not parse is taken as
    unconstrained (it may wake a node it cannot use, never keep one asleep it needs) and said in `problems`.
    A running job's `greengpu.io/last-checkpoint=T` comment mark is its last checkpoint
    (greengpu.control.bodies.checkpoint_marks; none later than `now_s` plus a minute).
    """
    running: list[RunningJob] = []
    pending: list[PendingJob] = []
    jobs = slurm.json_reply(text, "squeue --json").get("jobs") or []
    if not isinstance(jobs, list):
        raise slurm.SlurmError("squeue --json: no list of jobs")
    for record in jobs:
        states = job_states(record)
        if "RUNNING" in states:
            nodes = hostlist.expand_hostlist(record.get("nodes") or "")
            slots: list[GpuSlot] = []
            for node, detail in zip(nodes, record.get("gres_detail") or [], strict=False):
                found = GPU_IDX.match(detail)
                if found and node in known:
                    slots.extend(GpuSlot(node, index) for index in _indices(found.group(2)))
            if slots:
                job = _job(record, len(slots), None)
                start_s = json_number(record.get("start_time")) or 0.0
                running.append(RunningJob(job=job, slots=tuple(slots), start_time_s=start_s,
                                          expected_end_s=start_s + job.duration_s,
                                          last_checkpoint_s=checkpoint_in_comment(record.get("comment"), now_s)))
        elif "PENDING" in states:
            asked = gpus_asked(record)  # per node times the node count, or per job (Slurm 23: gres/gpu=N)
            if asked is not None:
                job = _job(record, asked[0], asked[1])
                try:
                    constraints = node_constraints(record)
                except ValueError as error:
                    constraints = {}
                    if problems is not None:
                        problems.append(f"job {job.job_id}: {error}; taken as unconstrained")
                pending.append(PendingJob(replace(job, **constraints) if constraints else job))
    return running, pending


CONSTRAINT_FIELDS = ("required_nodes", "excluded_nodes", "features", "partitions")


def bare_constraints(job: Job, nodes: Iterable[Node]) -> Job:
    """`job` without the constraints that bar none of `nodes` (every Slurm job names a partition; one that all the
    managed nodes are in changes nothing, and a job without constraints keeps the core's fast path)."""
    if job.node_rule is None:
        return job
    nodes = tuple(nodes)
    loose: dict[str, Any] = {}
    for name in CONSTRAINT_FIELDS:
        value = getattr(job, name)
        if value is None:
            continue
        alone = Job(job_id=job.job_id, tenant=job.tenant, gpus=job.gpus, duration_s=job.duration_s, **{name: value})
        if all(node_allows(node, alone) for node in nodes):
            loose[name] = None
    return replace(job, **loose) if loose else job


def awake_since_s(record: Mapping[str, JsonValue] | None, now_s: float) -> float:
    """When a node came up, as Slurm reports it: its `boot_time` (slurmd's registration after a boot, so a
    node resumed from power save counts from its wake), never later than now; 0.0 where Slurm does not say
    (then `min_awake_s` is taken as long passed, as before)."""
    boot_s = json_number(record.get("boot_time")) if record is not None else None
    if boot_s is None or not math.isfinite(boot_s) or boot_s <= 0:
        return 0.0
    return min(boot_s, now_s)


class SlurmBody(AgentsOwnTheGpus):
    """The cluster as Slurm reports it (a `ClusterBody`)."""

    name = "slurm"
    schedules_jobs = False

    def __init__(self, cluster: Cluster, run: Callable[..., str] = slurm.run,
                 exclusions: SuspendExclusions | None = None, capacity: SlurmCapacity | None = None) -> None:
        """`capacity`: the capacity lever's reader and actuator (cloud pools; None: no job is steered)."""
        self.cluster = cluster
        self._run = run
        self.capacity = capacity
        self._idle_since: dict[str, float] = {}
        self._asleep_since: dict[str, float] = {}
        self._seen_cluster = cluster
        """The inventory with each node's features and partitions as `sinfo` gives them (rebuilt when they change:
        the core keeps its books per cluster object)."""
        self._exclusions = exclusions
        self._exclusions_read_s = float("inf") if exclusions is not None else float("-inf")
        self._warned: set[str] = set()
        self._job_problems: set[str] = set()
        """The constraint problems of the last tick's jobs (each logged once while its job waits)."""

    def exclusions(self, now_s: float) -> SuspendExclusions | None:
        """SuspendExcNodes/SuspendExcParts as slurmctld holds them (read again every EXCLUSIONS_TTL_S); None while
        they could never be read (then no node is slept: Slurm may keep any of them up)."""
        if now_s - self._exclusions_read_s >= EXCLUSIONS_TTL_S:
            try:
                self._exclusions = read_exclusions(self._run)
                self._exclusions_read_s = now_s
                self._warned.discard("exclusions")
            except slurm.SlurmError as error:
                if "exclusions" not in self._warned:
                    self._warned.add("exclusions")
                    kept = "the last ones read are kept" if self._exclusions is not None else "no node is slept"
                    log.warning("cannot read SuspendExcNodes/SuspendExcParts (%s): %s", error, kept)
        return self._exclusions

    def _cluster_as_seen(self, records: dict[str, JsonObject]) -> Cluster:
        nodes = tuple(replace(node, features=node_features(records[node.name]) | node.features,
                              partitions=node_partitions(records[node.name]) or node.partitions)
                      if node.name in records else node for node in self.cluster.nodes)
        if nodes != self._seen_cluster.nodes:
            self._seen_cluster = replace(self.cluster, nodes=nodes)
        return self._seen_cluster

    def observe(self, now_s: float, suspends_last_minute: int, wakes_last_minute: int) -> Observation:
        known = {n.name for n in self.cluster.nodes}
        problems: list[str] = []
        queue = self._run("squeue", "--json")
        running, pending = parse_jobs(queue, known, problems, now_s)
        for problem in problems:
            if problem not in self._job_problems:  # once per job while it waits, not every tick
                log.warning("squeue --json: %s", problem)
        self._job_problems = set(problems)
        states: dict[str, NodeState] = {}
        faults: dict[str, str] = {}
        busy: set[str] = set()
        nodes = slurm.json_reply(self._run("sinfo", "--json"), "sinfo --json").get("nodes") or []
        if not isinstance(nodes, list):
            raise slurm.SlurmError("sinfo --json: no list of nodes")
        records: dict[str, JsonObject] = {}
        for record in nodes:
            name = str(record.get("name"))
            if name not in known or not isinstance(record, dict):
                continue
            records[name] = record
            state, flags = str(record.get("state", "")).lower(), set(record.get("state_flags") or [])
            found = node_power(state, flags)
            if found is not None:
                states[name] = found
            reason = fault_reason(record, found)
            if reason is not None:
                faults[name] = reason
            if state in ("allocated", "mixed", "completing") or "COMPLETING" in flags:
                busy.add(name)  # any job, GPU or not: a node with work never sleeps
        cluster = self._cluster_as_seen(records)
        pending = [PendingJob(bare_constraints(p.job, cluster.nodes), p.preemptions)
                   if p.job.node_rule is not None else p for p in pending]
        idle_awake: list[NodeView] = []
        asleep: list[NodeView] = []
        ready = 0
        gpus_of = {node.name: self.cluster.node_types[node.type_name].gpus for node in self.cluster.nodes}
        idle_w = {node.name: idle_draw_w(self.cluster.node_types[node.type_name]) for node in self.cluster.nodes}
        for name in sorted(known):
            seen = states.get(name)
            if seen is not None and seen.power is PowerState.ASLEEP and not seen.drained:
                since = self._asleep_since.setdefault(name, now_s)
                asleep.append(NodeView(name, gpus_of[name], PowerState.ASLEEP, since, False, None, idle_w[name]))
                self._idle_since.pop(name, None)
                continue
            self._asleep_since.pop(name, None)
            if name in busy or seen is not None:
                # Failed, drained, on its way up or down, or at work: neither sleepable nor idle capacity.
                self._idle_since.pop(name, None)
                if seen is not None and seen.power is PowerState.WAKING:
                    ready += gpus_of[name]
                continue
            # Awake, usable and without work: idle since greengpu first saw it so.
            idle_awake.append(NodeView(name, gpus_of[name], PowerState.AWAKE, awake_since_s(records.get(name), now_s),
                                       False, self._idle_since.setdefault(name, now_s), idle_w[name]))
            ready += gpus_of[name]
        idle_awake = self._sleepable(idle_awake, now_s, states, busy, known)
        snapshot = ClusterSnapshot(now_s, cluster, tuple(running), tuple(pending), states)
        sleep = SleepObservation(now_s=now_s, idle_awake=tuple(idle_awake), asleep=tuple(asleep),
                                 ready_idle_gpus=ready, busy_gpus=gpus_in_use(running),
                                 suspends_last_minute=suspends_last_minute, wakes_last_minute=wakes_last_minute,
                                 timezone=self.cluster.site.timezone)
        facts, held = steerable(self.capacity, queue, now_s)
        return Observation(snapshot, (), sleep, {}, {}, faults, facts, held)

    def _sleepable(self, idle_awake: list[NodeView], now_s: float, states: dict[str, NodeState], busy: set[str],
                   known: set[str]) -> list[NodeView]:
        """The idle nodes Slurm lets power down (SuspendExcNodes/SuspendExcParts); none while those are unknown."""
        exclusions = self.exclusions(now_s)
        if exclusions is None:
            return []
        if not exclusions.sets and not exclusions.partitions:
            return idle_awake
        up = {name for name in known if name not in states}  # awake and usable, busy or not
        allowed = set(exclusions.may_suspend([view.name for view in idle_awake], up))
        return [view for view in idle_awake if view.name in allowed]

    def act(self, action: TickAction, now_s: float) -> str:
        try:
            if isinstance(action, SleepNode):
                exclusions = self.exclusions(now_s)
                if exclusions is None or exclusions.always(action.node):
                    raise ActionFailed(f"{action.node}: Slurm keeps it out of power saving (SuspendExcNodes/"
                                       "SuspendExcParts), or those could not be read: not powered down")
                self._run("scontrol", "update", f"nodename={action.node}", "state=POWER_DOWN",
                          f"reason=greengpu: {action.reason}"[:200])
                self._idle_since.pop(action.node, None)
                return f"{action.node}: power down asked of Slurm"
            if isinstance(action, WakeNode):
                self._run("scontrol", "update", f"nodename={action.node}", "state=POWER_UP")
                return f"{action.node}: power up asked of Slurm"
            if isinstance(action, ChooseCapacity) and self.capacity is not None and action.kind != "wait":
                return steer(self.capacity, action)
        except slurm.SlurmError as error:
            raise ActionFailed(str(error)) from None
        raise ActionFailed(f"{type(action).__name__} is not carried out on Slurm (the node agents cap GPUs)")

    def drain_node(self, node: str, reason: str) -> str:
        """Drain `node` for a failing GPU (greengpu.health.drain decided it); an administrator resumes it."""
        try:
            self._run("scontrol", "update", f"nodename={node}", "state=DRAIN", f"reason={reason}"[:200])
        except slurm.SlurmError as error:
            raise ActionFailed(str(error)) from None
        return f"{node}: drained in Slurm"
