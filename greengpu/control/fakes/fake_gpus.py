"""The fake cluster's GPUs as the daemon writes and reads them: limits and clocks through the real NVML adapter,
the fail-safe release, the energy counters (split from greengpu.control.fakes.fake_cluster, whose `FakeCluster` mixes
this in)."""

from __future__ import annotations

from greengpu.backends.fake_nvml import FakeNvml
from greengpu.backends.nvml import NvmlBackend
from greengpu.control.bodies.body import ActionFailed
from greengpu.control.fakes.fake_cluster_state import FakeNode
from greengpu.control.fakes.fake_node_gpus import FakeNodeGpus
from greengpu.model import LockClocks, PowerState, SetPowerLimit


class FakeGpus:
    """Mixed into `FakeCluster`: what it does with its nodes' fake GPUs."""

    nodes: dict[str, FakeNode]
    nvml: dict[str, NvmlBackend]
    fakes: dict[str, FakeNvml]
    node_gpus: FakeNodeGpus

    def gpu_energy_j(self) -> dict[str, float]:
        """Each awake node's GPU energy counters now (J), summed; nodes without counters are left out."""
        energy: dict[str, float] = {}
        for name, backend in self.nvml.items():
            # A node still suspending has its GPUs powered, at whatever limit they were given: they go back
            # too (after a SIGTERM they stayed at 100 W). Asleep or booting, a node's GPUs are off.
            if self.nodes[name].power not in (PowerState.AWAKE.value, PowerState.SUSPENDING.value):
                continue
            readings = [backend.energy_j(index) for index in range(backend.gpu_count)]
            if readings and all(r is not None for r in readings):
                energy[name] = sum(r for r in readings if r is not None)
        return energy

    def _write(self, action: SetPowerLimit | LockClocks) -> str:
        if isinstance(action, SetPowerLimit):
            done = self._awake_backend(action.node).set_power_limit_w(action.gpu_index, action.limit_w)
            if done is None:
                raise ActionFailed(f"{action.node} GPU {action.gpu_index}: NVML refused the limit")
            return f"{action.node} GPU {action.gpu_index}: {done:g} W"
        backend = self._awake_backend(action.node)
        if action.min_mhz is None:
            backend.reset_clocks(action.gpu_index)
            return f"{action.node} GPU {action.gpu_index}: clocks unlocked"
        if not backend.lock_clocks_mhz(action.gpu_index, action.min_mhz):
            raise ActionFailed(f"{action.node} GPU {action.gpu_index}: NVML refused the clock lock")
        return f"{action.node} GPU {action.gpu_index}: clocks locked at {action.min_mhz} MHz"

    def _awake_backend(self, node: str) -> NvmlBackend:
        if self.nodes[node].power != PowerState.AWAKE.value:
            raise ActionFailed(f"{node}: not awake")
        return self.nvml[node]

    def release_gpus(self, reason: str) -> list[str]:
        lines = []
        self.node_gpus.stale.update(self.nvml)
        for name, backend in self.nvml.items():
            # A node still suspending has its GPUs powered, at whatever limit they were given: they go back
            # too (after a SIGTERM they stayed at 100 W). Asleep or booting, a node's GPUs are off.
            if self.nodes[name].power not in (PowerState.AWAKE.value, PowerState.SUSPENDING.value):
                continue
            for index in range(backend.gpu_count):
                reading = backend.read(index)
                if reading.limit_w != reading.constraints.default_w:
                    backend.reset_power_limit(index)
                    lines.append(f"{name} GPU {index}: back to {reading.constraints.default_w:g} W ({reason})")
                backend.reset_clocks(index)
        return lines

    def gpu_limit_w(self, node: str, index: int) -> float:
        """The limit a GPU holds now (tests)."""
        return self.nvml[node].read(index).limit_w
