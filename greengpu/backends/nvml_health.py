"""The NVML health reads of `NvmlBackend` (greengpu.health, docs/HEALTH.md): ECC counters, retired and
remapped rows, temperatures, the PCIe replay counter, clock-event reasons and Xid events.

A mixin: it uses the backend's `_call` (every NVML call goes through it, errors translated once),
`_handle`, `_temperature`, `_lock` and the event-set state the backend keeps.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

import pynvml

from greengpu.backends.nvml_support import (
    _FALLBACKS,
    _FIELD_MEMBERS,
    NOT_SUPPORTED_MESSAGE,
    NvmlCaller,
    NvmlHandle,
    NvmlLib,
    _returns_true,
)
from greengpu.health.signals import GpuHealthSample

log = logging.getLogger("greengpu.nvml")


class HealthReads:
    """Health signals of the backend's GPUs (mixed into NvmlBackend)."""

    _lib: NvmlLib
    _lock: threading.RLock
    _clock: Callable[[], float]
    _event_set: NvmlHandle | None
    _xid_gpus: set[int]
    _handles: list[NvmlHandle]
    _call: NvmlCaller
    _handle: Callable[[int], NvmlHandle]
    _temperature: Callable[[int, NvmlHandle], float | None]
    _say_once: Callable[[int, str, str], None]

    def read_health(self, index: int, xids: tuple[int, ...] = ()) -> GpuHealthSample:
        """GPU `index`'s health signals now; a signal the GPU does not support is None (said once).

        `xids`: the Xid events seen for this GPU since the last sample (`drain_xids`).
        """
        lib = self._lib
        with self._lock:
            handle = self._handle(index)
            corrected = self._call(index, "corrected ECC count", lib.nvmlDeviceGetTotalEccErrors, handle,
                                   pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED, pynvml.NVML_AGGREGATE_ECC)
            uncorrected = self._call(index, "uncorrected ECC count", lib.nvmlDeviceGetTotalEccErrors, handle,
                                     pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, pynvml.NVML_AGGREGATE_ECC)
            sbe_pages = self._call(index, "retired pages", lib.nvmlDeviceGetRetiredPages, handle,
                                   pynvml.NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS)
            dbe_pages = None if sbe_pages is None else self._call(
                index, "retired pages", lib.nvmlDeviceGetRetiredPages, handle,
                pynvml.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR)
            rows = self._call(index, "remapped rows", lib.nvmlDeviceGetRemappedRows, handle)
            replays = self._call(index, "PCIe replay counter", lib.nvmlDeviceGetPcieReplayCounter, handle)
            reasons = self._call(index, "clock event reasons", lib.nvmlDeviceGetCurrentClocksEventReasons, handle)
            temperatures = [t for t in (self._temperature(index, handle), self._memory_temperature(index, handle))
                            if t is not None]
            return GpuHealthSample(
                time_s=self._clock(),
                ecc_corrected_total=None if corrected is None else int(corrected),
                ecc_uncorrected_total=None if uncorrected is None else int(uncorrected),
                retired_pages_sbe=None if sbe_pages is None else len(sbe_pages),
                retired_pages_dbe=None if dbe_pages is None else len(dbe_pages),
                remapped_rows_correctable=None if rows is None else int(rows[0]),
                remapped_rows_uncorrectable=None if rows is None else int(rows[1]),
                remap_pending=None if rows is None else bool(rows[2]),
                remap_failure=None if rows is None else bool(rows[3]),
                temperatures_c=tuple(temperatures) if len(temperatures) >= 2 else (),
                pcie_replays_total=None if replays is None else int(replays),
                clock_event_reasons=None if reasons is None else int(reasons),
                xids=xids,
            )

    def _memory_temperature(self, index: int, handle: NvmlHandle) -> float | None:
        # The memory (HBM) sensor is a field value; NVML answers NotSupported in the field, not as an error.
        values = self._call(index, "memory temperature", self._lib.nvmlDeviceGetFieldValues, handle,
                            [pynvml.NVML_FI_DEV_MEMORY_TEMP])
        if not values:
            return None
        value = values[0]
        if value.nvmlReturn != pynvml.NVML_SUCCESS:
            self._say_once(index, "memory temperature", NOT_SUPPORTED_MESSAGE.format(
                index=index, what="memory temperature", fallback=_FALLBACKS["memory temperature"]))
            return None
        member = _FIELD_MEMBERS.get(int(value.valueType))
        return None if member is None else float(getattr(value.value, member))

    def watch_xids(self) -> int:
        """Register every GPU for critical Xid events; returns how many GPUs report them."""
        with self._lock:
            if self._event_set is None:
                self._event_set = self._call(-1, "create an Xid event set", self._lib.nvmlEventSetCreate)
                if self._event_set is None:
                    return 0
            for index, handle in enumerate(self._handles):
                if index not in self._xid_gpus and self._call(
                        index, "Xid events", _returns_true(self._lib.nvmlDeviceRegisterEvents), handle,
                        pynvml.nvmlEventTypeXidCriticalError, self._event_set):
                    self._xid_gpus.add(index)
            return len(self._xid_gpus)

    def drain_xids(self) -> dict[int, tuple[int, ...]]:
        """The critical Xid events waiting, per GPU index (without blocking)."""
        found: dict[int, list[int]] = {}
        with self._lock:
            if self._event_set is None:
                return {}
            uuids = {str(self._lib.nvmlDeviceGetUUID(h)): i for i, h in enumerate(self._handles)}
            for _ in range(10_000):  # a storm cannot hold the agent here forever
                try:
                    data = self._lib.nvmlEventSetWait(self._event_set, 0)
                except pynvml.NVMLError_Timeout:
                    break
                except pynvml.NVMLError as error:
                    log.warning("reading Xid events failed: %s (%s)", error, type(error).__name__)
                    break
                # The event names its GPU by handle; the UUID maps it back to an index whatever the handle type.
                index = uuids.get(str(self._lib.nvmlDeviceGetUUID(data.device)))
                if index is not None and int(data.eventType) & pynvml.nvmlEventTypeXidCriticalError:
                    found.setdefault(index, []).append(int(data.eventData))
        return {index: tuple(xids) for index, xids in found.items()}

