"""The fake cluster's cloud pools (`greengpu daemon --backend fake`): nodes started for the jobs the tick's
capacity lever sends to spot or on-demand capacity (greengpu.brain.capacity_choice), and stopped when their job ends.

Each pool of the inventory gives up to `max_nodes` nodes named `POOL-N`, of the pool's node type; a job takes
whole nodes (as many as its GPUs need), which are up after the type's `boot_s` and run it for its duration.
No interruptions: the fake cloud shows where the daemon placed work, the replay (greengpu.sim.cloud) models
what spot costs. Its state is a file of the daemon's state directory, as the rest of the fake cluster's.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import asdict, dataclass
from pathlib import Path

from greengpu.accounting.attribution import JobCharge
from greengpu.accounting.cloud_rows import CloudSpan
from greengpu.errors import BadInput
from greengpu.model import Cluster, Job


@dataclass
class CloudRun:
    """One job on cloud nodes."""

    job_id: str
    tenant: str
    capacity: str
    pool: str
    nodes: list[str]
    requested_s: float
    start_s: float
    end_s: float
    gpus: float = 0.0
    """The GPUs the job keeps busy (0 in a state written before it was kept: its node time is then idle)."""
    submit_s: float | None = None
    job_class: str = ""


def _check(run: CloudRun) -> None:
    """TypeError unless `run`, as read back, has the types it was written with."""
    texts = (run.job_id, run.tenant, run.capacity, run.pool, run.job_class)
    times = (run.requested_s, run.start_s, run.end_s, run.gpus,
             *(() if run.submit_s is None else (run.submit_s,)))
    if not all(isinstance(t, str) for t in texts) or not isinstance(run.nodes, list) \
            or not all(isinstance(n, str) for n in run.nodes) \
            or not all(isinstance(t, int | float) and not isinstance(t, bool) and math.isfinite(t) for t in times):
        raise TypeError(f"cloud job {str(run.job_id)[:40]!r}: a field of the wrong type")


class FakeCloud:
    """The fake cluster's cloud pools, their nodes and the jobs on them."""

    def __init__(self, cluster: Cluster, state_dir: Path) -> None:
        self.cluster = cluster
        self.state_path = state_dir / "fake-cloud.json"
        self.running: dict[str, CloudRun] = {}
        self.finished: dict[str, CloudRun] = {}
        self.placements: dict[tuple[str, str], int] = {}
        """(capacity, pool) -> jobs placed there since the fake cluster began."""
        self._serial = 0
        self.changed = False
        """Whether anything changed since the state was last written."""
        if self.state_path.exists():
            try:
                saved = json.loads(self.state_path.read_text())
                self.running = {r["job_id"]: CloudRun(**r) for r in saved["running"]}
                self.finished = {r["job_id"]: CloudRun(**r) for r in saved["finished"]}
                self.placements = {(c, p): int(n) for c, p, n in saved["placements"]}
                self._serial = int(saved["serial"])
                for run in (*self.running.values(), *self.finished.values()):
                    _check(run)
            except (ValueError, KeyError, TypeError, AttributeError, OSError) as error:
                raise BadInput(f"{self.state_path}: a damaged fake-cloud state ({type(error).__name__}: {error}); "
                               "move it away to start the fake cluster afresh") from None

    def nodes_in_use(self, pool: str) -> int:
        return sum(len(r.nodes) for r in self.running.values() if r.pool == pool)

    def start(self, job: Job, capacity: str, pool_name: str, now_s: float) -> CloudRun:
        """Start nodes of `pool_name` for `job`; ValueError when the pool cannot take it (unknown, of the other
        capacity kind, or without nodes left)."""
        pool = self.cluster.pools.get(pool_name)
        if pool is None or pool.spot != (capacity == "spot"):
            raise ValueError(f"no {capacity} pool {pool_name!r} in the inventory")
        node_type = self.cluster.node_types[pool.type_name]
        needed = max(1, math.ceil(job.gpus / node_type.gpus))
        if self.nodes_in_use(pool_name) + needed > pool.max_nodes:
            raise ValueError(f"pool {pool_name}: {needed} node(s) asked, "
                             f"{pool.max_nodes - self.nodes_in_use(pool_name)} left of {pool.max_nodes}")
        names = []
        for _ in range(needed):
            self._serial += 1
            names.append(f"{pool_name}-{self._serial}")
        start_s = now_s + node_type.boot_s
        run = CloudRun(job.job_id, job.tenant, capacity, pool_name, names, now_s, start_s, start_s + job.duration_s,
                       float(job.gpus), job.submit_time_s, job.job_class)
        self.running[job.job_id] = run
        self.placements[(capacity, pool_name)] = self.placements.get((capacity, pool_name), 0) + 1
        self.changed = True
        return run

    def advance(self, now_s: float) -> list[CloudRun]:
        """The cloud jobs that ended by `now_s` (their nodes released)."""
        ended = [r for r in self.running.values() if r.end_s <= now_s]
        for run in ended:
            del self.running[run.job_id]
            self.finished[run.job_id] = run
            self.changed = True
        return ended

    def spans(self, start_s: float, end_s: float) -> list[CloudSpan]:
        """The cloud node time of [start_s, end_s) for the ledger (greengpu.accounting.cloud_rows): each node paid
        from its request to its job's end, and the job's share of each node while it ran (its GPUs spread evenly
        over its nodes)."""
        spans: list[CloudSpan] = []
        for run in (*self.running.values(), *self.finished.values()):
            gpus = self.cluster.node_types[self.cluster.pools[run.pool].type_name].gpus \
                if run.pool in self.cluster.pools else 0
            paid = (max(start_s, run.requested_s), min(end_s, run.end_s))
            used = (max(start_s, run.start_s), min(end_s, run.end_s))
            for _ in run.nodes:
                if paid[0] < paid[1]:
                    spans.append(CloudSpan(run.pool, "", *paid, 1.0))
                if used[0] < used[1] and gpus and run.gpus > 0:
                    per_node = min(float(gpus), run.gpus / len(run.nodes))
                    spans.append(CloudSpan(run.pool, run.tenant, *used, per_node / gpus, per_node))
        return spans

    def segments(self, start_s: float, end_s: float) -> list[JobCharge]:
        """Each cloud job's run within [start_s, end_s) for the ledger's job rows (`completed` on the one its job
        ended in; its energy and spend are in the cloud rows)."""
        out = []
        for run in (*self.running.values(), *self.finished.values()):
            begin, until = max(start_s, run.start_s), min(end_s, run.end_s)
            if begin < until:
                out.append(JobCharge(run.job_id, run.tenant, run.job_class, begin, until, run.gpus, tuple(run.nodes),
                                     0.0, 0.0, 0.0, 0.0, submit_s=run.submit_s, pool=run.pool,
                                     outcome="completed" if run.end_s <= end_s else ""))
        return out

    def summary(self) -> dict[str, object]:
        """What /v1/status shows of the cloud: placements per capacity and pool, the jobs there now."""
        return {"placements": {f"{c}/{p}": n for (c, p), n in sorted(self.placements.items())},
                "running": {r.job_id: {"capacity": r.capacity, "pool": r.pool, "nodes": r.nodes}
                            for r in self.running.values()}}

    def save(self) -> None:
        """Write the state down when it changed."""
        if not self.changed:
            return
        self.changed = False
        state = {"running": [asdict(r) for r in self.running.values()],
                 "finished": [asdict(r) for r in self.finished.values()],
                 "placements": [[c, p, n] for (c, p), n in sorted(self.placements.items())], "serial": self._serial}
        tmp = self.state_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(state))
        os.replace(tmp, self.state_path)
