"""The replay's side of the occupancy rule (greengpu.capping.forecast_caps): its running jobs as cap candidates,
each priced at the slowdown the tick's capping lever decides for its class on its GPUs, as the daemon prices
the jobs it observes."""

from __future__ import annotations

from greengpu.capping.forecast_caps import candidate
from greengpu.capping.occupancy import CapCandidate
from greengpu.model import RunningJob
from greengpu.sim.nodes import SimNode
from greengpu.sim.pace import Pacer


def cap_candidates(now_s: float, running: dict[str, RunningJob], pacer: Pacer,
                   nodes: dict[str, SimNode]) -> list[CapCandidate]:
    """The running jobs the policy would cap, with what their caps cost. A job started at this decision is
    left to the next one, as a tick sees only the jobs running before its cycle placed more."""
    found = []
    for run in running.values():
        if run.start_time_s >= now_s:
            continue
        slowdown = max(pacer.capped_slowdown(run.job, nodes[name]) for name in run.nodes)
        made = candidate(run, now_s, slowdown)
        if made is not None:
            found.append(made)
    return found
