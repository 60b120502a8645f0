"""The daemon's Slurm body: the cluster as `squeue --json` and `sinfo --json` show it, sleep and wake
through `scontrol update ... state=POWER_DOWN|POWER_UP`.

Slurm schedules its own jobs: the daemon reads them (account as tenant, QOS as priority, the GPUs each
running job holds per node from `gres_detail`, what each pending job asks for from `tres_per_node`)
so that the core can say which work waits and which sleeping nodes it needs, and greengpu decides
sleep with Slurm's own idle timer off for the nodes it manages (docs/DAEMON.md). Slurm still resumes
nodes for the jobs it schedules, through greengpu's ResumeProgram. Capping stays with the node agents.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import hostlist

from greengpu.backends import slurm
from greengpu.control.body import ActionFailed, Observation
from greengpu.energy.sleep import NodeView, idle_draw_w
from greengpu.model import (
    JOB_CLASSES,
    Action,
    Cluster,
    ClusterSnapshot,
    GpuSlot,
    Job,
    NodeState,
    PendingJob,
    PowerState,
    RunningJob,
    SleepNode,
    WakeNode,
)
from greengpu.sim.trace_formats import QOS_PRIORITY
from greengpu.slurm_json import gpus_asked, job_states, json_number
from greengpu.tick.sleep import SleepObservation

CLASS_COMMENT = re.compile(r"greengpu\.class=(\w+)")
GPU_IDX = re.compile(r"^gpu(?::[^:(]+)?:(\d+)\(IDX:([^)]*)\)")
DEFAULT_DURATION_S = 3600.0
"""A pending job's run time when it has no time limit (what the core's backfill and wake plans assume)."""


def _indices(spec: str) -> list[int]:
    """`0-1,3` -> [0, 1, 3]."""
    out: list[int] = []
    for part in filter(None, spec.split(",")):
        low, _, high = part.partition("-")
        out.extend(range(int(low), int(high or low) + 1))
    return out


def _class(record: dict[str, Any]) -> str:
    found = CLASS_COMMENT.search(str(record.get("comment") or ""))
    return found.group(1) if found and found.group(1) in JOB_CLASSES else "training"


def _job(record: dict[str, Any], gpus: float, per_node: int | None) -> Job:
    limit_min = json_number(record.get("time_limit"))
    duration_s = limit_min * 60.0 if limit_min is not None and limit_min > 0 else DEFAULT_DURATION_S
    return Job(job_id=str(record["job_id"]), tenant=str(record.get("account") or "default"), gpus=gpus,
               duration_s=duration_s, submit_time_s=json_number(record.get("submit_time")) or 0.0,
               priority=QOS_PRIORITY.get(str(record.get("qos") or "").lower(), 0), job_class=_class(record),
               gpus_per_node=per_node)


def parse_jobs(text: str, known: set[str]) -> tuple[list[RunningJob], list[PendingJob]]:
    """`squeue --json` -> running GPU jobs (with their GPU indices per node) and pending GPU jobs.

    Jobs without GPUs are left out (greengpu manages GPU nodes; a CPU job on a GPU node still keeps it
    from sleeping, which `sinfo`'s node state says).
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
                                          expected_end_s=start_s + job.duration_s))
        elif "PENDING" in states:
            asked = gpus_asked(record)  # per node times the node count, or per job (Slurm 23: gres/gpu=N)
            if asked is not None:
                pending.append(PendingJob(_job(record, asked[0], asked[1])))
    return running, pending


def node_power(state: str, flags: set[str]) -> NodeState | None:
    """A node's state as the core takes it from `sinfo --json`'s state and flags (None: awake and usable)."""
    if "POWERED_DOWN" in flags:
        return NodeState(power=PowerState.ASLEEP)
    if "POWERING_DOWN" in flags or "POWER_DOWN" in flags:
        return NodeState(power=PowerState.SUSPENDING)
    if "POWERING_UP" in flags:
        return NodeState(power=PowerState.WAKING)
    if state in ("down", "fail", "future", "unknown") or flags & {"DRAIN", "NOT_RESPONDING", "FAIL", "MAINTENANCE",
                                                                   "RESERVED"}:
        return NodeState(drained=True)
    return None


class SlurmBody:
    """The cluster as Slurm reports it (a `ClusterBody`)."""

    name = "slurm"
    schedules_jobs = False

    def __init__(self, cluster: Cluster, run: Callable[..., str] = slurm.run) -> None:
        self.cluster = cluster
        self._run = run
        self._idle_since: dict[str, float] = {}
        self._asleep_since: dict[str, float] = {}

    def observe(self, now_s: float, suspends_last_minute: int, wakes_last_minute: int) -> Observation:
        known = {n.name for n in self.cluster.nodes}
        running, pending = parse_jobs(self._run("squeue", "--json"), known)
        states: dict[str, NodeState] = {}
        busy: set[str] = set()
        nodes = slurm.json_reply(self._run("sinfo", "--json"), "sinfo --json").get("nodes") or []
        if not isinstance(nodes, list):
            raise slurm.SlurmError("sinfo --json: no list of nodes")
        for record in nodes:
            name = str(record.get("name"))
            if name not in known:
                continue
            state, flags = str(record.get("state", "")).lower(), set(record.get("state_flags") or [])
            found = node_power(state, flags)
            if found is not None:
                states[name] = found
            if state in ("allocated", "mixed", "completing") or "COMPLETING" in flags:
                busy.add(name)  # any job, GPU or not: a node with work never sleeps
        idle_awake: list[NodeView] = []
        asleep: list[NodeView] = []
        ready = 0
        gpus_of = {node.name: self.cluster.node_types[node.type_name].gpus for node in self.cluster.nodes}
        idle_w = {node.name: idle_draw_w(self.cluster.node_types[node.type_name]) for node in self.cluster.nodes}
        for name in sorted(known):
            seen = states.get(name)
            if seen is not None and seen.power is PowerState.ASLEEP:
                since = self._asleep_since.setdefault(name, now_s)
                asleep.append(NodeView(name, gpus_of[name], PowerState.ASLEEP, since, False, None, idle_w[name]))
                self._idle_since.pop(name, None)
                continue
            self._asleep_since.pop(name, None)
            if name in busy or seen is not None:
                self._idle_since.pop(name, None)
                if seen is not None and seen.power is PowerState.WAKING:
                    ready += gpus_of[name]
                continue
            # Awake, usable and without work: idle since greengpu first saw it so.
            idle_awake.append(NodeView(name, gpus_of[name], PowerState.AWAKE, 0.0, False,
                                       self._idle_since.setdefault(name, now_s), idle_w[name]))
            ready += gpus_of[name]
        snapshot = ClusterSnapshot(now_s, self.cluster, tuple(running), tuple(pending), states)
        sleep = SleepObservation(now_s=now_s, idle_awake=tuple(idle_awake), asleep=tuple(asleep),
                                 ready_idle_gpus=ready, busy_gpus=float(sum(r.job.gpus for r in running)),
                                 suspends_last_minute=suspends_last_minute, wakes_last_minute=wakes_last_minute,
                                 timezone=self.cluster.site.timezone)
        return Observation(snapshot, (), sleep, {}, {})

    def act(self, action: Action, now_s: float) -> str:
        try:
            if isinstance(action, SleepNode):
                self._run("scontrol", "update", f"nodename={action.node}", "state=POWER_DOWN",
                          f"reason=greengpu: {action.reason}"[:200])
                self._idle_since.pop(action.node, None)
                return f"{action.node}: power down asked of Slurm"
            if isinstance(action, WakeNode):
                self._run("scontrol", "update", f"nodename={action.node}", "state=POWER_UP")
                return f"{action.node}: power up asked of Slurm"
        except slurm.SlurmError as error:
            raise ActionFailed(str(error)) from None
        raise ActionFailed(f"{type(action).__name__} is not carried out on Slurm (the node agents cap GPUs)")

    def release_gpus(self, reason: str) -> list[str]:
        return []  # the node agents own the GPUs and fall back to defaults on their own

    def gpu_energy_j(self) -> dict[str, float]:
        return {}  # the node agents read the GPUs; the ledger models their energy (docs/DAEMON.md)

    def withdraw_preemptions(self, job_ids: list[str]) -> None:
        return None  # the workload manager preempts its own jobs; greengpu sends it none

    def settle(self) -> None:
        return None  # every action went to Slurm as it was carried out
