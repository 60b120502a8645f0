"""The figures of a finished replay, and the known cycles of one (split from sim/engine.py)."""

from __future__ import annotations

from typing import Protocol

from greengpu.accounting.meter import EnergyMeter
from greengpu.brain.control_tick import Scheduled, schedule
from greengpu.model import Cluster, ClusterSnapshot, Job, PendingJob
from greengpu.policy import Policy
from greengpu.sim.checks import PlacementChecks
from greengpu.sim.clock import EventClock
from greengpu.sim.cloud import CloudPools
from greengpu.sim.failures import FailureReplay
from greengpu.sim.jobs import JobRunner
from greengpu.sim.mig_body import MigPartitions
from greengpu.sim.results import CloudFigures, SimResult, deadline_misses
from greengpu.sim.sleep_body import SleepBody


class Simulation(Protocol):
    """What the figures read of a replay (greengpu.sim.engine.Simulation, which calls these)."""

    cluster: Cluster
    policy: Policy
    jobs: list[Job]
    clock: EventClock
    meter: EnergyMeter
    sleep: SleepBody
    checks: PlacementChecks
    mig: MigPartitions
    work: JobRunner
    cloud: CloudPools | None
    failures: FailureReplay | None
    gpu_hours_allocated: float
    sleep_s: float
    cycles: int
    stalled: bool
    known_cycles: int
    check_known_cycles: bool
    _known: tuple[float, ClusterSnapshot, Scheduled] | None

    @property
    def pending(self) -> dict[str, PendingJob]: ...


def result_of(self: Simulation, wall_s: float) -> SimResult:
    """The figures of a finished replay (`Simulation.run`)."""
    jobs = self.jobs
    work = self.work
    waits, by_class, sla, slowdown = work.outcomes.waits(jobs)
    origin = jobs[0].submit_time_s if jobs else 0.0
    span_s = (self.clock.now_s - origin) if jobs else 0.0
    completed = work.outcomes.completed
    in_cloud = self.cloud.completed if self.cloud is not None else set()  # no facility energy in the cloud
    completed_gpu_hours = sum(work.held_gpus(j) * j.duration_s for j in jobs
                              if j.job_id in completed and j.job_id not in in_cloud) / 3600.0
    cloud = cloud_figures(self)
    return SimResult(
        policy=self.policy.name, jobs=len(jobs), jobs_completed=len(completed),
        jobs_not_started=len(jobs) - len(work.outcomes.first_start),
        unplaceable_jobs=tuple(sorted(self.pending)[:10]) if self.stalled else (),
        makespan_s=(max(work.last_finish_s, cloud.last_finish_s) - origin) if completed else 0.0,
        energy_kwh=self.meter.facility_energy_kwh, gpu_energy_kwh=self.meter.gpu_energy_kwh,
        cost=self.meter.cost + cloud.cost if self.cloud is not None else self.meter.cost,
        co2_kg=self.meter.co2_g / 1000.0, wait_s=waits, wait_s_by_class=by_class,
        gpu_hours_allocated=self.gpu_hours_allocated,
        gpu_hours_capacity=self.cluster.total_gpus * span_s / 3600.0, slowdown_mean=slowdown,
        preemptions=work.preemptions + cloud.preemptions,
        lost_gpu_hours=(work.lost_gpu_s + cloud.lost_gpu_s if self.cloud is not None else work.lost_gpu_s) / 3600.0,
        node_sleep_hours=self.sleep_s / 3600.0, wakes=self.sleep.wakes,
        failed_nodes=tuple(sorted(self.sleep.failed_nodes)), sla_violations=sla,
        invariant_violations=self.checks.violations, sim_wall_s=wall_s, pue=self.cluster.site.pue,
        currency=self.cluster.site.currency, scheduling_cycles=self.cycles,
        energy_kwh_per_gpu_hour=(self.meter.facility_energy_kwh / completed_gpu_hours
                                 if completed_gpu_hours > 0 else None),
        failures=self.failures.stats.as_dict() if self.failures is not None else None,
        spot_share=cloud.spot_share, cloud_cost=cloud.cost, interruptions=cloud.interruptions,
        deadline_misses=deadline_misses(jobs, work.finish_s, self.clock.now_s),
        cloud_pools=self.cloud.to_json() if self.cloud is not None else None,
        interruption_lost_gpu_hours=cloud.lost_gpu_s / 3600.0,
        come_backs=len(self.cloud.come_backs) if self.cloud is not None else 0,
        mig_reconfigurations=self.mig.reconfigurations if self.mig.has_mig else None)

def cloud_figures(self: Simulation) -> CloudFigures:
    if self.cloud is None:
        return CloudFigures()
    spot_s = self.cloud.gpu_s(spot=True)
    all_s = self.gpu_hours_allocated * 3600.0 + spot_s + self.cloud.gpu_s(spot=False)
    return CloudFigures(self.cloud.cost, spot_s / all_s if all_s > 0 else 0.0, self.cloud.interruptions,
                        self.cloud.preemptions, self.cloud.lost_gpu_s, self.cloud.last_finish_s)


def known_result(self: Simulation, snapshot: ClusterSnapshot) -> Scheduled | None:
    """The last cycle's result when it stands for `snapshot`: the same running jobs, queue and node states
    (the same objects: the bodies rebuild them on any change), before the time it promised; else None.
    A saturated queue's periodic cycles are mostly these (greengpu.sched.steady)."""
    known = self._known
    if known is None or self.cloud is not None:
        return None
    until_s, was, scheduled = known
    if not (snapshot.time_s < until_s and snapshot.running is was.running and snapshot.pending is was.pending
            and snapshot.node_states is was.node_states):
        return None
    self.known_cycles += 1
    if self.check_known_cycles:
        check_same(scheduled, schedule(snapshot, self.policy), snapshot.time_s)
    return scheduled


def check_same(known: Scheduled, asked: Scheduled, time_s: float) -> None:
    """Fail unless the core, asked again at `time_s`, decided what the known result says (check_known_cycles)."""
    cycle = asked.cycle
    problems = []
    if cycle.actions or cycle.withdrawn:
        problems.append(f"actions {cycle.actions[:3]} withdrawn {cycle.withdrawn[:3]}")
    if dict(cycle.waits) != dict(known.cycle.waits):
        differ = [j for j in cycle.waits if cycle.waits[j] != known.cycle.waits.get(j)]
        examples = [(j, known.cycle.waits.get(j), cycle.waits[j]) for j in differ[:2]]
        problems.append(f"{len(differ)} waits differ, e.g. {examples}")
    if asked.waiting != known.waiting:
        problems.append("the waiting work differs")
    if {(r.job_id, r.nodes) for r in cycle.reservations} != {(r.job_id, r.nodes) for r in known.cycle.reservations}:
        problems.append(f"reservations {cycle.reservations} != {known.cycle.reservations}")
    if problems:
        raise AssertionError(f"a known cycle at {time_s} decided otherwise when asked: {'; '.join(problems)}")
