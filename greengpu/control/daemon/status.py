"""What the daemon tells: `/v1/status`, `/v1/waiting` and `/v1/capacity/JOB` (split from
greengpu.control.daemon.service; `Daemon.status` and `Daemon.waiting_signal` answer with these)."""

from __future__ import annotations

import sqlite3
from typing import Protocol

from greengpu.brain.capacity_choice import ChooseCapacity
from greengpu.brain.control_tick import TickResult
from greengpu.control.bodies.body import ClusterBody, Observation
from greengpu.control.daemon.metrics import DaemonMetrics
from greengpu.control.daemon.mig_actions import mig_status
from greengpu.control.daemon.store import DaemonStore, TickFacts
from greengpu.model import PowerState


class Daemon(Protocol):
    """What these answers read of greengpu.control.daemon.service.Daemon."""

    body: ClusterBody
    dry_run: bool
    energy_by_tenant_j: dict[str, float]
    facts: TickFacts | None
    last_good_tick_s: float | None
    last_observation: Observation | None
    last_result: TickResult | None
    leading: bool
    metrics: DaemonMetrics
    store: DaemonStore


def waiting_signal(daemon: Daemon) -> dict[str, object]:
    """What `GET /v1/waiting` answers: the work waiting at the last good tick, whether the cluster had no
    slack left (every cap lifts) and which running jobs' caps lift and which stay on (`uncapped_job_ids`,
    `capped_job_ids`: the slack rule's per-job verdict; the agents lift exactly the first, and lift a job
    in neither while work waits, as with a daemon that does not say)."""
    last = daemon.last_result.scheduled.waiting if daemon.last_result is not None else None
    uncapped = last.uncapped if last is not None else None
    capped = last.capped if last is not None else None
    return {"job_ids": list(last.job_ids) if last is not None else [], "no_slack": bool(last and last.no_slack),
            "uncapped_job_ids": sorted(uncapped) if uncapped is not None else None,
            "capped_job_ids": sorted(capped) if capped is not None else None,
            "tick_s": daemon.last_good_tick_s, "leading": daemon.leading}


def status(daemon: Daemon) -> dict[str, object]:
    """What /v1/status answers."""
    seen = daemon.last_observation
    nodes = {}
    if seen is not None:
        for node in seen.snapshot.cluster.nodes:
            found = seen.snapshot.node_states.get(node.name)
            nodes[node.name] = (found.power if found is not None else PowerState.AWAKE).value
    waiting = daemon.last_result.scheduled.waiting.job_ids if daemon.last_result is not None else ()
    try:  # a short wait only: a store another process holds must not hang the answer
        paused, exempt, actions_open = daemon.store.status_facts()
        store_problem = None
    except sqlite3.Error as error:
        facts = daemon.facts
        paused, exempt = (facts.paused, facts.exempt) if facts is not None else (False, set())
        actions_open, store_problem = None, f"{daemon.store.path}: {error} (paused and exempt: as the last tick read)"
    return {"source": daemon.body.name, "dry_run": daemon.dry_run, "paused": paused,
            "leading": daemon.leading,
            "last_good_tick_s": daemon.last_good_tick_s, "nodes": nodes,
            "jobs_waiting_for_capacity": list(waiting), "exempt_nodes": sorted(exempt),
            "actions_open": actions_open,
            "gpu_energy_kwh_by_tenant": {t: j / 3.6e6 for t, j in sorted(daemon.energy_by_tenant_j.items())},
            **({"capacity": capacity(daemon)} if daemon.body.cluster.pools else {}),
            **({"mig_gpus": mig_status(seen.snapshot)} if seen is not None and seen.snapshot.mig_partitions else {}),
            **({"store_error": store_problem} if store_problem else {})}


def _decision(choice: ChooseCapacity, tick_s: float | None) -> dict[str, object]:
    return {"job": choice.job_id, "kind": choice.kind, "pool": choice.pool, "reason": choice.reason,
            "tick_s": tick_s}


def capacity(daemon: Daemon) -> dict[str, object]:
    """The capacity lever at the last good tick: each waiting cloud-eligible job's decision, and (a body with
    cloud nodes of its own: the fake cluster's) the placements so far and the jobs on cloud nodes now."""
    chosen = daemon.last_result.capacity if daemon.last_result is not None else ()
    cloud = getattr(daemon.body, "cloud", None)
    return {"decisions": [_decision(c, daemon.last_good_tick_s) for c in chosen],
            **(cloud.summary() if cloud is not None else {})}


def capacity_decision(daemon: Daemon, job_id: str) -> dict[str, object] | None:
    """What `GET /v1/capacity/JOB` answers: the last good tick's decision for one waiting job (None: none, the
    job was not waiting for capacity then, or it is unknown)."""
    chosen = daemon.last_result.capacity if daemon.last_result is not None else ()
    for choice in chosen:
        if choice.job_id == job_id:
            return _decision(choice, daemon.last_good_tick_s)
    return None
