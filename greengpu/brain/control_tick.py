"""The whole control tick: snapshot and policy in, every lever's actions out. Pure.

Order matters and is the same in every body: the scheduling cycle first (it says which jobs start,
which stop and which wait), then whether work waits (`work_waiting`), then capping (caps lift while
work waits), then sleep and wake (nothing sleeps while work waits; the core's wakes and the warm
reserve within the rate limits), then cloud capacity for the jobs left waiting, then health (jobs on a
failing GPU's node asked to checkpoint, the node drained once empty).

The daemon calls `control_tick` whole. The simulator is event driven: it calls the same parts
(`schedule`, `plan_power`'s `gpu_setting`, `plan_sleep`, `plan_wakes`) at the events that change
their inputs, which gives the same decisions without asking every lever at every event.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from greengpu.brain.capacity_choice import ChooseCapacity, plan_capacity
from greengpu.capping.gpu_power import GpuObservation, GpuSettings, PowerAction, plan_power
from greengpu.capping.gpu_power import after_placements as gpus_after_placements
from greengpu.health.drain import DrainNode, plan_checkpoints, plan_drains
from greengpu.model import Action, ClusterSnapshot, KillJob, PlaceJob, SleepNode, WakeNode
from greengpu.policy import Policy
from greengpu.sched.core import CycleResult, SchedulerMemory, schedule_cycle
from greengpu.sleep.sleep_wake import SleepObservation, after_placements, plan_sleep, plan_wakes
from greengpu.sleep.work_waiting import WorkWaiting, gpus_in_use, with_job_verdict, with_slack_verdict, work_waiting
from greengpu.spot.decide import SpotJobFacts

TickAction = Action | ChooseCapacity
"""What a body carries out: the core's and the energy levers' actions, and the capacity lever's."""


@dataclass(frozen=True)
class Scheduled:
    """A scheduling cycle's result and what it means for the energy levers."""

    cycle: CycleResult
    waiting: WorkWaiting


@dataclass(frozen=True)
class TickResult:
    """Every action of one tick, by lever."""

    scheduled: Scheduled
    power: tuple[PowerAction, ...]
    sleeps: tuple[SleepNode, ...]
    wakes: tuple[WakeNode, ...]
    capacity: tuple[ChooseCapacity, ...] = ()
    """Lever 3: spot, on-demand or wait for each job left waiting for capacity (greengpu.brain.capacity_choice)."""
    checkpoints: tuple[str, ...] = ()
    """Health: running jobs on a node with a failing GPU, to checkpoint and stop (greengpu.health.drain)."""
    drains: tuple[DrainNode, ...] = ()
    """Health: nodes with a failing GPU and nothing left running, to drain (greengpu.health.drain)."""

    @property
    def actions(self) -> tuple[TickAction, ...]:
        """All actions in the order a body carries them out: jobs, then cloud capacity (a `wait` is no action),
        then wakes, then limits, then sleeps."""
        jobs = tuple(a for a in self.scheduled.cycle.actions if not isinstance(a, WakeNode))
        clouds = tuple(c for c in self.capacity if c.kind != "wait")
        return (*jobs, *clouds, *self.wakes, *self.power, *self.sleeps)


def schedule(snapshot: ClusterSnapshot, policy: Policy, memory: SchedulerMemory | None = None) -> Scheduled:
    """The scheduling part of the tick: one cycle of the core, and whether work waits after it. `memory`: what
    the body keeps between its cycles (greengpu.sched.memory; None: a fresh one for this call)."""
    cycle = schedule_cycle(snapshot, policy.scheduler, policy.interval_s, memory=memory)
    return Scheduled(cycle, work_waiting(cycle, snapshot.cluster, memory))


def control_tick(snapshot: ClusterSnapshot, policy: Policy, gpus: Sequence[GpuObservation],
                 sleep: SleepObservation, gpu_settings: GpuSettings | None = None,
                 capacity_facts: Mapping[str, SpotJobFacts] | None = None,
                 cap_refused: frozenset[str] = frozenset(), memory: SchedulerMemory | None = None) -> TickResult:
    """One tick over every lever: `gpus` as observed now, `sleep` the nodes' power states and rates.

    With `gpu_settings` (the limits and clocks the GPUs hold now), the capping lever returns only the
    writes that change something. `capacity_facts`: the body's own spot facts of the jobs it lets the
    capacity lever steer (greengpu.brain.capacity_choice.plan_capacity; None: every waiting job, from the snapshot).
    `cap_refused`: the running jobs whose caps the forecast slack does not cover (greengpu.capping.forecast_caps):
    they run uncapped too. `memory`: the scheduler's memory the body keeps between ticks (greengpu.sched.memory)."""
    scheduled = schedule(snapshot, policy, memory)
    asked = tuple(a for a in scheduled.cycle.actions if isinstance(a, WakeNode))
    # The levers see the cluster as the cycle leaves it (the simulator starts the jobs before it asks them).
    placed = [a for a in scheduled.cycle.actions if isinstance(a, PlaceJob)]
    stopped = {a.job_id for a in scheduled.cycle.actions if isinstance(a, KillJob)}
    sleep = after_placements(sleep, placed, gpus_in_use(r for r in snapshot.running if r.job.job_id in stopped))
    waiting = with_slack_verdict(scheduled.waiting, snapshot.cluster.total_gpus, sleep.busy_gpus, policy.sleep,
                                 sleep.arrived_gpus)
    # Which jobs run uncapped, by name (the agents lift exactly these: GET /v1/waiting's `uncapped_job_ids`).
    tenant_of = {p.job.job_id: p.job.tenant for p in snapshot.pending} if placed else None
    waiting = with_job_verdict(waiting, snapshot.cluster, snapshot.running, placed, tenant_of, memory)
    if cap_refused:
        waiting = waiting.with_uncapped((waiting.uncapped or frozenset()) | cap_refused, waiting.judged)
    scheduled = replace(scheduled, waiting=waiting)
    sleeps = plan_sleep(sleep, policy.sleep, scheduled.waiting) if policy.sleep.enabled else ()
    wakes = plan_wakes(sleep, policy.sleep, asked) if policy.sleep.enabled else ()
    if placed:
        gpus = gpus_after_placements(gpus, placed, {p.job.job_id: p.job for p in snapshot.pending})
    capacity = plan_capacity(snapshot, scheduled.cycle, policy.spot, capacity_facts)
    return TickResult(scheduled, plan_power(gpus, policy.capping, scheduled.waiting, gpu_settings), sleeps, wakes,
                      capacity, plan_checkpoints(snapshot), plan_drains(snapshot))
