"""What the daemon's HTTP API answers from its last tick: `GET /v1/waiting` (for the node agents) and
`GET /v1/status`. Read-only views of the daemon's state; the daemon's methods of the same names call these."""

from __future__ import annotations

import sqlite3
from typing import Any, Protocol

from greengpu.control.body import ClusterBody, Observation
from greengpu.control.daemon_store import DaemonStore, TickFacts
from greengpu.model import PowerState
from greengpu.tick.tick import TickResult


class DaemonState(Protocol):
    """The parts of a `Daemon` the answers read."""

    body: ClusterBody
    store: DaemonStore
    facts: TickFacts | None
    dry_run: bool
    leading: bool
    last_good_tick_s: float | None
    last_result: TickResult | None
    last_observation: Observation | None
    energy_by_tenant_j: dict[str, float]


def waiting_signal(daemon: DaemonState) -> dict[str, Any]:
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


def status(daemon: DaemonState) -> dict[str, Any]:
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
            **({"store_error": store_problem} if store_problem else {})}
