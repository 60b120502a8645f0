"""The fake cluster's MIG GPUs: repartitioned through the fake NVML, read back through the NVML reader.

The inventory's MIG GPUs (the first `mig.gpus` of a node type) are put in MIG mode with no instance at the
start, as the replay starts them (greengpu.sim.mig_body). A `PartitionGpu` is carried out as on a real node:
refused while a job holds an instance of the GPU, else the GPU instances destroyed and the wanted ones
created at their placements (greengpu.backends.nvml_mig_write); the GPU then takes no work for the node
type's `mig.reconfigure_s`, as in the replay. What the snapshot gives the core is what NVML reads back
(greengpu.backends.sharing_live: unreadable or disagreeing GPUs make the node's MIG GPUs unavailable).

The fake NVML keeps its MIG state in memory only, so the layouts and their ready times are written down
here (`fake-mig.json` in the state directory) and made again through NVML when the daemon restarts.
"""

from __future__ import annotations

import json
import logging
import math
import os
from collections.abc import Iterable
from pathlib import Path

import pynvml

from greengpu.backends.fake_nvml import FakeNvml
from greengpu.backends.nvml import NvmlBackend
from greengpu.backends.nvml_mig_write import MigLayoutError, repartition
from greengpu.backends.sharing_live import live_partitions
from greengpu.control.bodies.body import ActionFailed
from greengpu.errors import BadInput
from greengpu.model import TIMESLICE, Cluster, GpuSlot, MigPartition, PartitionGpu, RunningJob
from greengpu.sched.mig import family_of

log = logging.getLogger("greengpu.daemon")


class FakeMig:
    """The MIG GPUs of a fake cluster's nodes."""

    def __init__(self, cluster: Cluster, fakes: dict[str, FakeNvml], nvml: dict[str, NvmlBackend],
                 state_dir: Path) -> None:
        self.cluster = cluster
        self.fakes = fakes
        self.nvml = nvml
        self.path = state_dir / "fake-mig.json"
        self.mig_nodes = [n for n in cluster.nodes if (m := cluster.node_types[n.type_name].mig) and m.gpus]
        self.layouts: dict[tuple[str, int], tuple[tuple[str, ...], float]] = {}
        """(node, GPU) -> (instances greengpu made, when the GPU takes work again)."""
        self.warned: tuple[str, ...] = ()
        self.repartitions = 0
        for node in self.mig_nodes:
            lib = fakes[node.name]
            for index in range(cluster.node_types[node.type_name].mig.gpus):  # type: ignore[union-attr]
                handle = lib.nvmlDeviceGetHandleByIndex(index)
                # MIG mode was set when the node was installed, before any job: a real GPU keeps it across a
                # daemon restart, the fake NVML keeps it in memory only, so it is set again with no process
                # in the way (a job still running after a restart is not a live reset).
                gpu = lib.gpus[index]
                running, gpu.pids = gpu.pids, []
                try:
                    lib.nvmlDeviceSetMigMode(handle, pynvml.NVML_DEVICE_MIG_ENABLE)
                    lib.reset_gpu(index)  # Ampere takes the mode at a reset
                except pynvml.NVMLError as error:  # not a MIG model: the reads say so (fail safe)
                    log.warning("%s GPU %d: cannot enable MIG on the fake GPU: %s", node.name, index, error)
                finally:
                    gpu.pids = running
        self._load()

    def _load(self) -> None:
        """The layouts written down before a restart, made again through NVML; a damaged file is one line."""
        if not self.path.exists():
            return
        try:
            saved = json.loads(self.path.read_text(encoding="utf-8"))
            for node, index, instances, ready_s in saved["layouts"]:
                key = (node, index)
                if not (isinstance(node, str) and type(index) is int and isinstance(instances, list)
                        and all(isinstance(i, str) for i in instances) and type(ready_s) in (int, float)
                        and not math.isnan(ready_s)):
                    raise ValueError(f"layout {str([node, index, instances, ready_s])[:80]}: not node, GPU, "
                                     "instances, ready time")
                mig = self.cluster.node_types[self._type(node)].mig if node in self.fakes else None
                if mig is None or not 0 <= index < mig.gpus:
                    raise ValueError(f"{node!s:.40} GPU {index}: not a MIG GPU of this inventory")
                self._make(node, index, tuple(instances))
                self.layouts[key] = (tuple(instances), float(ready_s))
        except (ValueError, KeyError, TypeError, AttributeError, OSError, pynvml.NVMLError) as error:
            raise BadInput(f"{self.path}: a damaged fake MIG state, or one of another cluster ({error}); move it "
                           "away to start the fake cluster afresh") from None

    def _save(self) -> None:
        rows = [[n, i, list(inst), ready] for (n, i), (inst, ready) in sorted(self.layouts.items())]
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"layouts": rows}))
        os.replace(tmp, self.path)

    def _make(self, node: str, index: int, instances: tuple[str, ...]) -> None:
        family = family_of(self.cluster.node_types[self._type(node)].gpu_model)
        if family is None:
            raise MigLayoutError(f"{self.cluster.node_types[self._type(node)].gpu_model} has no MIG geometry")
        repartition(self.fakes[node], index, family, instances)

    def _type(self, node: str) -> str:
        return next(n.type_name for n in self.cluster.nodes if n.name == node)

    def partition(self, action: PartitionGpu, now_s: float, running: Iterable[RunningJob]) -> str:
        """Carry out a repartition (ActionFailed: refused, nothing changed)."""
        holders = sorted(r.job.job_id for r in running
                         if any((s.node, s.gpu_index) == (action.node, action.gpu_index) for s in r.slots))
        if holders:
            raise ActionFailed(f"{action.node} GPU {action.gpu_index}: not repartitioned, in use by "
                               f"{', '.join(holders)}")
        mig = self.cluster.node_types[self._type(action.node)].mig
        if mig is None or action.gpu_index >= mig.gpus:
            raise ActionFailed(f"{action.node} GPU {action.gpu_index}: not a MIG GPU of the inventory")
        try:
            self._make(action.node, action.gpu_index, action.instances)
        except (MigLayoutError, pynvml.NVMLError) as error:
            raise ActionFailed(f"{action.node} GPU {action.gpu_index}: repartition to "
                               f"{' '.join(action.instances)} failed: {error}") from None
        ready_s = now_s + mig.reconfigure_s
        self.layouts[(action.node, action.gpu_index)] = (action.instances, ready_s)
        self.repartitions += 1
        self._save()
        return (f"{action.node} GPU {action.gpu_index}: repartitioned into {' '.join(action.instances)}, "
                f"takes work from {ready_s:.0f}")

    def partitions(self) -> dict[tuple[str, int], MigPartition]:
        """The MIG GPUs' partitions as NVML reads them (fail safe where it cannot), warning once per change."""
        if not self.mig_nodes:
            return {}
        readings = [self.nvml[n.name].read_node_sharing(n.name) for n in self.mig_nodes]
        ready = {key: ready_s for key, (_, ready_s) in self.layouts.items()}
        found, warnings = live_partitions(self.cluster, readings, ready)
        if tuple(warnings) != self.warned:
            for line in warnings:
                log.warning("%s", line)
            self.warned = tuple(warnings)
        return found

    def place_problem(self, slots: Iterable[GpuSlot], now_s: float) -> str | None:
        """Why a placement on MIG instances cannot start now (an instance that does not exist, or a GPU still
        reconfiguring or unavailable), or None."""
        wanted = [s for s in slots if s.instance and s.instance != TIMESLICE]
        if not wanted:
            return None
        partitions = self.partitions()
        for slot in wanted:
            partition = partitions.get((slot.node, slot.gpu_index))
            if partition is None or slot.instance not in partition.instances:
                return f"{slot.node} GPU {slot.gpu_index} has no MIG instance {slot.instance}"
            if partition.ready_s > now_s:
                return f"{slot.node} GPU {slot.gpu_index} is being repartitioned or unavailable"
        return None
