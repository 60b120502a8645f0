"""Power and pace of running jobs: what capping does to a job's draw and speed, and the work it has done.

Each busy GPU's setting comes from the tick's capping lever (`greengpu.capping.gpu_power.gpu_setting`) on an
observation built from the inventory's node type, exactly as the agent asks it of a real GPU; the
power model then gives the GPU's draw and the job's speed under that setting. A job's capping can
change while it runs (caps lift while work waits), so its work is integrated over its paces.
"""

from __future__ import annotations

from collections.abc import Iterable

from greengpu.capping.cap_decision import busy_effect
from greengpu.capping.gpu_power import GpuObservation, gpu_setting, observe_typed_gpu
from greengpu.energy import job_pace
from greengpu.energy.job_pace import Pace
from greengpu.model import Cluster, Job, RunningJob
from greengpu.policy import CappingPolicy
from greengpu.sim.nodes import SimNode

__all__ = ["Pace", "Pacer"]


class Pacer:
    """The capping effect per (node type, class, lifted) and every running job's paces."""

    def __init__(self, cluster: Cluster, policy: CappingPolicy) -> None:
        self.cluster = cluster
        self.policy = policy
        self._effects: dict[tuple[str, str, bool], tuple[float, float]] = {}
        self._slowdowns: dict[tuple[str, str], float] = {}
        self.lifted: set[str] = set()
        """Running jobs whose caps are lifted because work waits (`relax_when_queued`)."""
        self.paces: dict[str, list[Pace]] = {}

    def observation(self, node: SimNode, gpu_index: int, job_class: str | None) -> GpuObservation:
        """The tick's view of one simulated GPU: what the inventory says of its node type."""
        return observe_typed_gpu(node.name, gpu_index, self.cluster.node_types[node.type_name], job_class)

    def effect(self, job: Job, node: SimNode) -> tuple[float, float]:
        """(busy watts per GPU, speed) of `job` on `node` under the capping lever now."""
        lifted = job.job_id in self.lifted
        key = (node.type_name, job.job_class, lifted)
        effect = self._effects.get(key)
        if effect is None:
            node_type = self.cluster.node_types[node.type_name]
            if self.policy.enabled:
                # Every GPU of a type is alike in a replay: one observation stands for all of them. The speed is
                # that of the setting the GPU would hold (its limit, its clock in whole MHz), as the fake
                # cluster paces a job by what its GPUs hold (greengpu.energy.job_pace).
                gpu = self.observation(node, 0, job.job_class)
                decision = gpu_setting(gpu, self.policy, lifted)
                speed = job_pace.setting_speed(node_type, job.job_class, decision.limit_w, decision.locked_clock_mhz,
                                               gpu.max_clock_mhz)
                effect = (busy_effect(decision, node_type)[0], speed)
            else:
                effect = (node_type.gpu_max_w, 1.0)
            self._effects[key] = effect
        return effect

    def speed(self, job: Job, nodes: Iterable[SimNode]) -> float:
        """The rate `job` runs at on these nodes relative to uncapped: the slowest node sets the pace."""
        return min(self.effect(job, node)[1] for node in nodes)

    def capped_slowdown(self, job: Job, node: SimNode) -> float:
        """The run-time increase (0.05: 5% slower) the capping lever expects of `job`'s cap on `node` (its cap
        not lifted), as every body prices a cap (greengpu.capping.forecast_caps); 0 for a class never capped."""
        key = (node.type_name, job.job_class)
        slowdown = self._slowdowns.get(key)
        if slowdown is None:
            gpu = self.observation(node, 0, job.job_class)
            slowdown = self._slowdowns[key] = gpu_setting(gpu, self.policy, False).expected_slowdown
        return slowdown

    def busy_w(self, running: RunningJob, nodes: dict[str, SimNode]) -> dict[str, float]:
        """Watts of each of `running`'s busy GPUs, per node, under its capping now."""
        return {name: self.effect(running.job, nodes[name])[0] for name in running.nodes}

    @staticmethod
    def run_s(work_s: float, speed: float) -> float:
        """Wall seconds for `work_s` of uncapped work at `speed` (whole seconds, like the trace)."""
        return job_pace.run_s(work_s, speed)

    def begin(self, job_id: str, now_s: float, speed: float) -> None:
        """A job starts (again) at `speed`, with no work done in this run yet."""
        self.paces[job_id] = [(now_s, speed, 0.0)]

    def change(self, job_id: str, now_s: float, speed: float) -> float:
        """A running job goes on at a new `speed` from `now_s`; returns the work it has done so far."""
        paces = self.paces[job_id]
        paces.append(job_pace.next_pace(paces, now_s, speed))
        return paces[-1][2]

    def current_speed(self, job_id: str) -> float:
        return self.paces[job_id][-1][1]

    def work_done_s(self, job_id: str, at_s: float) -> float:
        """Uncapped seconds of work the job had done by `at_s` in this run (its paces integrated)."""
        return job_pace.work_done_s(self.paces[job_id], at_s)

    def end(self, job_id: str) -> None:
        """The job stopped: forget its paces and its lifted cap."""
        self.paces.pop(job_id, None)
        self.lifted.discard(job_id)
