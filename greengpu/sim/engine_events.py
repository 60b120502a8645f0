"""What each event of a replay does: arrivals, finishes, wake and suspend completions, idle checks, ticks, GPU
health events and the cloud pools' events. Each marks the replay dirty (a cycle is due) or due for a sleep
check; the replay's loop (sim/engine.py) decides after all the events of one instant.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from greengpu.model import PendingJob, PowerState
from greengpu.sim.clock import EventKind
from greengpu.sim.failures import GpuEvent

if TYPE_CHECKING:
    from greengpu.sim.engine import Simulation


class ReplayEvents:
    """The event handling of one replay (`Simulation`)."""

    def __init__(self, sim: Simulation) -> None:
        self.sim = sim

    def handle(self, kind: EventKind, data: Any) -> None:
        sim = self.sim
        if kind is EventKind.ARRIVE:
            job = sim.jobs[data]
            sim.work.arrive(PendingJob(job))
            sim.arrivals.add(job, sim.clock.now_s)
            sim.arrivals_left -= 1
            sim.dirty = True
            self.demand_changed(job.gpus)
        elif kind is EventKind.FINISH:
            gpus = sim.work.finish(*data)
            if gpus is not None:
                sim.dirty = True
                self.demand_changed(-gpus)
        elif kind is EventKind.WAKE_DONE:
            if sim.sleep.wake_done(data):
                sim.dirty = True
        elif kind is EventKind.WAKE_CHECK:
            if sim.sleep.verify_wake(data):
                sim.dirty = True  # the core plans the waiting work elsewhere
        elif kind is EventKind.SUSPEND_DONE:
            if sim.sleep.suspend_done(data):
                sim.dirty = bool(sim.pending)
        elif kind is EventKind.IDLE_CHECK and data is None:
            sim.sleep_check = True  # the shared re-check of deferred idle nodes
        elif kind is EventKind.IDLE_CHECK:
            name, token = data
            node = sim.fleet.nodes[name]
            if node.idle_token == token and node.power is PowerState.AWAKE and node.jobs == 0:
                sim.sleep_check = sim.sleep.came_due(node)
        elif kind is EventKind.TICK:
            if data is None:
                sim.tick_pending = False
            sim.dirty = True
        elif kind is EventKind.HOUR:
            sim.sleep.hour_turns(bool(sim.arrivals_left or sim.pending or sim.running))
        elif kind is EventKind.GPU_EVENT:
            self._gpu_event(data)
        elif kind is EventKind.CLOUD:
            assert sim.cloud is not None
            sim.cloud.handle(data)

    def _gpu_event(self, event: GpuEvent) -> None:
        """A health change the scheduler may see, or a failure: the jobs on the GPU are requeued with the work
        since their last checkpoint lost (counted apart from preemptions)."""
        sim = self.sim
        assert sim.failures is not None
        applied = sim.failures.apply(event, lambda name: sim.fleet.nodes[name].jobs > 0)
        sim.dirty = sim.dirty or applied.changed
        for later in applied.later:  # the next life of a GPU replaced before it failed
            sim.clock.push(later.time_s, EventKind.GPU_EVENT, later)
        if not applied.failed:
            return
        for job_id in sim.failures.jobs_on(sim.running, event):
            victim, lost_gpu_s = sim.work.fail(job_id)
            sim.failures.charge(victim, lost_gpu_s)
            sim.dirty = True

    def requeued(self, waiting: PendingJob) -> None:
        """An interrupted cloud job is back in the queue."""
        self.sim.pending[waiting.job.job_id] = waiting
        self.sim.dirty = True

    def demand_changed_by(self, finished_gpus: float) -> None:
        """A cloud job finished: less demand, and room in the cloud for what waits."""
        self.sim.dirty = True
        self.demand_changed(-finished_gpus)

    def demand_changed(self, delta_gpus: float) -> None:
        self.sim.offered_gpus += delta_gpus
        self.sim.sleep.demand_changed()
