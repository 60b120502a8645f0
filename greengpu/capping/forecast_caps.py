"""The occupancy rule in a tick, the same in every body: the demand forecast it keeps, fed with what the body
observes, and the verdict on which running jobs' caps the forecast slack does not cover.

A body (the simulator, the daemon) holds one `ForecastCaps` and calls `refused` at each decision with the
demand it sees (running + pending GPUs), which the forecast learns from, and its running jobs' cap candidates
(`candidate`); the verdict is taken again once per control interval and kept between (the rule reads
hours, not seconds). Those jobs run uncapped, on top of the slack rule's (greengpu.sched.slack) and the
headroom rule's lifts.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from greengpu.capping.demand_forecast import DemandPeakForecaster
from greengpu.capping.gpu_power import GpuObservation, gpu_setting
from greengpu.capping.occupancy import CapCandidate, free_gpus, jobs_to_cap
from greengpu.localtime import UTC_NAME
from greengpu.model import ClusterSnapshot, RunningJob
from greengpu.policy import CappingPolicy, Policy
from greengpu.sleep.suspends import warm_reserve_target_gpus


def candidate(running: RunningJob, now_s: float, slowdown: float) -> CapCandidate | None:
    """`running` as a cap candidate: what the core knows of its end (at the pace it runs now), `slowdown`
    its class's cap on its GPUs (`CapDecision.expected_slowdown`); None: a job the policy never caps."""
    if slowdown <= 0.0:
        return None
    return CapCandidate(running.job.job_id, running.held_gpus, max(0.0, running.expected_end_s - now_s), slowdown)


def gpu_candidates(gpus: Iterable[GpuObservation], running: Iterable[RunningJob], capping: CappingPolicy,
                   now_s: float) -> list[CapCandidate]:
    """The running jobs the policy would cap, priced at the slowdown the capping lever decides for each of
    their GPUs as observed (the most of them: the slowest GPU sets a gang's pace)."""
    slowdowns: dict[str, float] = {}
    decided: dict[tuple[object, ...], float] = {}
    for gpu in gpus:
        if gpu.job_id is None or gpu.job_class is None:
            continue
        slowdown = decided.get(gpu.decision_key)
        if slowdown is None:
            slowdown = decided[gpu.decision_key] = gpu_setting(gpu, capping, False).expected_slowdown
        slowdowns[gpu.job_id] = max(slowdown, slowdowns.get(gpu.job_id, 0.0))
    found = (candidate(run, now_s, slowdowns.get(run.job.job_id, 0.0)) for run in running)
    return [made for made in found if made is not None]


def offered_gpus(snapshot: ClusterSnapshot) -> float:
    """The demand a snapshot shows: running + pending GPUs."""
    return float(sum(r.job.gpus for r in snapshot.running) + sum(p.job.gpus for p in snapshot.pending))


class ForecastCaps:
    """The forecast and the rule's last verdict for one body."""

    def __init__(self, policy: Policy, timezone: str = UTC_NAME) -> None:
        """`timezone`: the site's, whose wall clock the forecast's hours of day are read on."""
        self.active = policy.capping.relaxes_when_queued and policy.capping.forecast_slack
        """Asked only where the policy asks for it (`capping.forecast_slack`, with `relax_when_queued`)."""
        self.policy = policy
        self.forecaster = DemandPeakForecaster(timezone=timezone)
        self.next_s = float("-inf")
        self.last: frozenset[str] = frozenset()
        """The jobs whose caps the last verdict refused."""

    def observe(self, now_s: float, demand_gpus: float) -> None:
        """The demand the body sees now (running + pending GPUs)."""
        if self.active:
            self.forecaster.observe(now_s, demand_gpus)

    def refused(self, now_s: float, demand_gpus: float, total_gpus: float,
                candidates: Callable[[], Iterable[CapCandidate]], arrived_gpus: float | None = None) -> frozenset[str]:
        """The running jobs whose caps the forecast slack does not cover, after observing `demand_gpus`: taken again
        once per control interval (`candidates` are asked for then only), the last verdict between.
        `total_gpus`: the cluster's; `arrived_gpus`: the warm reserve's (greengpu.sleep.arrivals)."""
        self.observe(now_s, demand_gpus)
        if not self.active or now_s < self.next_s:
            return self.last
        self.next_s = now_s + self.policy.interval_s
        forecaster, sleep, total = self.forecaster, self.policy.sleep, total_gpus

        def reserve_of(busy_gpus: float) -> float:
            return float(warm_reserve_target_gpus(sleep, busy_gpus, arrived_gpus=arrived_gpus))

        def free_of(hour: int) -> float | None:
            return free_gpus(total, forecaster.upper_at(hour, now_s, demand_gpus), reserve_of)

        listed = list(candidates())
        capped = jobs_to_cap(listed, now_s, free_of)
        self.last = frozenset(c.job_id for c in listed if c.job_id not in capped)
        return self.last

    def follow_site(self, timezone: str) -> None:
        """Read hours on `timezone`'s wall clock from now on (a body that learns the site from its inventory: the
        daemon). A change of zone (an edited inventory) starts the forecast over: its history was learnt on the
        other clock, and until it knows an hour again the present's rules hold alone, as on the first day."""
        if timezone != self.forecaster.timezone:
            self.forecaster = DemandPeakForecaster(timezone=timezone)

    def refused_in(self, snapshot: ClusterSnapshot, gpus: Iterable[GpuObservation], arrived_gpus: float | None,
                   demand_gpus: float) -> frozenset[str]:
        """`refused` for a body that observes a snapshot and its GPUs (the daemon). `demand_gpus`: the snapshot's
        `offered_gpus`, which the caller sums once for both forecasts (read only while this one is active)."""
        now_s = snapshot.time_s
        self.follow_site(snapshot.cluster.site.timezone)
        return self.refused(now_s, demand_gpus, snapshot.cluster.total_gpus, lambda: gpu_candidates(
            gpus, snapshot.running, self.policy.capping, now_s), arrived_gpus)
