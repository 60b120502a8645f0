"""Replicas of a replay: the same trace with every submit time moved by less than a second, to tell a policy's
effect from the chaos of one replay.

A replay is deterministic, but a busy queue is chaotic: which job a reclaim picks, which gang gets the next free
node, which tenant's sweep goes first all hang on the order of events a second apart. Moving every submit time by
a random fraction of a second (a trace's times are whole seconds, so this is below what it records) leaves the
workload as it was and changes those ties. On the public Philly trace at 1.4 times a 640-GPU cluster's load,
always-on alone gives a p95 wait from 37,650 to 42,641 s and lost work from 545 to 3,003 GPU-hours over five
such replicas (docs/SIMULATOR.md, "One replay is one draw"). So two policies' waits and losses are compared on
the median of several replicas, never on one replay; energy moves less (up to 2% between replicas there), and
is compared the same way.

Replica 0 is the trace as given; replica k > 0 draws its offsets from a stream seeded by the run's seed and k,
so the same inputs and seed give the same replicas.
"""

from __future__ import annotations

import random
import statistics
from collections.abc import Callable, Sequence
from dataclasses import replace

from greengpu.json_types import JsonObject
from greengpu.model import Job
from greengpu.sim.results import SimResult

JITTER_S = 1.0
"""The most a replica moves a submit time (seconds, always later): under the whole second a trace records."""
MAX_REPLICAS = 100

FIGURES = ("energy_kwh", "gpu_energy_kwh", "cost", "co2_kg", "preemptions", "lost_gpu_hours", "node_sleep_hours",
           "wakes", "sla_violations", "invariant_violations", "deadline_misses", "jobs_completed")
"""The plain figures a replica summary gives the median, least and most of (with the waits: `WAITS`)."""
WAITS = ("p50", "p95", "p99", "mean")


def replica_jobs(jobs: Sequence[Job], replica: int, seed: int = 0) -> list[Job]:
    """The trace of replica `replica`: `jobs` as given for 0; else each submit time moved later by a draw from
    [0, JITTER_S) of a stream seeded by `seed` and `replica` (the jobs keep their order and everything else)."""
    if replica == 0:
        return list(jobs)
    draw = random.Random(f"greengpu-replica:{seed}:{replica}").random
    return [replace(job, submit_time_s=job.submit_time_s + JITTER_S * draw()) for job in jobs]


def _spread(values: Sequence[float | None], pick: Callable[[Sequence[float]], float]) -> float | None:
    known = [v for v in values if v is not None]
    return pick(known) if known else None


def summary(results: Sequence[SimResult]) -> JsonObject:
    """The median, least and most of each figure over the replicas' results: the `replicas` object of
    `greengpu simulate --replicas N --json` (docs/SIMULATOR.md)."""
    out: JsonObject = {"count": len(results), "jitter_s": JITTER_S}
    for name, pick in (("median", statistics.median), ("min", min), ("max", max)):
        figures: JsonObject = {key: _spread([float(getattr(r, key)) for r in results], pick) for key in FIGURES}
        figures["wait_s"] = {w: _spread([getattr(r.wait_s, w) for r in results], pick) for w in WAITS}
        out[name] = figures
    return out
