"""The fake NVML's MIG: mode, GPU-instance profiles and GPU instances, with pynvml's functions, structs
and error classes and NVML's constraints (mixed into FakeNvml).

- MIG only on the models that have it (A100, A30, H100, H200): any MIG call on another GPU raises
  `NVMLError_NotSupported`, as the driver does on a V100 or a consumer card;
- `nvmlDeviceSetMigMode` needs root; the new mode is *pending* until the GPU is reset (`reset_gpu`,
  refused while processes run, as `nvidia-smi -r` is); on Hopper an idle GPU takes it at once;
  disabling MIG while GPU instances exist raises `NVMLError_InUse`;
- profile info and GPU instances only in MIG mode (`NotSupported` otherwise); a profile enum outside
  NVML's range raises `InvalidArgument`, one this GPU lacks `NotSupported`; instances are listed by the
  profile's *id* (as NVML numbers them: 19 for A100's 1g.5gb), not by the enum value;
- a GPU instance created where the profile may not be placed, or over another, raises
  `NVMLError_InsufficientResources`; an array too small for the instances `InsufficientSize`;
- GPU-instance handles are opaque `c_nvmlGpuInstance_t` pointers, as NVML's are.

The MIG state lives in memory only (not in the fake's state file). `fail_mig_reads` makes a GPU's MIG
reads fail with an NVML error code, for the readers' fail-safe tests.
"""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

import pynvml

from greengpu.backends.fake_gpu import FakeGpu
from greengpu.backends.fake_nvml_health import _c_uint, _error, _handle_index
from greengpu.backends.nvml_support import GpuInstanceInfo, InstanceSlots, NvmlHandle, ProfileInfo

C = TypeVar("C")


@dataclass(frozen=True)
class MigProfile:
    """One GPU-instance profile of a model: NVML's enum value and id, slices, memory, placements."""

    name: str
    enum: int
    profile_id: int
    slices: int
    memory_mb: int
    starts: tuple[int, ...]
    size: int


def _table(rows: list[tuple[str, int, int, int, int, tuple[int, ...], int]]) -> dict[int, MigProfile]:
    return {row[1]: MigProfile(*row) for row in rows}


P = pynvml
# From NVIDIA's MIG user guide (supported profiles per GPU: ids, slices, memory, placements).
_A100_40 = _table([("1g.5gb", P.NVML_GPU_INSTANCE_PROFILE_1_SLICE, 19, 1, 4864, (0, 1, 2, 3, 4, 5, 6), 1),
                   ("1g.10gb", P.NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV2, 15, 1, 9856, (0, 2, 4, 6), 2),
                   ("2g.10gb", P.NVML_GPU_INSTANCE_PROFILE_2_SLICE, 14, 2, 9856, (0, 2, 4), 2),
                   ("3g.20gb", P.NVML_GPU_INSTANCE_PROFILE_3_SLICE, 9, 3, 19968, (0, 4), 4),
                   ("4g.20gb", P.NVML_GPU_INSTANCE_PROFILE_4_SLICE, 5, 4, 19968, (0,), 4),
                   ("7g.40gb", P.NVML_GPU_INSTANCE_PROFILE_7_SLICE, 0, 7, 40192, (0,), 8)])


def _scaled(memory: tuple[str, str, str, int]) -> dict[int, MigProfile]:
    """The A100-40GB geometry with another memory size (80 GB A100 and H100, 141 GB H200)."""
    small, large, full, mb = memory
    names = {"1g.5gb": f"1g.{small}gb", "1g.10gb": f"1g.{large}gb", "2g.10gb": f"2g.{large}gb",
             "3g.20gb": f"3g.{full}gb", "4g.20gb": f"4g.{full}gb", "7g.40gb": f"7g.{mb}gb"}
    return {k: MigProfile(names[p.name], p.enum, p.profile_id, p.slices, p.memory_mb * mb // 40, p.starts, p.size)
            for k, p in _A100_40.items()}


_A30 = _table([("1g.6gb", P.NVML_GPU_INSTANCE_PROFILE_1_SLICE, 14, 1, 5836, (0, 1, 2, 3), 1),
               ("2g.12gb", P.NVML_GPU_INSTANCE_PROFILE_2_SLICE, 5, 2, 11868, (0, 2), 2),
               ("4g.24gb", P.NVML_GPU_INSTANCE_PROFILE_4_SLICE, 0, 4, 24096, (0,), 4)])

MIG_GEOMETRY: dict[str, dict[int, MigProfile]] = {
    "A100-SXM4-40GB": _A100_40, "A100-PCIE-40GB": _A100_40,
    "A100-SXM4-80GB": _scaled(("10", "20", "40", 80)), "A100-PCIE-80GB": _scaled(("10", "20", "40", 80)),
    "H100": _scaled(("10", "20", "40", 80)), "H200": _scaled(("18", "35", "71", 141)), "A30": _A30,
}
"""Profiles per MIG-capable model, found by a part of the GPU's name."""
_APPLIES_AT_ONCE = ("H100", "H200")
"""Hopper takes a new MIG mode without a reset when no process runs; Ampere waits for a reset."""


def mig_geometry(gpu_name: str) -> dict[int, MigProfile] | None:
    """The MIG profiles of the GPU called `gpu_name`, by profile enum; None: the model has no MIG."""
    return next((table for key, table in MIG_GEOMETRY.items() if key in gpu_name), None)


@dataclass
class _MigState:
    current: int = pynvml.NVML_DEVICE_MIG_DISABLE
    pending: int = pynvml.NVML_DEVICE_MIG_DISABLE
    instances: dict[int, tuple[MigProfile, int]] = field(default_factory=dict)
    """GPU-instance id -> (profile, placement start)."""
    next_id: int = 1
    failure: int | None = None


class FakeNvmlMig:
    """MIG functions of the fake NVML (mixed into FakeNvml: uses its `_gpu`, `_write`, `_lock`, `gpus`)."""

    _lock: threading.RLock
    _gpu: Callable[[object], FakeGpu]
    _write: Callable[[str, object], FakeGpu]
    _gpus: list[FakeGpu]
    mig_profile_info_v2 = True
    """False: a driver without nvmlDeviceGetGpuInstanceProfileInfoV (FunctionNotFound; version 1 still works)."""

    # --- test controls -------------------------------------------------------------------------

    def _mig(self, index: int) -> _MigState:
        states: dict[int, _MigState] = self.__dict__.setdefault("_mig_states", {})
        return states.setdefault(index, _MigState())

    def fail_mig_reads(self, index: int, code: int | None) -> None:
        """Make GPU `index`'s MIG reads raise `pynvml.NVMLError(code)` (None: read normally again)."""
        self._mig(index).failure = code

    def reset_gpu(self, index: int) -> None:
        """`nvidia-smi -r`: the pending MIG mode takes effect (refused while processes run on the GPU)."""
        with self._lock:
            if self._gpus[index].pids:
                raise _error(pynvml.NVML_ERROR_IN_USE)
            state = self._mig(index)
            state.current = state.pending

    # --- plumbing ------------------------------------------------------------------------------

    def _capable(self, handle: object) -> tuple[dict[int, MigProfile], _MigState]:
        gpu = self._gpu(handle)
        table = mig_geometry(gpu.name)
        if table is None:
            raise _error(pynvml.NVML_ERROR_NOT_SUPPORTED)
        state = self._mig(_handle_index(handle))
        if state.failure is not None:
            raise _error(state.failure)
        return table, state

    def _in_mig_mode(self, handle: object) -> tuple[dict[int, MigProfile], _MigState]:
        table, state = self._capable(handle)
        if state.current != pynvml.NVML_DEVICE_MIG_ENABLE:
            raise _error(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return table, state

    @staticmethod
    def _by_id(table: dict[int, MigProfile], profile_id: int) -> MigProfile:
        found = next((p for p in table.values() if p.profile_id == profile_id), None)
        if found is None:
            raise _error(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return found

    # --- MIG mode ------------------------------------------------------------------------------

    def nvmlDeviceGetMigMode(self, handle: object) -> list[int]:
        with self._lock:
            _, state = self._capable(handle)
            return [state.current, state.pending]

    def nvmlDeviceSetMigMode(self, handle: object, mode: int) -> int:
        mode = _c_uint(mode)
        with self._lock:
            _, state = self._capable(handle)
            gpu = self._write("nvmlDeviceSetMigMode", handle)
            if mode not in (pynvml.NVML_DEVICE_MIG_DISABLE, pynvml.NVML_DEVICE_MIG_ENABLE):
                raise _error(pynvml.NVML_ERROR_INVALID_ARGUMENT)
            if mode == pynvml.NVML_DEVICE_MIG_DISABLE and state.instances:
                raise _error(pynvml.NVML_ERROR_IN_USE)
            state.pending = mode
            if any(key in gpu.name for key in _APPLIES_AT_ONCE) and not gpu.pids:
                state.current = mode
                return int(pynvml.NVML_SUCCESS)
            return int(pynvml.NVML_ERROR_RESET_REQUIRED) if state.current != mode else int(pynvml.NVML_SUCCESS)

    # --- GPU instances -------------------------------------------------------------------------

    def nvmlDeviceGetGpuInstanceProfileInfo(self, handle: object, profile: int, version: int = 2) -> ProfileInfo:
        if version not in (1, 2) or (version == 2 and not self.mig_profile_info_v2):
            raise _error(pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)
        profile = _c_uint(profile)
        with self._lock:
            table, _ = self._in_mig_mode(handle)
            if profile >= pynvml.NVML_GPU_INSTANCE_PROFILE_COUNT:
                raise _error(pynvml.NVML_ERROR_INVALID_ARGUMENT)
            if profile not in table:
                raise _error(pynvml.NVML_ERROR_NOT_SUPPORTED)
            found = table[profile]
            info = pynvml.c_nvmlGpuInstanceProfileInfo_v2_t() if version == 2 else \
                pynvml.c_nvmlGpuInstanceProfileInfo_t()
            info.id, info.sliceCount, info.instanceCount = found.profile_id, found.slices, len(found.starts)
            info.multiprocessorCount, info.memorySizeMB = 14 * found.slices, found.memory_mb
            if version == 2:
                info.name = f"MIG {found.name}".encode()
            filled: ProfileInfo = info
            return filled

    def nvmlDeviceGetGpuInstances(self, handle: object, profile_id: int, instances_ref: InstanceSlots,
                                  count_ref: object) -> int:
        profile_id = _c_uint(profile_id)
        with self._lock:
            table, state = self._in_mig_mode(handle)
            profile = self._by_id(table, profile_id)
            mine = sorted(gi for gi, (p, _) in state.instances.items() if p.profile_id == profile.profile_id)
            count = _deref(count_ref, ctypes.c_uint)
            if len(instances_ref) < len(mine):
                count.value = len(mine)
                raise _error(pynvml.NVML_ERROR_INSUFFICIENT_SIZE)
            for slot, gi in enumerate(mine):
                instances_ref[slot] = _gi_handle(_handle_index(handle), gi)
            count.value = len(mine)
            return int(pynvml.NVML_SUCCESS)

    def nvmlGpuInstanceGetInfo(self, instance: object) -> GpuInstanceInfo:
        with self._lock:
            index, gi = _gi_key(instance)
            state = self._mig(index)
            if gi not in state.instances:
                raise _error(pynvml.NVML_ERROR_INVALID_ARGUMENT)
            profile, start = state.instances[gi]
            info = pynvml.c_nvmlGpuInstanceInfo_t()
            info.id, info.profileId = gi, profile.profile_id
            info.placement.start, info.placement.size = start, profile.size
            filled: GpuInstanceInfo = info
            return filled

    def nvmlDeviceCreateGpuInstanceWithPlacement(self, handle: object, profile_id: int,
                                                 placement: object) -> NvmlHandle:
        profile_id = _c_uint(profile_id)
        with self._lock:
            table, state = self._in_mig_mode(handle)
            self._write("nvmlDeviceCreateGpuInstanceWithPlacement", handle)
            profile = self._by_id(table, profile_id)
            wanted = _deref(placement, pynvml.c_nvmlGpuInstancePlacement_t)
            if wanted.start not in profile.starts or wanted.size != profile.size or \
                    not self._fits(state, profile, int(wanted.start)):
                raise _error(pynvml.NVML_ERROR_INSUFFICIENT_RESOURCES)
            return self._create(_handle_index(handle), state, profile, int(wanted.start))

    def nvmlDeviceCreateGpuInstance(self, handle: object, profile_id: int) -> NvmlHandle:
        profile_id = _c_uint(profile_id)
        with self._lock:
            table, state = self._in_mig_mode(handle)
            self._write("nvmlDeviceCreateGpuInstance", handle)
            profile = self._by_id(table, profile_id)
            start = next((s for s in profile.starts if self._fits(state, profile, s)), None)
            if start is None:
                raise _error(pynvml.NVML_ERROR_INSUFFICIENT_RESOURCES)
            return self._create(_handle_index(handle), state, profile, start)

    def nvmlGpuInstanceDestroy(self, instance: object) -> int:
        with self._lock:
            index, gi = _gi_key(instance)
            state = self._mig(index)
            if gi not in state.instances:
                raise _error(pynvml.NVML_ERROR_INVALID_ARGUMENT)
            if not getattr(self, "root", True):
                raise _error(pynvml.NVML_ERROR_NO_PERMISSION)
            del state.instances[gi]
            return int(pynvml.NVML_SUCCESS)

    @staticmethod
    def _fits(state: _MigState, profile: MigProfile, start: int) -> bool:
        used = sum(p.slices for p, _ in state.instances.values())
        if used + profile.slices > 7:
            return False
        return all(start + profile.size <= s or s + p.size <= start for p, s in state.instances.values())

    @staticmethod
    def _create(index: int, state: _MigState, profile: MigProfile, start: int) -> NvmlHandle:
        gi = state.next_id
        state.next_id += 1
        state.instances[gi] = (profile, start)
        return _gi_handle(index, gi)


def _deref(ref: object, kind: type[C]) -> C:
    """The `kind` behind a `byref(x)` or `pointer(x)` argument, or `x` itself (InvalidArgument otherwise)."""
    inner = getattr(ref, "_obj", None)
    if inner is None:
        inner = ref.contents if isinstance(ref, ctypes._Pointer) else ref
    if not isinstance(inner, kind):
        raise _error(pynvml.NVML_ERROR_INVALID_ARGUMENT)
    return inner


def _gi_handle(index: int, gi: int) -> NvmlHandle:
    """An opaque GPU-instance handle: a `c_nvmlGpuInstance_t` whose address encodes (GPU, instance)."""
    return ctypes.cast(ctypes.c_void_p(((index + 1) << 16) | gi), pynvml.c_nvmlGpuInstance_t)


def _gi_key(instance: object) -> tuple[int, int]:
    address = ctypes.cast(instance, ctypes.c_void_p).value if isinstance(instance, ctypes._Pointer) else None
    if not address:
        raise _error(pynvml.NVML_ERROR_INVALID_ARGUMENT)
    return (address >> 16) - 1, address & 0xFFFF
