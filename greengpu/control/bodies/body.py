"""What the daemon needs of a cluster it runs: observe it as the tick's inputs, carry out one action.

Each source (a fake cluster, Slurm, Kubernetes) is a `ClusterBody`. Bodies translate, they never
decide: every choice comes from the tick (`greengpu.brain.control_tick.control_tick`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

from greengpu.brain.control_tick import TickAction
from greengpu.capping.gpu_power import GpuObservation
from greengpu.model import Cluster, ClusterSnapshot
from greengpu.sleep.sleep_wake import SleepObservation
from greengpu.spot.decide import SpotJobFacts


@dataclass(frozen=True)
class Observation:
    """One look at the cluster, in the tick's terms."""

    snapshot: ClusterSnapshot
    gpus: tuple[GpuObservation, ...]
    sleep: SleepObservation
    gpu_energy_j: dict[str, float]
    """Each node's GPU energy counter (J; the meter charges the differences): empty in a tick's observation,
    filled by the metering job from `ClusterBody.gpu_energy_j`."""
    gpu_settings: dict[tuple[str, int], tuple[float, int | None]]
    """Each observed GPU's limit (W) and locked SM clock (MHz, None: unlocked) now: only what differs is
    written (a journal line and an NVML write per GPU per tick would be noise)."""
    node_faults: dict[str, str] = field(default_factory=dict)
    """Nodes the workload manager reports failed (Slurm `down~`, ResumeTimeout reached), with its reason: the
    daemon alerts once per node and counts them in its failed-node gauge."""
    capacity_facts: Mapping[str, SpotJobFacts] | None = None
    """The pending jobs the capacity lever may steer, with their spot facts as the body reads them (the Slurm
    body's, from each job's comment); None: every waiting job, as the snapshot gives it
    (greengpu.brain.capacity_choice)."""
    capacity_held: Mapping[str, str] = field(default_factory=dict)
    """Pending jobs the body already steered, and to what (`spot`, `on-demand`): the same choice again is no
    action."""


class ActionFailed(RuntimeError):
    """A body could not carry out an action (the loop goes on; the journal says why)."""


class ClusterBody(Protocol):
    """A cluster the daemon observes and acts on."""

    name: str
    """The source's name for logs and /v1/status (fake, slurm, kubernetes)."""
    cluster: Cluster
    """The inventory the body manages."""
    schedules_jobs: bool
    """True when the daemon's PlaceJob/PreemptJob/KillJob are carried out (the fake cluster); a real
    workload manager schedules its own jobs, and the daemon only reads its verdict on what waits."""

    def observe(self, now_s: float, suspends_last_minute: int, wakes_last_minute: int) -> Observation:
        """The cluster now; raises when it cannot be observed (the loop then fails safe)."""
        ...

    def act(self, action: TickAction, now_s: float) -> str:
        """Carry out `action`; returns what was done; raises ActionFailed when it was refused."""
        ...

    def release_gpus(self, reason: str) -> list[str]:
        """Every GPU back to its default limit and clocks unlocked (fail safe); returns what changed."""
        ...

    def gpu_energy_j(self) -> dict[str, float]:
        """Each node's GPU energy counters now (J, summed over its GPUs); nodes without one are left out
        (the meter models them)."""
        ...

    def withdraw_preemptions(self, job_ids: list[str]) -> None:
        """Jobs the tick asked to checkpoint and stop for a job that no longer waits keep running: clear
        their signal (only bodies that carry out the tick's job actions have any)."""
        ...

    def settle(self) -> None:
        """The tick's actions are all carried out (a body that batches its own writes flushes them here)."""
        ...


class AgentsOwnTheGpus:
    """What a body over a real workload manager (Slurm, Kubernetes) answers for the GPUs and jobs it does not own:
    the node agents cap and read the GPUs, and the workload manager preempts its own jobs."""

    def release_gpus(self, reason: str) -> list[str]:
        return []  # the node agents own the GPUs and fall back to defaults on their own

    def gpu_energy_j(self) -> dict[str, float]:
        return {}  # the node agents read the GPUs; the ledger models their energy (docs/DAEMON.md)

    def withdraw_preemptions(self, job_ids: list[str]) -> None:
        return None  # the workload manager preempts its own jobs; greengpu sends it none

    def settle(self) -> None:
        return None  # every action went to the workload manager as it was carried out
