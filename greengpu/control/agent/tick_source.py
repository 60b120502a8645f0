"""A class source fed by a control tick: the jobs on this node's GPUs and the work that waits, both from
a cluster snapshot and the core's own verdict on it.

This is how a node agent hears from a controller that sees the whole cluster (the daemon): the
snapshot says which job runs on which GPU of this node, and `greengpu.brain.control_tick.schedule` says which
jobs wait for capacity, instead of each agent re-deriving it from the workload manager's reason
strings. The simulator asks the same `schedule` on its own snapshots.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from greengpu.backends.nvml import GpuReading
from greengpu.brain.control_tick import schedule
from greengpu.control.agent.jobclass import GpuJob
from greengpu.model import ClusterSnapshot
from greengpu.policy import Policy
from greengpu.sleep.arrivals import RecentArrivals
from greengpu.sleep.work_waiting import NOTHING_WAITS, WorkWaiting, gpus_in_use, with_job_verdict, with_slack_verdict


class TickSource:
    """`jobs()` and `work_waiting()` of node `node` from the snapshot `observe()` returns each tick."""

    def __init__(self, node: str, observe: Callable[[], ClusterSnapshot], policy: Policy) -> None:
        self.node = node
        self._observe = observe
        self.policy = policy
        self._waiting = NOTHING_WAITS
        self.arrivals = RecentArrivals()

    def jobs(self, readings: Sequence[GpuReading]) -> dict[int, GpuJob]:
        snapshot = self._observe()
        busy_gpus = gpus_in_use(snapshot.running)
        self.arrivals.note_snapshot(snapshot.time_s, snapshot)
        waiting = with_slack_verdict(schedule(snapshot, self.policy).waiting, snapshot.cluster.total_gpus,
                                     busy_gpus, self.policy.sleep, self.arrivals.gpus(snapshot.time_s))
        # The slack rule's per-job verdict: only the jobs in a waiting job's way run uncapped.
        self._waiting = with_job_verdict(waiting, snapshot.cluster, snapshot.running)
        return {slot.gpu_index: GpuJob(running.job.job_id, running.job.job_class, running.job.tenant)
                for running in snapshot.running for slot in running.slots if slot.node == self.node}

    def work_waiting(self) -> WorkWaiting:
        return self._waiting
