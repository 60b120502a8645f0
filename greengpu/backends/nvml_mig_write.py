"""Repartitioning one MIG GPU through NVML: destroy its GPU instances, create the wanted ones at their placements.

The calls of `nvidia-ml-py` (the same on the real library and on `greengpu.backends.fake_nvml`):
`nvmlDeviceGetMigMode` (the GPU must be in MIG mode now), `nvmlDeviceGetGpuInstanceProfileInfo` for each
profile enum (its id and name), `nvmlDeviceGetGpuInstances` + `nvmlGpuInstanceDestroy` for the old
instances, then `nvmlDeviceCreateGpuInstanceWithPlacement` for each `profile@start`. Every NVML error is
raised as is (`pynvml.NVMLError_*`): the caller says what it means (root needed, an instance in use).
Instances are checked against the GPU's geometry before anything is destroyed, so a layout the GPU cannot
hold changes nothing.
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence

import pynvml

from greengpu.backends.nvml_mig import gpu_instances, profile_name
from greengpu.backends.nvml_support import NvmlHandle, NvmlLib, ProfileInfo
from greengpu.sched.mig import MigFamily, layout_problem, parse_instance


class MigLayoutError(ValueError):
    """The wanted instances cannot exist on this GPU (nothing was changed)."""


def _profiles(lib: NvmlLib, handle: NvmlHandle) -> dict[str, ProfileInfo]:
    """The GPU's instance profiles by name (`1g.5gb`) -> NVML profile info."""
    found: dict[str, ProfileInfo] = {}
    for enum in range(pynvml.NVML_GPU_INSTANCE_PROFILE_COUNT):
        try:
            info = lib.nvmlDeviceGetGpuInstanceProfileInfo(handle, enum)
        except (pynvml.NVMLError_NotSupported, pynvml.NVMLError_InvalidArgument):
            continue
        found.setdefault(profile_name(info), info)
    return found


def repartition(lib: NvmlLib, index: int, family: MigFamily, instances: Sequence[str]) -> None:
    """Make GPU `index`'s GPU instances exactly `instances` (`profile@start` each)."""
    problem = layout_problem(family, instances)
    if problem is not None:
        raise MigLayoutError(problem)
    handle = lib.nvmlDeviceGetHandleByIndex(index)
    current, _ = lib.nvmlDeviceGetMigMode(handle)
    if int(current) != pynvml.NVML_DEVICE_MIG_ENABLE:
        raise MigLayoutError(f"GPU {index} is not in MIG mode")
    profiles = _profiles(lib, handle)
    missing = sorted({parse_instance(i)[0] for i in instances} - set(profiles))
    if missing:
        raise MigLayoutError(f"GPU {index} has no profile {', '.join(missing)}")
    for info in profiles.values():
        for instance in gpu_instances(lib, handle, info):
            lib.nvmlGpuInstanceDestroy(instance)
    for instance in instances:
        profile, start = parse_instance(instance)
        placement = pynvml.c_nvmlGpuInstancePlacement_t()
        placement.start, placement.size = start, family.profiles[profile].memory
        lib.nvmlDeviceCreateGpuInstanceWithPlacement(handle, int(profiles[profile].id), ctypes.byref(placement))
