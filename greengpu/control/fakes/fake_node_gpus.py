"""The fake cluster's GPUs as its nodes hold them: one fake NVML per node behind the real NVML adapter, the jobs
that load each GPU (fractional jobs share one, as the core packs them), and the node agents' cached reads, read
again only when something changed a node's GPUs (a job started or ended, greengpu wrote a limit or a clock, the
node woke), so the cached view is exact (split from greengpu.control.fakes.fake_cluster).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import replace
from pathlib import Path

from greengpu.backends.fake_nvml import FakeGpu, FakeNvml
from greengpu.backends.nvml import NvmlBackend
from greengpu.capping.gpu_power import NOMINAL_MAX_CLOCK_MHZ, GpuObservation, host_share_w
from greengpu.control.agent.jobclass import GpuJob
from greengpu.control.agent.node_agent import gpu_observation
from greengpu.model import Cluster, GpuSlot, Job, NodeType, RunningJob

BUSY_UTILIZATION = 0.9
GpuSettings = dict[tuple[str, int], tuple[float, int | None]]
"""(node, GPU index) -> (power limit W, locked clock MHz or None), as the tick is given them."""


class FakeNodeGpus:
    """Each node's fake GPUs: their NVML, their load, and the tick's cached view of them."""

    def __init__(self, cluster: Cluster, state_dir: Path, clock: Callable[[], float],
                 running: Iterable[RunningJob]) -> None:
        """`clock`: the fake cluster's time, on which the fake GPUs' energy counters run."""
        self.views: dict[str, tuple[list[GpuObservation], GpuSettings]] = {}
        """Each awake node's GPUs as last read (observations and settings), until something changes them."""
        self.stale: set[str] = {node.name for node in cluster.nodes}
        """Nodes whose GPUs must be read again at the next observation."""
        self.taken: dict[tuple[str, int], int] = {}
        """Milli-GPUs in use on each GPU that holds a job (fractional jobs share a GPU, as the core packs them)."""
        for slot in (s for r in running for s in r.slots):
            self.taken[(slot.node, slot.gpu_index)] = self.taken.get((slot.node, slot.gpu_index), 0) + slot.units
        self.nvml: dict[str, NvmlBackend] = {}
        self.fakes: dict[str, FakeNvml] = {}
        for node in cluster.nodes:
            t = cluster.node_types[node.type_name]
            gpus = [FakeGpu(name=f"fake {t.gpu_model}", min_limit_w=t.gpu_min_limit_w, max_limit_w=t.gpu_max_w,
                            default_limit_w=t.gpu_max_w, idle_w=t.gpu_idle_w, draw_w=t.gpu_max_w,
                            max_sm_clock_mhz=t.gpu_max_clock_mhz or NOMINAL_MAX_CLOCK_MHZ,
                            uuid=f"GPU-{node.name}-{i}") for i in range(t.gpus)]
            self.fakes[node.name] = FakeNvml(gpus, state_path=state_dir / f"nvml-{node.name}.json", clock=clock)
            backend = NvmlBackend(lib=self.fakes[node.name])
            backend.open()
            self.nvml[node.name] = backend

    def load(self, slot: GpuSlot, job: Job) -> None:
        """`job` starts on `slot`: a GPU it is the first on runs busy, set for it."""
        key = (slot.node, slot.gpu_index)
        if key not in self.taken:  # a shared GPU stays set for the job that was there first
            self.fakes[slot.node].set_load(slot.gpu_index, BUSY_UTILIZATION, [hash(job.job_id) % 30000 + 1])
            self.note_job(slot.node, slot.gpu_index, job)
        self.taken[key] = self.taken.get(key, 0) + slot.units

    def unload(self, slot: GpuSlot, running: Iterable[RunningJob]) -> None:
        """A job left `slot`: its GPU idles, or stays set for a job of `running` still on it."""
        key = (slot.node, slot.gpu_index)
        self.taken[key] = self.taken.get(key, 0) - slot.units
        if self.taken[key] <= 0:
            del self.taken[key]
            self.note_job(slot.node, slot.gpu_index, None)
            self.fakes[slot.node].set_load(slot.gpu_index, 0.0, [])
        else:  # a shared GPU: it is set for a job still on it
            self.note_job(slot.node, slot.gpu_index, next(
                r.job for r in running if any((t.node, t.gpu_index) == key for t in r.slots)))

    def view(self, name: str, node_type: NodeType, on_gpu: dict[tuple[str, int], Job]) -> tuple[
            list[GpuObservation], GpuSettings]:
        """Node `name`'s GPUs as the tick sees them: read through the NVML adapter when something changed
        them since the last reading, else as last read."""
        view = self.views.get(name)
        if view is not None and name not in self.stale:
            return view
        backend, fakes = self.nvml[name], self.fakes[name].gpus
        gpus: list[GpuObservation] = []
        settings: GpuSettings = {}
        share_w = host_share_w(node_type)
        for index in range(backend.gpu_count):
            reading = backend.read(index)
            settings[(name, index)] = (reading.limit_w, fakes[index].locked_clock_mhz)
            job = on_gpu.get((name, index))
            seen = GpuJob(job.job_id, job.job_class, job.tenant) if job else None
            gpus.append(gpu_observation(name, reading, seen, False, share_w))
        self.views[name] = (gpus, settings)
        self.stale.discard(name)
        return gpus, settings

    def note_job(self, name: str, index: int, job: Job | None) -> None:
        """A job started on (or left) GPU `index` of `name`: its cached view follows (a shared GPU shows the
        job set on it first)."""
        view = self.views.get(name)
        if view is None or name in self.stale:
            return
        gpus = view[0]
        seen = gpus[index]
        assert seen.gpu_index == index
        gpus[index] = replace(seen, job_class=job.job_class if job is not None else None,
                              job_id=job.job_id if job is not None else None)

    def note_setting(self, name: str, index: int, limit_w: float, clock_mhz: int | None) -> None:
        """greengpu wrote GPU `index` of `name`: its cached settings follow what the GPU now holds."""
        view = self.views.get(name)
        if view is not None and name not in self.stale:
            view[1][(name, index)] = (limit_w, clock_mhz)
