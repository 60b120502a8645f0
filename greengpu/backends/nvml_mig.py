"""The NVML MIG reads of `NvmlBackend`: each GPU's MIG mode (current and pending) and its GPU instances
with their profiles and placements, into `greengpu.backends.gpu_sharing`'s typed reading.

How NVML is asked (the calls of `nvidia-ml-py`):

- `nvmlDeviceGetMigMode(handle)` -> [current, pending]. `NotSupported` (or `FunctionNotFound` on an old
  driver): the GPU has no MIG (before Ampere, consumer cards) - a fact, not an error.
- in MIG mode, for every GPU-instance profile (`NVML_GPU_INSTANCE_PROFILE_*`):
  `nvmlDeviceGetGpuInstanceProfileInfo(handle, profile)` (`NotSupported` or `InvalidArgument`: this GPU
  has no such profile), then `nvmlDeviceGetGpuInstances(handle, info.id, array, byref(count))` - by the
  profile's *id*, which is not the enum value - and `nvmlGpuInstanceGetInfo(instance)` for each
  instance's placement. A driver without the version-2 profile call (`FunctionNotFound`) is asked
  version 1, which has no name: the name is then made from the slices and memory.

Every other NVML error makes that GPU's reading `unreadable` with the error's name: the agent carries on,
and whoever compares the reading with the inventory is told the GPU could not be read (fail safe).

A mixin: it uses the backend's `_lib`, `_lock` and `_handle`.
"""

from __future__ import annotations

import ctypes
import logging
import math
import threading
from collections.abc import Callable

import pynvml

from greengpu.backends.gpu_sharing import GpuSharing, MigInstance, NodeSharing, node_from_gpus
from greengpu.backends.nvml_support import NvmlHandle, NvmlLib, ProfileInfo

log = logging.getLogger("greengpu.nvml")

_NO_MIG = (pynvml.NVMLError_NotSupported, pynvml.NVMLError_FunctionNotFound)
_NO_PROFILE = (pynvml.NVMLError_NotSupported, pynvml.NVMLError_InvalidArgument)


def gpu_instances(lib: NvmlLib, handle: NvmlHandle, info: ProfileInfo) -> list[NvmlHandle]:
    """The GPU instance handles of one profile (`info`, from nvmlDeviceGetGpuInstanceProfileInfo) on a GPU."""
    capacity = int(info.instanceCount)
    if capacity <= 0:
        return []
    array = (pynvml.c_nvmlGpuInstance_t * capacity)()
    count = ctypes.c_uint(0)
    lib.nvmlDeviceGetGpuInstances(handle, int(info.id), array, ctypes.byref(count))
    return [array[slot] for slot in range(min(int(count.value), capacity))]


def profile_name(info: ProfileInfo) -> str:
    """A GPU-instance profile's name (`1g.5gb`) from NVML's profile info: its `name` (`MIG 1g.5gb`) when
    the driver gives one (version 2), else made from its slices and its memory rounded up to GB, as
    NVML names the profiles (4864 MB: `5gb`)."""
    raw = getattr(info, "name", b"")
    name = raw.decode(errors="replace") if isinstance(raw, bytes) else str(raw)
    name = name.strip().removeprefix("MIG ").strip()
    if name:
        return name
    return f"{int(info.sliceCount)}g.{math.ceil(int(info.memorySizeMB) / 1024)}gb"


class MigReads:
    """MIG state of the backend's GPUs (mixed into NvmlBackend)."""

    _lib: NvmlLib
    _lock: threading.RLock
    _handle: Callable[[int], NvmlHandle]
    _handles: list[NvmlHandle]

    def read_sharing(self, index: int) -> GpuSharing:
        """GPU `index`'s MIG mode and GPU instances. Never raises an NVML error: an unreadable GPU says why."""
        with self._lock:
            handle = self._handle(index)
            try:
                current, pending = self._lib.nvmlDeviceGetMigMode(handle)
            except _NO_MIG:
                return GpuSharing(index=index, mig_capable=False, mig_enabled=False, pending_mig=False)
            except pynvml.NVMLError as error:
                return _unreadable(index, "MIG mode", error)
            enabled = int(current) == pynvml.NVML_DEVICE_MIG_ENABLE
            instances: tuple[MigInstance, ...] = ()
            if enabled:
                try:
                    instances = self._instances(handle)
                except pynvml.NVMLError as error:
                    return _unreadable(index, "GPU instances", error)
            return GpuSharing(index=index, mig_capable=True, mig_enabled=enabled,
                              pending_mig=int(pending) == pynvml.NVML_DEVICE_MIG_ENABLE, instances=instances)

    def read_node_sharing(self, node: str) -> NodeSharing:
        """Every GPU's MIG reading, as the node's."""
        return node_from_gpus(node, [self.read_sharing(i) for i in range(len(self._handles))])

    def _instances(self, handle: NvmlHandle) -> tuple[MigInstance, ...]:
        lib = self._lib
        found = []
        for profile in range(pynvml.NVML_GPU_INSTANCE_PROFILE_COUNT):
            try:
                info = self._profile_info(handle, profile)
            except _NO_PROFILE:
                continue
            name = profile_name(info)
            for instance in gpu_instances(lib, handle, info):
                gi = lib.nvmlGpuInstanceGetInfo(instance)
                found.append(MigInstance(profile=name, start=int(gi.placement.start), size=int(gi.placement.size),
                                         instance_id=int(gi.id)))
        return tuple(sorted(found, key=lambda i: (i.start, i.profile)))


    def _profile_info(self, handle: NvmlHandle, profile: int) -> ProfileInfo:
        """The profile's info: version 2 (with its name), or version 1 on a driver without the V call."""
        try:
            return self._lib.nvmlDeviceGetGpuInstanceProfileInfo(handle, profile)
        except pynvml.NVMLError_FunctionNotFound:
            return self._lib.nvmlDeviceGetGpuInstanceProfileInfo(handle, profile, 1)


def _unreadable(index: int, what: str, error: pynvml.NVMLError) -> GpuSharing:
    why = f"{what}: {error} ({type(error).__name__})"
    log.warning("GPU %d: NVML could not read its %s; its sharing is reported unreadable", index, why)
    return GpuSharing(index=index, mig_capable=False, mig_enabled=False, pending_mig=False, unreadable=why)
