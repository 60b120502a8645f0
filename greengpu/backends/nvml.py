"""NVML adapter: read GPU power, energy, limits and state; set and reset power limits and locked clocks.

Built on `nvidia-ml-py` (`import pynvml`). Every NVML call goes through `NvmlBackend._call`, the one
place where NVML errors are translated (docs/AGENT.md lists the messages):

- `NoPermission` on a write: the agent is not root (or lacks CAP_SYS_ADMIN). One message says how
  to fix it; the backend turns read-only and every later write is skipped, reads carry on.
- `NotSupported` on a read: that value is reported as missing; a missing energy counter (before
  Volta) is replaced by integrating power over time.
- `InvalidArgument` on a power limit: cannot come from us, because a limit is clamped to the GPU's
  constraints before it reaches NVML (the clamp is logged); if NVML refuses anyway, it is logged and
  the limit left as it was.

The seam is the `pynvml` module itself: `NvmlBackend(lib=...)` takes any object with the same
functions, which is how `greengpu.backends.fake_nvml` stands in for a GPU. Units here are greengpu's:
watts, joules, MHz, bytes, ratios 0-1; NVML's milliwatts and millijoules stop at this file. MIG mode and
GPU instances are read by `read_sharing` (greengpu.backends.nvml_mig), which never raises an NVML error.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar, TypeVarTuple, Unpack

import pynvml

from greengpu.backends.nvml_health import HealthReads
from greengpu.backends.nvml_mig import MigReads
from greengpu.backends.nvml_support import _FALLBACKS, NOT_SUPPORTED_MESSAGE, NvmlHandle, NvmlLib, _returns_true
from greengpu.model import LimitConstraints

log = logging.getLogger("greengpu.nvml")

T = TypeVar("T")
Ts = TypeVarTuple("Ts")

SW_POWER_CAP_BIT = 0x4
"""nvmlClocksEventReasonSwPowerCap: the power limit is holding clocks down (the cap binds)."""

PERMISSION_MESSAGE = (
    "NVML refused to {action} on GPU {index} (NoPermission): changing power limits and clocks needs root "
    "or CAP_SYS_ADMIN; run the agent as root (the systemd unit in deploy/ does) or grant the capability; "
    "carrying on read-only: metrics are served, nothing is capped"
)
CLAMP_MESSAGE = "GPU {index}: asked for a {asked_w:g} W limit, outside {min_w:g}-{max_w:g} W; setting {limit_w:g} W"
INVALID_MESSAGE = "GPU {index}: NVML refused a {limit_w:g} W limit (InvalidArgument); the limit is left as it was"


class NvmlUnavailable(Exception):
    """NVML cannot be used on this machine: no library, no driver, or no GPU."""


class GpuLost(Exception):
    """A GPU stopped answering (NVML GpuIsLost, Unknown, or another error greengpu cannot work around)."""


@dataclass(frozen=True)
class GpuReading:
    """Everything the agent and the exporter read from one GPU, in greengpu's units. None: not supported."""

    index: int
    uuid: str
    name: str
    power_w: float
    energy_j: float
    energy_from_counter: bool
    """True: NVML's energy counter; False: integrated from power samples (no counter on this GPU)."""
    limit_w: float
    """The power management limit set now (nvmlDeviceGetPowerManagementLimit)."""
    enforced_limit_w: float
    """The limit the GPU obeys, the lowest of all limits that apply (nvmlDeviceGetEnforcedPowerLimit)."""
    constraints: LimitConstraints
    sm_clock_mhz: int
    max_sm_clock_mhz: int
    utilization: float
    memory_utilization: float
    memory_used_bytes: int
    memory_total_bytes: int
    temperature_c: float | None
    pids: tuple[int, ...]
    ecc_uncorrected_volatile: int | None
    sw_power_cap: bool
    clock_event_reasons: int | None


class NvmlBackend(HealthReads, MigReads):
    """One NVML session. Thread-safe: the agent loop and the metrics scrape share it."""

    def __init__(self, lib: NvmlLib = pynvml, clock: Callable[[], float] = time.monotonic) -> None:
        self._lib = lib
        self._clock = clock
        self._lock = threading.RLock()
        self._handles: list[NvmlHandle] = []
        self._constraints: dict[int, LimitConstraints] = {}
        self._said: set[tuple[int, str]] = set()
        self._integrated: dict[int, tuple[float, float, float]] = {}
        """index -> (time s, power W, energy J) for GPUs whose energy is integrated from power."""
        self.read_only = False
        self.writes = 0
        self._event_set: NvmlHandle | None = None
        self._xid_gpus: set[int] = set()
        """GPUs registered for critical Xid events (the rest do not support them)."""

    # --- session ---------------------------------------------------------------------------

    def open(self) -> int:
        """Initialise NVML and index the GPUs; returns how many there are. Raises NvmlUnavailable."""
        with self._lock:
            try:
                self._lib.nvmlInit()
                count = int(self._lib.nvmlDeviceGetCount())
                self._handles = [self._lib.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
            except pynvml.NVMLError as error:
                raise NvmlUnavailable(f"NVML cannot start: {error} ({type(error).__name__}); is the NVIDIA "
                                      "driver installed and loaded on this node?") from error
            return count

    def close(self) -> None:
        with self._lock:
            if self._event_set is not None:
                self._call(-1, "free the Xid event set", self._lib.nvmlEventSetFree, self._event_set)
                self._event_set = None
            if self._handles:
                self._call(-1, "shut down NVML", self._lib.nvmlShutdown)
                self._handles = []

    @property
    def gpu_count(self) -> int:
        return len(self._handles)

    # --- the one place NVML errors are translated ------------------------------------------

    def _call(self, index: int, what: str, fn: Callable[[Unpack[Ts]], T], *args: *Ts, write: bool = False,
              refused: str | None = None) -> T | None:
        """Call NVML; None when the call was refused in a way greengpu carries on from.

        `refused` is the message logged when NVML rejects a write's argument.
        """
        try:
            return fn(*args)
        except pynvml.NVMLError_NoPermission:
            if write:
                if not self.read_only:
                    log.warning(PERMISSION_MESSAGE.format(action=what, index=index))
                self.read_only = True
                return None
            self._say_once(index, what, f"GPU {index}: reading {what} needs more permissions (NoPermission); "
                                        "reported as missing")
            return None
        except (pynvml.NVMLError_NotSupported, pynvml.NVMLError_FunctionNotFound):
            self._say_once(index, what, NOT_SUPPORTED_MESSAGE.format(
                index=index, what=what, fallback=_FALLBACKS.get(what, "reported as missing")))
            return None
        except pynvml.NVMLError_InvalidArgument as error:
            if write:
                log.error(refused or f"GPU {index}: NVML refused to {what} (InvalidArgument); left as it was")
                return None
            raise GpuLost(f"GPU {index}: NVML rejected {what}: {error}") from error
        except pynvml.NVMLError as error:
            raise GpuLost(f"GPU {index}: {what} failed: {error} ({type(error).__name__})") from error

    def _say_once(self, index: int, what: str, message: str) -> None:
        if (index, what) not in self._said:
            self._said.add((index, what))
            log.warning(message)

    def _handle(self, index: int) -> NvmlHandle:
        if not 0 <= index < len(self._handles):
            raise IndexError(f"no GPU {index}: this node has {len(self._handles)}")
        return self._handles[index]

    # --- reads -----------------------------------------------------------------------------

    def constraints(self, index: int) -> LimitConstraints:
        """[min, max] and default power limit in watts (read once; they do not change while the driver runs)."""
        with self._lock:
            if index not in self._constraints:
                handle = self._handle(index)
                bounds = self._call(index, "read the power limit constraints",
                                    self._lib.nvmlDeviceGetPowerManagementLimitConstraints, handle)
                default_mw = self._call(index, "read the default power limit",
                                        self._lib.nvmlDeviceGetPowerManagementDefaultLimit, handle)
                if bounds is None or default_mw is None:
                    raise GpuLost(f"GPU {index}: no power limit constraints; power management is not "
                                  "available on this GPU")
                min_mw, max_mw = bounds
                self._constraints[index] = LimitConstraints(min_w=min_mw / 1000.0, max_w=max_mw / 1000.0,
                                                            default_w=default_mw / 1000.0)
            return self._constraints[index]

    def read(self, index: int) -> GpuReading:
        """One reading of GPU `index`."""
        lib = self._lib
        with self._lock:
            handle = self._handle(index)
            constraints = self.constraints(index)
            power_mw = self._call(index, "read power", lib.nvmlDeviceGetPowerUsage, handle)
            power_w = (power_mw or 0) / 1000.0
            energy_mj = self._call(index, "energy counter", lib.nvmlDeviceGetTotalEnergyConsumption, handle)
            if energy_mj is not None:
                energy_j, from_counter = energy_mj / 1000.0, True
            else:
                energy_j, from_counter = self._integrate(index, power_w), False
            limit_mw = self._call(index, "read the power limit", lib.nvmlDeviceGetPowerManagementLimit, handle)
            enforced_mw = self._call(index, "read the enforced power limit", lib.nvmlDeviceGetEnforcedPowerLimit,
                                     handle)
            utilization = self._call(index, "utilization", lib.nvmlDeviceGetUtilizationRates, handle)
            memory = self._call(index, "memory info", lib.nvmlDeviceGetMemoryInfo, handle)
            reasons = self._call(index, "clock event reasons", lib.nvmlDeviceGetCurrentClocksEventReasons, handle)
            processes = self._call(index, "running processes", lib.nvmlDeviceGetComputeRunningProcesses, handle)
            ecc = self._call(index, "ECC counts", lib.nvmlDeviceGetTotalEccErrors, handle,
                             pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, pynvml.NVML_VOLATILE_ECC)
            limit_w = (limit_mw if limit_mw is not None else constraints.default_w * 1000.0) / 1000.0
            return GpuReading(
                index=index,
                uuid=str(self._call(index, "UUID", lib.nvmlDeviceGetUUID, handle) or f"GPU-{index}"),
                name=str(self._call(index, "name", lib.nvmlDeviceGetName, handle) or "unknown"),
                power_w=power_w,
                energy_j=energy_j,
                energy_from_counter=from_counter,
                limit_w=limit_w,
                enforced_limit_w=enforced_mw / 1000.0 if enforced_mw is not None else limit_w,
                constraints=constraints,
                sm_clock_mhz=int(self._call(index, "SM clock", lib.nvmlDeviceGetClockInfo, handle,
                                            pynvml.NVML_CLOCK_SM) or 0),
                max_sm_clock_mhz=int(self._call(index, "max SM clock", lib.nvmlDeviceGetMaxClockInfo, handle,
                                                pynvml.NVML_CLOCK_SM) or 0),
                utilization=utilization.gpu / 100.0 if utilization is not None else 0.0,
                memory_utilization=utilization.memory / 100.0 if utilization is not None else 0.0,
                memory_used_bytes=int(memory.used) if memory is not None else 0,
                memory_total_bytes=int(memory.total) if memory is not None else 0,
                temperature_c=self._temperature(index, handle),
                pids=tuple(int(p.pid) for p in processes) if processes else (),
                ecc_uncorrected_volatile=int(ecc) if ecc is not None else None,
                sw_power_cap=bool(reasons is not None and reasons & SW_POWER_CAP_BIT),
                clock_event_reasons=int(reasons) if reasons is not None else None,
            )

    def energy_j(self, index: int) -> float | None:
        """GPU `index`'s energy counter in J (one NVML call: the meter's reading); None without a counter."""
        with self._lock:
            energy_mj = self._call(index, "energy counter", self._lib.nvmlDeviceGetTotalEnergyConsumption,
                                   self._handle(index))
            return energy_mj / 1000.0 if energy_mj is not None else None

    def _temperature(self, index: int, handle: NvmlHandle) -> float | None:
        # nvmlDeviceGetTemperatureV is the newer call; drivers before 535 lack it (FunctionNotFound).
        value = None
        if hasattr(self._lib, "nvmlDeviceGetTemperatureV"):
            try:
                value = self._lib.nvmlDeviceGetTemperatureV(handle, pynvml.NVML_TEMPERATURE_GPU)
            except (pynvml.NVMLError_FunctionNotFound, pynvml.NVMLError_NotSupported,
                    pynvml.NVMLError_ArgumentVersionMismatch):
                value = None
        if value is None:
            value = self._call(index, "temperature", self._lib.nvmlDeviceGetTemperature, handle,
                               pynvml.NVML_TEMPERATURE_GPU)
        return float(value) if value is not None else None

    def _integrate(self, index: int, power_w: float) -> float:
        """Energy in J from power samples (trapezoids), for GPUs without an energy counter."""
        now = self._clock()
        previous = self._integrated.get(index)
        if previous is None:
            energy_j = 0.0
        else:
            then, then_w, then_j = previous
            energy_j = then_j + max(0.0, now - then) * (then_w + power_w) / 2.0
        self._integrated[index] = (now, power_w, energy_j)
        return energy_j

    # --- writes ----------------------------------------------------------------------------

    def set_power_limit_w(self, index: int, limit_w: float) -> float | None:
        """Set GPU `index`'s power limit; returns the watts set, or None when the write was refused or skipped.

        The limit is clamped to the GPU's constraints first: NVML never sees an out-of-range value.
        """
        with self._lock:
            constraints = self.constraints(index)
            clamped_w = constraints.clamp(limit_w)
            if clamped_w != limit_w:
                log.warning(CLAMP_MESSAGE.format(index=index, asked_w=limit_w, min_w=constraints.min_w,
                                                 max_w=constraints.max_w, limit_w=clamped_w))
            if self.read_only:
                return None
            milliwatts = int(round(clamped_w * 1000.0))
            done = self._call(index, "set the power limit",
                              _returns_true(self._lib.nvmlDeviceSetPowerManagementLimit),
                              self._handle(index), milliwatts, write=True,
                              refused=INVALID_MESSAGE.format(index=index, limit_w=clamped_w))
            if not done:
                return None
            self.writes += 1
            return milliwatts / 1000.0

    def reset_power_limit(self, index: int) -> float | None:
        """Put GPU `index` back at its default power limit."""
        return self.set_power_limit_w(index, self.constraints(index).default_w)

    def lock_clocks_mhz(self, index: int, clock_mhz: int) -> bool:
        """Lock GPU `index`'s SM clock at `clock_mhz` (min = max, as `nvidia-smi -lgc X,X`). False: refused.

        The clock is first brought under the GPU's maximum, so NVML never sees an out-of-range value.
        """
        with self._lock:
            if self.read_only:
                return False
            handle = self._handle(index)
            max_mhz = self._call(index, "max SM clock", self._lib.nvmlDeviceGetMaxClockInfo, handle,
                                 pynvml.NVML_CLOCK_SM)
            if max_mhz:
                clock_mhz = min(int(clock_mhz), int(max_mhz))
            done = self._call(index, "lock the SM clocks", _returns_true(self._lib.nvmlDeviceSetGpuLockedClocks),
                              handle, int(clock_mhz), int(clock_mhz), write=True)
            if done:
                self.writes += 1
            return bool(done)

    def reset_clocks(self, index: int) -> bool:
        """Unlock GPU `index`'s SM clocks. False: refused."""
        with self._lock:
            if self.read_only:
                return False
            done = self._call(index, "reset the SM clocks", _returns_true(self._lib.nvmlDeviceResetGpuLockedClocks),
                              self._handle(index), write=True)
            if done:
                self.writes += 1
            return bool(done)
