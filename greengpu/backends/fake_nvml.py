"""A fake NVML at greengpu's seam: the same function names, units, structs and error classes as `pynvml`.

`NvmlBackend(lib=FakeNvml(...))` runs the real translation code against it, so the tests, the
simulator and `greengpu agent --backend fake` exercise what runs on a GPU node. What it keeps honest:

- per-GPU constraints: a limit outside [min, max] raises `NVMLError_InvalidArgument`, a clock
  above the maximum or below the lowest supported clock too;
- writes without root raise `NVMLError_NoPermission` (`root=False`);
- GPUs without an energy counter (pre-Volta), ECC, or clock locking raise `NVMLError_NotSupported`;
- calls before `nvmlInit` raise `NVMLError_Uninitialized`;
- health signals as each generation has them: page retirement up to Volta, row remapping from Ampere,
  memory temperature (a field value) on HBM data-centre GPUs, Xid events through an event set;
  a GPU without one raises `NVMLError_NotSupported` (a field value carries its own NotSupported code);
- arguments go through the same ctypes conversions pynvml applies before calling the library: a
  float where pynvml builds a `c_uint` raises `TypeError`, a negative integer wraps around to a huge
  unsigned value (which NVML then refuses as out of range), and an enum argument outside its NVML
  range (clock type, temperature sensor, ECC error and counter type) raises `NVMLError_InvalidArgument`;
- errors are `pynvml.NVMLError(code)`, which pynvml turns into its subclass for the code
  (`NVMLError_NoPermission`, ...), exactly as `_nvmlCheckReturn` does for the real library;
- power follows the load: idle + (draw - idle) x utilisation, scaled by the square of the locked
  clock fraction, held at the enforced limit (then the SwPowerCap clock event reason is set);
  the energy counter (mJ) advances with that power on the fake's clock.

With `state_path`, the GPUs' settings and counters live in a JSON file read at `nvmlInit`: like a real
GPU, a limit set by a process outlives it (the agent's and the daemon's crash tests need exactly that).
Each write is appended at once to a write log beside it (`<state>.writes`, one JSON line, replayed over
the file at `nvmlInit`), so a process killed right after a write leaves it written, and a daemon that
caps thousands of GPUs in one tick does not rewrite a file per write; `save()` folds the log into the file.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO

import pynvml

from greengpu.backends.fake_gpu import MIB, PRESETS, FakeGpu, make_gpus
from greengpu.backends.fake_nvml_health import (
    FakeNvmlHealth,
    _c_uint,
    _enum,
    _error,
    _EventSet,
    _Handle,
    _handle_index,
)
from greengpu.backends.fake_nvml_mig import FakeNvmlMig
from greengpu.backends.nvml_support import ProcessInfo
from greengpu.errors import BadInput

__all__ = ["MIB", "PRESETS", "FakeGpu", "FakeNvml", "make_gpus"]
"""The simulated GPUs and their presets live in greengpu.backends.fake_gpu; they are used from here too."""
WRITE_LOG_LINES = 1000
_SETTINGS = frozenset({"limit_w", "locked_clock_mhz"})
"""What a write-log line may set (a damaged line setting anything else is skipped)."""
"""Writes appended to the write log before it is folded into the state file."""


def _last_byte(handle: IO[bytes]) -> bytes:
    handle.seek(-1, os.SEEK_END)
    last: bytes = handle.read(1)
    handle.seek(0, os.SEEK_END)
    return last


class FakeNvml(FakeNvmlHealth, FakeNvmlMig):
    """The subset of the `pynvml` module greengpu calls, over simulated GPUs."""

    def __init__(self, gpus: Sequence[FakeGpu], root: bool = True, clock: Callable[[], float] = time.time,
                 state_path: str | Path | None = None) -> None:
        self._gpus = list(gpus)
        for index, gpu in enumerate(self._gpus):
            gpu.uuid = gpu.uuid or f"GPU-fake-{index:04d}"
            gpu.limit_w = gpu.limit_w or gpu.default_limit_w
        self.root = root
        self._clock = clock
        self._state_path = Path(state_path) if state_path else None
        self._logged = 0
        """Lines in the write log since the file was last written."""
        self._initialised = 0
        self._lock = threading.RLock()
        self.calls: list[str] = []
        """Names of the write calls that reached the fake, in order (tests check what NVML saw)."""
        self._event_sets: list[_EventSet] = []
        self._events = threading.Condition(self._lock)

    # --- test and demo controls --------------------------------------------------------------

    @property
    def gpus(self) -> list[FakeGpu]:
        return self._gpus

    def set_load(self, index: int, utilization: float, pids: Sequence[int] = ()) -> None:
        """Simulate work on a GPU (the energy counter is brought up to now first)."""
        with self._lock:
            gpu = self._advance(index)
            gpu.utilization = utilization
            gpu.pids = list(pids)

    def inject_xid(self, index: int, xid: int) -> None:
        """An Xid event on GPU `index`: queued on every event set that registered it for critical Xids."""
        with self._events:
            for event_set in self._event_sets:
                if event_set.registered.get(index, 0) & pynvml.nvmlEventTypeXidCriticalError:
                    event_set.queue.append((index, pynvml.nvmlEventTypeXidCriticalError, xid))
            self._events.notify_all()

    def save(self) -> None:
        """Write the GPUs' state to `state_path` (atomically), when there is one."""
        if self._state_path is None:
            return
        with self._lock:
            for index in range(len(self._gpus)):
                self._advance(index)
            tmp = self._state_path.with_suffix(self._state_path.suffix + ".tmp")
            # vars(), not asdict(): the state is serialised at once, so asdict's deep copy is wasted work.
            tmp.write_text(json.dumps({"gpus": [vars(g) for g in self._gpus]}))
            os.replace(tmp, self._state_path)
            # Killed between the replace and the unlink, the log is replayed over a file that already holds
            # its writes: harmless, each line sets an absolute value.
            self._write_log_path().unlink(missing_ok=True)

    def _write_log_path(self) -> Path:
        assert self._state_path is not None
        return self._state_path.with_suffix(self._state_path.suffix + ".writes")

    def _persist(self, index: int, settings: dict[str, float | int | None]) -> None:
        """Record one write at once: in the file the first time, then as a line of the write log."""
        if self._state_path is None:
            return
        if not self._state_path.exists() or self._logged >= WRITE_LOG_LINES:
            self.save()  # the first write, or a long log folded into the file
            self._logged = 0
            return
        with self._write_log_path().open("a+b") as log:
            # A torn last line (a process killed mid-write) must not swallow this write: a lost reset left a
            # GPU at 100 W that the daemon's reconcile then marked done.
            log.seek(0, os.SEEK_END)
            torn = log.tell() > 0 and _last_byte(log) != b"\n"
            log.write((("\n" if torn else "") + json.dumps({"gpu": index, **settings}) + "\n").encode())
        self._logged += 1

    @staticmethod
    def stored_gpus(state_path: str | Path) -> list[FakeGpu]:
        """The GPUs as a state file and its write log hold them (what the next `nvmlInit` finds)."""
        fake = FakeNvml([], state_path=state_path)
        fake._load()
        return fake.gpus

    def _load(self) -> None:
        if self._state_path is None or not self._state_path.exists():
            return
        try:
            saved = json.loads(self._state_path.read_text())["gpus"]
            self._gpus = [FakeGpu(**g) for g in saved]
        except (ValueError, KeyError, TypeError) as error:  # UnicodeDecodeError is a ValueError
            raise BadInput(f"{self._state_path}: not a fake NVML state file ({type(error).__name__}: {error}); "
                           "move it away to start the fake GPUs afresh") from None
        log = self._write_log_path()
        if not log.exists():
            return
        for line in log.read_text(errors="replace").splitlines():
            try:
                write = json.loads(line)
                gpu = self._gpus[int(write.pop("gpu"))]
            except (ValueError, KeyError, TypeError, IndexError, AttributeError):
                continue  # a torn line (its writer was killed mid-line: that write never returned)
            for key, value in write.items():
                if key in _SETTINGS:
                    setattr(gpu, key, value)

    # --- plumbing ----------------------------------------------------------------------------

    def _require_init(self) -> None:
        # pynvml looks the function up first (NVMLError_Uninitialized before nvmlInit), then converts
        # the arguments (TypeError), then NVML checks them: the fake keeps that order.
        if not self._initialised:
            raise _error(pynvml.NVML_ERROR_UNINITIALIZED)

    def _gpu(self, handle: object) -> FakeGpu:
        self._require_init()
        if not isinstance(handle, _Handle) or not 0 <= handle.index < len(self._gpus):
            raise _error(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return self._advance(handle.index)

    def _advance(self, index: int) -> FakeGpu:
        """Bring GPU `index`'s energy counter up to the fake's clock."""
        gpu = self._gpus[index]
        now = self._clock()
        if gpu.updated_s is not None and now > gpu.updated_s:
            gpu.energy_mj += gpu.power_w() * (now - gpu.updated_s) * 1000.0
        gpu.updated_s = now if gpu.updated_s is None else max(now, gpu.updated_s)
        return gpu

    def _write(self, name: str, handle: object) -> FakeGpu:
        gpu = self._gpu(handle)
        if not self.root:
            raise _error(pynvml.NVML_ERROR_NO_PERMISSION)
        self.calls.append(name)
        return gpu

    # --- session -----------------------------------------------------------------------------

    def nvmlInit(self) -> None:
        with self._lock:
            if not self._initialised:
                self._load()
            self._initialised += 1

    def nvmlShutdown(self) -> None:
        with self._lock:
            if not self._initialised:
                raise _error(pynvml.NVML_ERROR_UNINITIALIZED)
            self.save()
            self._initialised -= 1

    def nvmlDeviceGetCount(self) -> int:
        if not self._initialised:
            raise _error(pynvml.NVML_ERROR_UNINITIALIZED)
        return len(self._gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> _Handle:
        index = _c_uint(index)
        if not self._initialised:
            raise _error(pynvml.NVML_ERROR_UNINITIALIZED)
        if not index < len(self._gpus):
            raise _error(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return _Handle(index)

    # --- reads (NVML units: mW, mJ, MHz, percent, bytes) ----------------------------------------

    def nvmlDeviceGetName(self, handle: object) -> str:
        return self._gpu(handle).name

    def nvmlDeviceGetUUID(self, handle: object) -> str:
        return self._gpu(handle).uuid

    def nvmlDeviceGetPowerUsage(self, handle: object) -> int:
        with self._lock:
            return int(round(self._gpu(handle).power_w() * 1000.0))

    def nvmlDeviceGetTotalEnergyConsumption(self, handle: object) -> int:
        with self._lock:
            gpu = self._gpu(handle)
            if not gpu.has_energy_counter:
                raise _error(pynvml.NVML_ERROR_NOT_SUPPORTED)
            return int(gpu.energy_mj)

    def nvmlDeviceGetPowerManagementLimitConstraints(self, handle: object) -> list[int]:
        gpu = self._gpu(handle)
        return [int(gpu.min_limit_w * 1000), int(gpu.max_limit_w * 1000)]

    def nvmlDeviceGetPowerManagementDefaultLimit(self, handle: object) -> int:
        return int(self._gpu(handle).default_limit_w * 1000)

    def nvmlDeviceGetPowerManagementLimit(self, handle: object) -> int:
        return int(round(self._gpu(handle).limit_w * 1000))

    def nvmlDeviceGetEnforcedPowerLimit(self, handle: object) -> int:
        return int(round(self._gpu(handle).limit_w * 1000))

    def nvmlDeviceGetUtilizationRates(self, handle: object) -> pynvml.c_nvmlUtilization_t:
        gpu = self._gpu(handle)
        percent = int(round(gpu.utilization * 100))
        return pynvml.c_nvmlUtilization_t(gpu=percent, memory=percent // 2)

    def nvmlDeviceGetMemoryInfo(self, handle: object) -> pynvml.c_nvmlMemory_t:
        gpu = self._gpu(handle)
        used = len(gpu.pids) * 4 * 1024 * MIB
        return pynvml.c_nvmlMemory_t(total=gpu.memory_total_bytes, free=gpu.memory_total_bytes - used, used=used)

    def nvmlDeviceGetComputeRunningProcesses(self, handle: object) -> list[ProcessInfo]:
        gpu = self._gpu(handle)
        return [pynvml.nvmlStructToFriendlyObject(pynvml.c_nvmlProcessInfo_v3_t(pid=pid, usedGpuMemory=4 * 1024 * MIB))
                for pid in gpu.pids]

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: object) -> int:
        gpu = self._gpu(handle)
        reasons = 0
        if gpu.utilization == 0:
            reasons |= pynvml.nvmlClocksEventReasonGpuIdle
        if gpu.cap_binds():
            reasons |= pynvml.nvmlClocksEventReasonSwPowerCap
        if gpu.locked_clock_mhz is not None:
            reasons |= pynvml.nvmlClocksEventReasonApplicationsClocksSetting
        return reasons | gpu.hw_slowdown_reasons

    def nvmlDeviceGetClockInfo(self, handle: object, clock_type: int) -> int:
        self._require_init()
        clock_type = _enum(clock_type, pynvml.NVML_CLOCK_COUNT)
        gpu = self._gpu(handle)
        if clock_type == pynvml.NVML_CLOCK_MEM:
            return gpu.memory_clock_mhz
        if gpu.utilization == 0:
            return gpu.min_sm_clock_mhz
        return gpu.locked_clock_mhz if gpu.locked_clock_mhz is not None else gpu.max_sm_clock_mhz

    def nvmlDeviceGetMaxClockInfo(self, handle: object, clock_type: int) -> int:
        self._require_init()
        clock_type = _enum(clock_type, pynvml.NVML_CLOCK_COUNT)
        gpu = self._gpu(handle)
        return gpu.memory_clock_mhz if clock_type == pynvml.NVML_CLOCK_MEM else gpu.max_sm_clock_mhz

    def nvmlDeviceGetTemperature(self, handle: object, sensor: int) -> int:
        self._require_init()
        _enum(sensor, pynvml.NVML_TEMPERATURE_COUNT)
        return int(self._die_temperature(self._gpu(handle)))

    @staticmethod
    def _die_temperature(gpu: FakeGpu) -> float:
        return 30 + 45 * gpu.power_w() / gpu.max_limit_w

    def nvmlDeviceGetTemperatureV(self, handle: object, sensor: int, version: int = pynvml.nvmlTemperature_v1) -> int:
        if version != pynvml.nvmlTemperature_v1:
            raise _error(pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH)
        _c_uint(sensor)  # pynvml fills the request struct before it looks the function up
        return self.nvmlDeviceGetTemperature(handle, sensor)

    # --- writes (root only) --------------------------------------------------------------------

    def nvmlDeviceSetPowerManagementLimit(self, handle: object, limit_mw: int) -> None:
        self._require_init()
        limit_mw = _c_uint(limit_mw)
        with self._lock:
            gpu = self._write("nvmlDeviceSetPowerManagementLimit", handle)
            if not gpu.min_limit_w * 1000 <= limit_mw <= gpu.max_limit_w * 1000:
                raise _error(pynvml.NVML_ERROR_INVALID_ARGUMENT)
            gpu.limit_w = limit_mw / 1000.0
            self._persist(_handle_index(handle), {"limit_w": gpu.limit_w})

    def nvmlDeviceSetGpuLockedClocks(self, handle: object, min_mhz: int, max_mhz: int) -> None:
        self._require_init()
        min_mhz, max_mhz = _c_uint(min_mhz), _c_uint(max_mhz)
        with self._lock:
            gpu = self._write("nvmlDeviceSetGpuLockedClocks", handle)
            if not gpu.can_lock_clocks:
                raise _error(pynvml.NVML_ERROR_NOT_SUPPORTED)
            if not gpu.min_sm_clock_mhz <= min_mhz <= max_mhz <= gpu.max_sm_clock_mhz:
                raise _error(pynvml.NVML_ERROR_INVALID_ARGUMENT)
            gpu.locked_clock_mhz = max_mhz
            self._persist(_handle_index(handle), {"locked_clock_mhz": max_mhz})

    def nvmlDeviceResetGpuLockedClocks(self, handle: object) -> None:
        with self._lock:
            gpu = self._write("nvmlDeviceResetGpuLockedClocks", handle)
            if not gpu.can_lock_clocks:
                raise _error(pynvml.NVML_ERROR_NOT_SUPPORTED)
            gpu.locked_clock_mhz = None
            self._persist(_handle_index(handle), {"locked_clock_mhz": None})
