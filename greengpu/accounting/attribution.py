"""Who used the energy: facility energy, cost and CO2 split by hour, tenant, job and node.

The rules (also in docs/LEDGER.md):
- a node's draw (its GPUs and host, times PUE) is metered per node and per hour; the nodes add up
  to the site total;
- a job is charged, while it runs, the busy power of its share of each GPU (milli-GPUs / 1000 of
  the GPU's busy watts) plus its share of each host (its GPUs / the node's GPUs of the host's idle
  watts), times PUE;
- what no job is charged for (idle GPUs and hosts, sleeping hosts, the unused part of a shared
  GPU) is `idle`: the site total minus the jobs.
Cost and CO2 use the price and intensity in force in each piece of time, as the meter does.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass, field

from greengpu.accounting.meter import J_PER_KWH, EnergyMeter
from greengpu.model import GPU_UNITS, Job

HOUR_S = 3600.0


@dataclass
class Usage:
    """Accumulated usage in one bucket (an hour of a tenant or of a node)."""

    gpu_hours: float = 0.0
    gpu_energy_j: float = 0.0
    facility_energy_j: float = 0.0
    cost: float = 0.0
    co2_g: float = 0.0
    asleep_s: float = 0.0
    modelled_s: float = 0.0
    """Time of a node's bucket whose GPU energy was modelled, not read from counters (0: all measured)."""


@dataclass(frozen=True)
class JobCharge:
    """One run segment of a job (a preempted job has one per attempt)."""

    job_id: str
    tenant: str
    job_class: str
    start_s: float
    end_s: float
    gpus: float
    nodes: tuple[str, ...]
    gpu_energy_j: float
    facility_energy_j: float
    cost: float
    co2_g: float
    submit_s: float | None = None
    outcome: str = ""
    """How the segment ended: completed, failed, killed, preempted, or '' (still running, or not known)."""
    checkpoint_s: float | None = None
    """How long one checkpoint of the job takes, where known."""
    gpu_profile: str = ""
    """The MIG instance profile the job ran on ('' for whole GPUs)."""
    gpu_model: str = ""
    """The GPU model of its nodes ('' not known; models joined with '+' when they differ)."""
    pool: str = ""
    """'' on-premises; the cloud pool the segment ran in (its energy and spend are in the cloud rows)."""


@dataclass
class Attribution:
    """Collects per-hour, per-tenant, per-node and per-job usage during a replay or a daemon period."""

    meter: EnergyMeter
    tenant_hours: dict[tuple[float, str], Usage] = field(default_factory=dict)
    node_hours: dict[tuple[float, str], Usage] = field(default_factory=dict)
    jobs: list[JobCharge] = field(default_factory=list)

    def _pieces(self, start_s: float, end_s: float) -> Iterator[tuple[float, float, float]]:
        """(hour start, piece start, piece end): [start_s, end_s) cut at hours and price or carbon changes."""
        t = start_s
        while t < end_s:
            hour_start = math.floor(t / HOUR_S) * HOUR_S
            piece_end = min(end_s, hour_start + HOUR_S, self.meter.next_break_after(t))
            yield hour_start, t, piece_end
            t = piece_end

    def _charge(self, bucket: Usage, t: float, duration_s: float, gpu_w: float, host_w: float) -> None:
        facility_j = (gpu_w + host_w) * self.meter.site.pue * duration_s
        kwh = facility_j / J_PER_KWH
        bucket.gpu_energy_j += gpu_w * duration_s
        bucket.facility_energy_j += facility_j
        bucket.cost += kwh * self.meter.price_per_kwh(t)
        bucket.co2_g += kwh * self.meter.carbon_g_per_kwh(t)

    def node_draw(self, node: str, gpus: int, start_s: float, end_s: float, gpu_w: float, host_w: float,
                  asleep: bool, measured: bool = False) -> None:
        """A node of `gpus` GPUs drew `gpu_w` + `host_w` from `start_s` to `end_s`; `measured`: the GPU energy
        was read from the GPUs' energy counters (a node asleep or failed draws nothing from them: measured)."""
        for hour, t0, t1 in self._pieces(start_s, end_s):
            bucket = self.node_hours.get((hour, node))
            if bucket is None:
                bucket = self.node_hours[(hour, node)] = Usage()
            self._charge(bucket, t0, t1 - t0, gpu_w, host_w)
            bucket.gpu_hours += gpus * (t1 - t0) / HOUR_S
            if asleep:
                bucket.asleep_s += t1 - t0
            if not measured:
                bucket.modelled_s += t1 - t0

    def tenant_totals(self) -> dict[str, dict[str, float]]:
        """Per tenant, what its jobs were charged over the whole period, and `(idle)`: the rest of the site.

        The same split as a ledger month (docs/LEDGER.md), kept in memory: the rows add up to the meter.
        """
        totals: dict[str, dict[str, float]] = {}
        for (_, tenant), usage in self.tenant_hours.items():
            row = totals.setdefault(tenant, {"energy_kwh": 0.0, "cost": 0.0, "co2_kg": 0.0, "gpu_hours": 0.0})
            row["energy_kwh"] += usage.facility_energy_j / J_PER_KWH
            row["cost"] += usage.cost
            row["co2_kg"] += usage.co2_g / 1000.0
            row["gpu_hours"] += usage.gpu_hours
        charged = {k: sum(r[k] for r in totals.values()) for k in ("energy_kwh", "cost", "co2_kg")}
        meter = self.meter
        totals["(idle)"] = {"energy_kwh": meter.facility_energy_kwh - charged["energy_kwh"],
                            "cost": meter.cost - charged["cost"], "co2_kg": meter.co2_g / 1000.0 - charged["co2_kg"],
                            "gpu_hours": 0.0}
        return {tenant: {k: round(v, 3) for k, v in row.items()} for tenant, row in sorted(totals.items())}

    def job_ran(self, job: Job, units_by_node: dict[str, int], start_s: float, end_s: float,
                gpu_busy_w_by_node: dict[str, float], host_w_by_node: dict[str, float],
                gpus_by_node: dict[str, int]) -> JobCharge:
        """Charge one run segment of `job`, which held `units_by_node` milli-GPUs from `start_s` to `end_s`."""
        gpu_w = sum(units / GPU_UNITS * gpu_busy_w_by_node[node] for node, units in units_by_node.items())
        host_w = sum(units / (GPU_UNITS * gpus_by_node[node]) * host_w_by_node[node]
                     for node, units in units_by_node.items())
        gpus = sum(units_by_node.values()) / GPU_UNITS
        total = Usage()
        for hour, t0, t1 in self._pieces(start_s, end_s):
            bucket = self.tenant_hours.get((hour, job.tenant))
            if bucket is None:
                bucket = self.tenant_hours[(hour, job.tenant)] = Usage()
            self._charge(bucket, t0, t1 - t0, gpu_w, host_w)
            bucket.gpu_hours += gpus * (t1 - t0) / HOUR_S
            self._charge(total, t0, t1 - t0, gpu_w, host_w)
        charge = JobCharge(job.job_id, job.tenant, job.job_class, start_s, end_s, gpus, tuple(sorted(units_by_node)),
                           total.gpu_energy_j, total.facility_energy_j, total.cost, total.co2_g,
                           submit_s=job.submit_time_s)
        self.jobs.append(charge)
        return charge
