"""The invariants a replay checks as it goes, against books of its own (not the core's).

Each cycle checks what its own placements could break (partial gangs, over-committed GPUs, jobs on
nodes that are not awake, quotas); a full `check_invariants` over every running job, the independent
oracle, also runs every `full_check_every` cycles and at the end. The incremental check keeps "at
every event" affordable on 64k-job traces.
"""

from __future__ import annotations

from collections.abc import Mapping

from greengpu.model import GPU_UNITS, Cluster, PowerState, RunningJob
from greengpu.sched.quota import QuotaLedger
from greengpu.sched.state import cluster_layout
from greengpu.sim.nodes import SimNode

FULL_CHECK_EVERY = 2000
"""Cycles between full invariant checks (every cycle checks what its own placements could break)."""


class PlacementChecks:
    """The replay's own books of GPU shares and tenant quotas, and the violations found."""

    def __init__(self, cluster: Cluster, full_check_every: int = FULL_CHECK_EVERY) -> None:
        layout = cluster_layout(cluster)
        self.ledger = QuotaLedger(cluster, layout.model_of_node, layout.memory_of_node, True)
        self.gpu_units: dict[tuple[str, int], int] = {}
        self.full_check_every = full_check_every
        self.violations = 0
        self.examples: list[str] = []

    def started(self, running: RunningJob) -> None:
        self.ledger.charge(running)
        for slot in running.slots:
            key = (slot.node, slot.gpu_index)
            self.gpu_units[key] = self.gpu_units.get(key, 0) + slot.units

    def stopped(self, running: RunningJob) -> None:
        self.ledger.charge(running, -1)
        for slot in running.slots:
            self.gpu_units[(slot.node, slot.gpu_index)] -= slot.units

    def record(self, problems: list[str]) -> None:
        if problems:
            self.violations += len(problems)
            self.examples.extend(problems[: max(0, 5 - len(self.examples))])

    def check_placements(self, placed: list[RunningJob], nodes: Mapping[str, SimNode]) -> list[str]:
        """The invariants this cycle's placements could break."""
        problems: list[str] = []
        for running in placed:
            job = running.job
            if sum(s.units for s in running.slots) != job.units and not job.gpu_profile:  # shares: check_invariants
                problems.append(f"partial gang: {job.job_id}")
            for slot in running.slots:
                if self.gpu_units.get((slot.node, slot.gpu_index), 0) > GPU_UNITS:
                    problems.append(f"over-committed GPU {slot.node}:{slot.gpu_index}")
                if nodes[slot.node].power is not PowerState.AWAKE:
                    problems.append(f"{job.job_id} placed on {slot.node}, which is {nodes[slot.node].power}")
        if placed:
            problems.extend(self.ledger.violations())
        return problems
