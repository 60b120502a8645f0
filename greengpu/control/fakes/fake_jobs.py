"""The fake cluster's job stream (`greengpu daemon --backend fake` without `--trace`) and its clock's origin,
which a restart keeps (split from greengpu.control.fakes.fake_cluster, which re-exports them)."""

from __future__ import annotations

import json
import random
from pathlib import Path

from greengpu.model import Cluster, Job

CLASSES = ("training", "training", "training", "batch", "inference", "interactive")


def generated_jobs(cluster: Cluster, start_s: float, count: int = 2000, seed: int = 0) -> list[Job]:
    """A seeded job stream sized to the cluster: about half of its GPUs busy on average."""
    rng = random.Random(seed)
    largest = max(t.gpus for t in cluster.node_types.values())
    sizes = [g for g in (1, 2, 4, 8) if g <= largest] or [1]
    mean_gpus = sum(sizes) / len(sizes)
    mean_duration_s = 1800.0
    interarrival_s = mean_gpus * mean_duration_s / max(1.0, 0.5 * cluster.total_gpus)
    jobs, now_s = [], start_s
    for index in range(count):
        now_s += rng.expovariate(1.0 / interarrival_s)
        gpus = rng.choice(sizes)
        jobs.append(Job(job_id=f"fake-{index:05d}", tenant=rng.choice(sorted(cluster.tenants) or ["default"]),
                        gpus=gpus, duration_s=max(60.0, rng.lognormvariate(7.0, 1.0)), submit_time_s=now_s,
                        job_class=rng.choice(CLASSES), gpus_per_node=gpus, checkpoint_interval_s=600.0))
    return jobs


def first_start_s(state_dir: Path, now_s: float) -> float:
    """When the fake cluster in `state_dir` first started (its job stream's origin), or `now_s` for a new one.

    A restarted daemon replays the same job stream on the same clock, so a crash does not push every
    job still to come into the future."""
    path = state_dir / "fake-cluster.json"
    if path.exists():
        try:
            return float(json.loads(path.read_text()).get("origin_s", now_s))
        except (ValueError, OSError, AttributeError, TypeError):  # damaged: FakeCluster says so in one line
            return now_s
    return now_s
