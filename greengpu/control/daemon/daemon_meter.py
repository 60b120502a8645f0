"""The daemon's metering into the SQLite ledger, so that `greengpu report` bills real months.

Each tick charges the time since the last one. A node's GPU energy is measured where the body reads
the GPUs' energy counters (the fake cluster, agents' counters) or the caller hands the period's energy in
(`record(..., measured_gpu_energy_j=...)`), else modelled from the inventory: a
busy GPU at its default limit, an idle one at its idle power. Host energy is modelled (the inventory's
idle or sleep power). A job is charged its GPUs' share of its nodes' GPU power and of their hosts, as
in a replay, so tenant rows plus idle add up to the site. Each tick is one transaction in the ledger; each
node-hour says its basis: `measured` only where every period of it was measured, `modelled` otherwise.
A body that tells more (`facts`, greengpu.control.daemon.meter_facts) adds the period's cloud rows, priced and
charged CO2 as a replay's (greengpu.accounting.cloud_rows), its cloud jobs' rows, and how each job that left
the running set ended. Each job row carries the job's submit time, MIG profile and, where an agent reported it,
how long its checkpoint took.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import replace
from typing import TYPE_CHECKING

from greengpu.accounting.attribution import Attribution
from greengpu.accounting.cloud_rows import CloudUsage, site_cloud_hours
from greengpu.accounting.ledger_url import Ledger
from greengpu.accounting.ledger_write import append_usage, open_metered_run
from greengpu.accounting.meter import EnergyMeter
from greengpu.control.bodies.body import Observation
from greengpu.model import GPU_UNITS, Cluster, PowerState

if TYPE_CHECKING:
    from greengpu.control.daemon.meter_facts import LedgerFacts

MAX_GAP_S = 900.0
"""A gap longer than this between two ticks (the daemon was down) is not charged: nobody measured it."""


class DaemonMeter:
    """Charges every tick's period to the ledger run `run_id` at `path`."""

    def __init__(self, cluster: Cluster, path: Ledger, run_id: int) -> None:
        self.cluster = cluster
        self.path = path
        self.run_id = run_id
        self._then_s: float | None = None
        self._energy_then: dict[str, float] = {}
        self._type = {n.name: n.type_name for n in cluster.nodes}
        self.gpu_profiles: dict[str, str] = {}
        """Per job id, the MIG instance profile it runs on (set by whoever knows it; '' or absent: whole GPUs)."""
        self.measured_nodes: set[str] = set()
        """Nodes whose GPU energy came from counters at the last period (the rest was modelled)."""
        self.facts: LedgerFacts | None = None
        """What the body tells beyond an observation (cloud node time, how jobs ended); None: nothing more."""
        self.checkpoint_s: dict[str, float] = {}
        """Per job id, how long its last reported checkpoint took (s)."""
        self._charged: set[str] = set()
        """The on-premises jobs charged at the last period (one gone since has ended: its outcome is settled)."""
        self._unsettled: set[str] = set()
        """Jobs that ended while a period was not charged (the first, or after a gap): settled at the next one."""

    @property
    def last_s(self) -> float | None:
        """When the last period ended (None before the first tick): where the next one starts."""
        return self._then_s

    @classmethod
    def open(cls, cluster: Cluster, path: Ledger, run_id: int | None, policy: str, source: str,
             cluster_name: str = "") -> DaemonMeter:
        """Continue run `run_id`, or open a new daemon run in the ledger (an SQLite file or PostgreSQL)."""
        if run_id is None:
            run_id = open_metered_run(path, cluster.site, policy=policy, source=source, cluster=cluster_name)
        return cls(cluster, path, run_id)

    def record(self, seen: Observation, measured_gpu_energy_j: Mapping[str, float] | None = None,
               checkpoint_s: Mapping[str, float] | None = None) -> None:
        """Charge the period since the last tick (nothing at the first one). `measured_gpu_energy_j`: per node,
        the GPU energy measured over this period (J, e.g. from agents' counters); it wins over the body's own
        counters, and a node missing from it (or given a negative or non-finite figure) is modelled.
        `checkpoint_s`: per job, how long its last checkpoint took (the agents' reports)."""
        now_s = seen.snapshot.time_s
        then_s, self._then_s = self._then_s, now_s
        energy_then, self._energy_then = self._energy_then, dict(seen.gpu_energy_j)
        self.checkpoint_s.update({j: s for j, s in (checkpoint_s or {}).items() if math.isfinite(s) and s >= 0})
        running_ids = {r.job.job_id for r in seen.snapshot.running}
        ended, self._charged = (self._charged | self._unsettled) - running_ids, running_ids
        if then_s is None or not 0 < now_s - then_s <= MAX_GAP_S:
            self._unsettled = ended  # settled with the next period charged
            return
        self._unsettled = set()
        attribution = Attribution(EnergyMeter(self.cluster.site))
        counters = _Counters(energy_then, seen.gpu_energy_j, measured_gpu_energy_j or {})
        busy_w_per_gpu = self._charge_nodes(attribution, seen, counters, then_s, now_s)
        self._charge_jobs(attribution, seen, busy_w_per_gpu, then_s, now_s)
        outcomes = self._settle(ended, seen)
        cloud = self._charge_cloud(attribution, then_s, now_s)
        # The period's bounds are its key in the ledger: the same period sent twice is charged once.
        append_usage(self.path, self.run_id, attribution, start_s=then_s, end_s=now_s, cloud=cloud,
                     outcomes=outcomes)

    def _charge_nodes(self, attribution: Attribution, seen: Observation, counters: _Counters, then_s: float,
                      now_s: float) -> dict[str, float]:
        """Each node's draw over the period into `attribution` (and `measured_nodes` anew); per node with busy
        GPUs, the GPU power above idle per busy GPU (W), which its jobs are charged."""
        busy_gpus: dict[str, float] = {}
        for running in seen.snapshot.running:
            for name, units in running.units_by_node.items():
                busy_gpus[name] = busy_gpus.get(name, 0.0) + units / GPU_UNITS
        busy_w_per_gpu: dict[str, float] = {}
        self.measured_nodes = set()
        for node in self.cluster.nodes:
            node_type = self.cluster.node_types[node.type_name]
            state = seen.snapshot.node_states.get(node.name)
            power = state.power if state is not None else PowerState.AWAKE
            asleep = power is PowerState.ASLEEP
            host_w = node_type.host_sleep_w if asleep else node_type.host_idle_w
            busy = min(float(node_type.gpus), busy_gpus.get(node.name, 0.0))
            idle_w = (node_type.gpus - busy) * node_type.gpu_idle_w
            measured_w = None if asleep or power is PowerState.FAILED else counters.gpu_w(node.name, now_s - then_s)
            if asleep or power is PowerState.FAILED:
                gpu_w = 0.0
            elif measured_w is not None:
                gpu_w = measured_w
                self.measured_nodes.add(node.name)
            else:
                gpu_w = idle_w + busy * node_type.gpu_max_w
            if busy > 0:
                busy_w_per_gpu[node.name] = max(0.0, gpu_w - idle_w) / busy
            attribution.node_draw(node.name, node_type.gpus, then_s, now_s, gpu_w, host_w, asleep,
                                  measured=node.name in self.measured_nodes)
        return busy_w_per_gpu

    def _charge_jobs(self, attribution: Attribution, seen: Observation, busy_w_per_gpu: Mapping[str, float],
                     then_s: float, now_s: float) -> None:
        """Each running job's share of its nodes' GPU power and hosts, with its GPU model, MIG profile, submit
        time and last checkpoint's duration."""
        for running in seen.snapshot.running:
            held = dict(running.units_by_node)
            gpus = {n: self.cluster.node_types[self._type[n]].gpus for n in held}
            hosts = {n: self.cluster.node_types[self._type[n]].host_idle_w for n in held}
            attribution.job_ran(running.job, held, max(then_s, running.start_time_s), now_s,
                                {n: busy_w_per_gpu.get(n, 0.0) for n in held}, hosts, gpus)
            models = sorted({self.cluster.node_types[self._type[n]].gpu_model for n in held})
            job = running.job
            attribution.jobs[-1] = replace(attribution.jobs[-1], gpu_model="+".join(models),
                                           gpu_profile=job.gpu_profile or self.gpu_profiles.get(job.job_id, ""),
                                           submit_s=job.submit_time_s, checkpoint_s=self.checkpoint_s.get(job.job_id))

    def _settle(self, ended: set[str], seen: Observation) -> dict[str, str]:
        """How each job that left the running set ended; a completed one's checkpoint duration is forgotten."""
        waiting = {p.job.job_id for p in seen.snapshot.pending}
        outcomes = {job_id: self._outcome(job_id, waiting) for job_id in ended}
        for job_id in (j for j, outcome in outcomes.items() if outcome == "completed"):
            self.checkpoint_s.pop(job_id, None)  # done with: the map keeps only jobs that may run again
        return outcomes

    def _charge_cloud(self, attribution: Attribution, then_s: float,
                      now_s: float) -> dict[tuple[float, str, str], CloudUsage]:
        """The period's cloud rows (priced by site_cloud_hours) and its cloud jobs' segments, where the body tells
        them (`facts`); else none."""
        if self.facts is None:
            return {}
        cloud = site_cloud_hours(self.cluster, self.facts.cloud_spans(then_s, now_s), self.facts.regions, {})
        attribution.jobs.extend(replace(s, checkpoint_s=self.checkpoint_s.get(s.job_id))
                                for s in self.facts.cloud_segments(then_s, now_s))
        return cloud

    def _outcome(self, job_id: str, waiting: set[str]) -> str:
        """How a job that left the running set ended: the body's word, else `preempted` when it waits again."""
        told = self.facts.job_outcome(job_id) if self.facts is not None else ""
        return told or ("preempted" if job_id in waiting else "")


class _Counters:
    """A period's measured GPU energy per node: what the caller hands in, else the body's counters."""

    def __init__(self, before_j: Mapping[str, float], after_j: Mapping[str, float],
                 given_j: Mapping[str, float]) -> None:
        self._before_j, self._after_j, self._given_j = before_j, after_j, given_j

    def gpu_w(self, node: str, period_s: float) -> float | None:
        """The node's measured GPU power over the period (W); None where nothing measured it (then modelled): no
        finite non-negative figure handed in and no counter pair that did not go backwards."""
        given = self._given_j.get(node)
        if given is not None and math.isfinite(given) and given >= 0:
            return given / period_s
        before, after = self._before_j.get(node), self._after_j.get(node)
        if before is not None and after is not None and after >= before:
            return (after - before) / period_s
        return None
