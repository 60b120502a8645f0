"""The fake NVML's health signals and the primitives it shares with greengpu.backends.fake_nvml: ECC
counters, retired pages, remapped rows, the PCIe replay counter, field values (the memory temperature)
and Xid events through event sets, each refused with pynvml's own error where a GPU lacks it, and
arguments converted and range-checked as pynvml and NVML do.

A mixin of FakeNvml: it uses its `_require_init`, `_gpu`, `_lock`, `_events`, `_event_sets` and
`_die_temperature`.
"""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Callable, Sequence

import pynvml

from greengpu.backends.fake_gpu import FakeGpu
from greengpu.backends.nvml_support import FieldValue


class _Handle:
    def __init__(self, index: int) -> None:
        self.index = index


class _EventSet:
    """An NVML event set: the GPUs registered with it and the events waiting to be read."""

    def __init__(self) -> None:
        self.registered: dict[int, int] = {}
        """GPU index -> event type mask."""
        self.queue: list[tuple[int, int, int]] = []
        """(GPU index, event type, event data) in arrival order."""
        self.freed = False


class _EventData:
    """What `nvmlEventSetWait` returns: the fields of pynvml's `c_nvmlEventData_t` (device is the handle)."""

    def __init__(self, device: _Handle, event_type: int, event_data: int) -> None:
        self.device = device
        self.eventType = event_type
        self.eventData = event_data
        self.gpuInstanceId = 0xFFFFFFFF
        self.computeInstanceId = 0xFFFFFFFF


def _handle_index(handle: object) -> int:
    """The GPU index behind a handle the fake gave out (InvalidArgument for anything else, as NVML)."""
    if not isinstance(handle, _Handle):
        raise _error(pynvml.NVML_ERROR_INVALID_ARGUMENT)
    return handle.index


def _error(code: int) -> pynvml.NVMLError:
    # pynvml maps the code to its subclass (NVMLError_NoPermission, ...), as it does for the real library.
    return pynvml.NVMLError(code)


def _c_uint(value: int) -> int:
    """`value` as pynvml hands it to NVML: `c_uint(value)` (TypeError for a float, wraps a negative)."""
    return int(ctypes.c_uint(value).value)


def _enum(value: int, count: int) -> int:
    """An NVML enum argument: converted as pynvml does (its enum types are c_uint), then range-checked
    as NVML does (`count` is the enum's *_COUNT)."""
    converted = _c_uint(value)
    if converted >= count:
        raise _error(pynvml.NVML_ERROR_INVALID_ARGUMENT)
    return converted


class FakeNvmlHealth:
    """Health reads of the fake NVML (mixed into FakeNvml)."""

    _lock: threading.RLock
    _events: threading.Condition
    _event_sets: list[_EventSet]
    _require_init: Callable[[], None]
    _gpu: Callable[[object], FakeGpu]
    _die_temperature: Callable[[FakeGpu], float]

    def nvmlDeviceGetTotalEccErrors(self, handle: object, error_type: int, counter_type: int) -> int:
        self._require_init()
        error_type = _enum(error_type, pynvml.NVML_MEMORY_ERROR_TYPE_COUNT)
        _enum(counter_type, pynvml.NVML_ECC_COUNTER_TYPE_COUNT)
        gpu = self._gpu(handle)
        if not gpu.has_ecc:
            raise _error(pynvml.NVML_ERROR_NOT_SUPPORTED)
        if error_type == pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED:
            return int(gpu.ecc_corrected)
        return int(gpu.ecc_uncorrected)

    def nvmlDeviceGetRetiredPages(self, handle: object, source_filter: int) -> list[int]:
        self._require_init()
        cause = _enum(source_filter, pynvml.NVML_PAGE_RETIREMENT_CAUSE_COUNT)
        gpu = self._gpu(handle)
        if not gpu.has_ecc or not gpu.page_retirement:
            raise _error(pynvml.NVML_ERROR_NOT_SUPPORTED)
        if cause == pynvml.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR:
            return list(gpu.retired_pages_dbe)
        return list(gpu.retired_pages_sbe)

    def nvmlDeviceGetRemappedRows(self, handle: object) -> tuple[int, int, int, int]:
        gpu = self._gpu(handle)
        if not gpu.has_ecc or not gpu.row_remapping:
            raise _error(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return (gpu.remapped_rows_correctable, gpu.remapped_rows_uncorrectable, int(gpu.remap_pending),
                int(gpu.remap_failure))

    def nvmlDeviceGetPcieReplayCounter(self, handle: object) -> int:
        return int(self._gpu(handle).pcie_replays)

    def nvmlDeviceGetFieldValues(self, handle: object,
                                 field_ids: Sequence[int | tuple[int, int]]) -> Sequence[FieldValue]:
        # pynvml fills a c_nvmlFieldValue_t array (TypeError for a float id) and NVML answers each field
        # with its own return code: an unknown or unsupported field is NotSupported in its slot, not raised.
        values = (pynvml.c_nvmlFieldValue_t * len(field_ids))()
        for i, field_id in enumerate(field_ids):
            if isinstance(field_id, tuple):
                (values[i].fieldId, values[i].scopeId) = field_id
            else:
                values[i].fieldId = field_id
        gpu = self._gpu(handle)
        for value in values:
            if value.fieldId == pynvml.NVML_FI_DEV_MEMORY_TEMP and gpu.memory_temp_offset_c is not None:
                value.valueType = pynvml.NVML_VALUE_TYPE_UNSIGNED_INT
                value.value.uiVal = int(round(self._die_temperature(gpu) + gpu.memory_temp_offset_c))
                value.nvmlReturn = pynvml.NVML_SUCCESS
            else:
                value.nvmlReturn = pynvml.NVML_ERROR_NOT_SUPPORTED
        filled: Sequence[FieldValue] = values
        return filled

    # --- events (Xid) ----------------------------------------------------------------------------

    def nvmlEventSetCreate(self) -> _EventSet:
        self._require_init()
        with self._lock:
            event_set = _EventSet()
            self._event_sets.append(event_set)
            return event_set

    def nvmlDeviceRegisterEvents(self, handle: object, event_types: int, event_set: object) -> None:
        event_types = int(ctypes.c_ulonglong(event_types).value)
        gpu = self._gpu(handle)
        if not isinstance(event_set, _EventSet) or event_set.freed:
            raise _error(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        if event_types & pynvml.nvmlEventTypeXidCriticalError and not gpu.xid_events:
            raise _error(pynvml.NVML_ERROR_NOT_SUPPORTED)
        with self._lock:
            index = _handle_index(handle)
            event_set.registered[index] = event_set.registered.get(index, 0) | event_types

    def nvmlEventSetWait(self, event_set: object, timeout_ms: int) -> _EventData:
        timeout_ms = _c_uint(timeout_ms)
        self._require_init()
        if not isinstance(event_set, _EventSet) or event_set.freed:
            raise _error(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        with self._events:
            if not event_set.queue:
                self._events.wait_for(lambda: bool(event_set.queue), timeout=timeout_ms / 1000.0)
            if not event_set.queue:
                raise _error(pynvml.NVML_ERROR_TIMEOUT)
            index, event_type, data = event_set.queue.pop(0)
            return _EventData(_Handle(index), event_type, data)

    def nvmlEventSetFree(self, event_set: object) -> None:
        self._require_init()
        if not isinstance(event_set, _EventSet) or event_set.freed:
            raise _error(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        with self._lock:
            event_set.freed = True
            self._event_sets.remove(event_set)
