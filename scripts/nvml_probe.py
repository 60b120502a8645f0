#!/usr/bin/env python3
"""Read every NVML value greengpu's agent uses, try one power-limit change and reset, print JSON.

For a machine with an NVIDIA GPU (docs/AGENT.md, "On a real GPU"). It calls pynvml directly, not
through greengpu's translation, so the exact NVML error of each call is written down as NVML gave
it. The limit change is to the minimum allowed limit plus 10% of the range, held for a second, then
the limit found before is set again (also on failure and on Ctrl-C).

    python3 scripts/nvml_probe.py [--gpu 0] [--no-write] > nvml-probe.json
    python3 scripts/nvml_probe.py --fake            # the same against greengpu's fake NVML
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from typing import Any

import pynvml


def attempt(results: dict[str, Any], name: str, call: Callable[[], Any]) -> Any:
    """Run one NVML call; record its value or its exact error (class name, code, text)."""
    try:
        value = call()
    except pynvml.NVMLError as error:
        results[name] = {"error": type(error).__name__, "code": error.value, "message": str(error)}
        return None
    results[name] = _plain(value)
    return value


def _plain(value: Any) -> Any:
    if isinstance(value, (int, float, str, bool)) or value is None:
        return value
    if isinstance(value, bytes):
        return value.decode(errors="replace")
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    fields = getattr(value, "_fields_", None)
    if fields:
        return {f[0]: _plain(getattr(value, f[0])) for f in fields}
    if hasattr(value, "__dict__"):
        return {k: _plain(v) for k, v in vars(value).items() if not k.startswith("_")}
    return repr(value)


def _xid_events(lib: Any, handle: Any) -> dict[str, Any]:
    """Create an event set, register the GPU for critical Xids, wait 0 ms (Timeout: none pending), free it."""
    out: dict[str, Any] = {}
    event_set = attempt(out, "nvmlEventSetCreate", lib.nvmlEventSetCreate)
    out["nvmlEventSetCreate"] = "created" if event_set is not None else out["nvmlEventSetCreate"]
    if event_set is not None:
        attempt(out, "nvmlDeviceRegisterEvents_XidCritical", lambda: lib.nvmlDeviceRegisterEvents(
            handle, pynvml.nvmlEventTypeXidCriticalError, event_set))
        attempt(out, "nvmlEventSetWait_0ms", lambda: lib.nvmlEventSetWait(event_set, 0))
        attempt(out, "nvmlEventSetFree", lambda: lib.nvmlEventSetFree(event_set))
    return out


def probe(lib: Any, index: int, write: bool) -> dict[str, Any]:
    out: dict[str, Any] = {"time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "gpu": index}
    attempt(out, "nvmlInit", lib.nvmlInit)
    attempt(out, "nvmlSystemGetDriverVersion", getattr(lib, "nvmlSystemGetDriverVersion", lambda: None))
    attempt(out, "nvmlDeviceGetCount", lib.nvmlDeviceGetCount)
    handle = attempt(out, "nvmlDeviceGetHandleByIndex", lambda: lib.nvmlDeviceGetHandleByIndex(index))
    if handle is None:
        return out
    reads: dict[str, Callable[[], Any]] = {
        "nvmlDeviceGetName": lambda: lib.nvmlDeviceGetName(handle),
        "nvmlDeviceGetUUID": lambda: lib.nvmlDeviceGetUUID(handle),
        "nvmlDeviceGetPowerUsage_mW": lambda: lib.nvmlDeviceGetPowerUsage(handle),
        "nvmlDeviceGetTotalEnergyConsumption_mJ": lambda: lib.nvmlDeviceGetTotalEnergyConsumption(handle),
        "nvmlDeviceGetPowerManagementLimitConstraints_mW": lambda: lib.nvmlDeviceGetPowerManagementLimitConstraints(
            handle),
        "nvmlDeviceGetPowerManagementDefaultLimit_mW": lambda: lib.nvmlDeviceGetPowerManagementDefaultLimit(handle),
        "nvmlDeviceGetPowerManagementLimit_mW": lambda: lib.nvmlDeviceGetPowerManagementLimit(handle),
        "nvmlDeviceGetEnforcedPowerLimit_mW": lambda: lib.nvmlDeviceGetEnforcedPowerLimit(handle),
        "nvmlDeviceGetUtilizationRates": lambda: lib.nvmlDeviceGetUtilizationRates(handle),
        "nvmlDeviceGetMemoryInfo": lambda: lib.nvmlDeviceGetMemoryInfo(handle),
        "nvmlDeviceGetClockInfo_SM_MHz": lambda: lib.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM),
        "nvmlDeviceGetMaxClockInfo_SM_MHz": lambda: lib.nvmlDeviceGetMaxClockInfo(handle, pynvml.NVML_CLOCK_SM),
        "nvmlDeviceGetTemperatureV_C": lambda: lib.nvmlDeviceGetTemperatureV(handle, pynvml.NVML_TEMPERATURE_GPU),
        "nvmlDeviceGetTemperature_C": lambda: lib.nvmlDeviceGetTemperature(handle, pynvml.NVML_TEMPERATURE_GPU),
        "nvmlDeviceGetComputeRunningProcesses": lambda: lib.nvmlDeviceGetComputeRunningProcesses(handle),
        "nvmlDeviceGetTotalEccErrors_uncorrected_volatile": lambda: lib.nvmlDeviceGetTotalEccErrors(
            handle, pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, pynvml.NVML_VOLATILE_ECC),
        "nvmlDeviceGetCurrentClocksEventReasons": lambda: lib.nvmlDeviceGetCurrentClocksEventReasons(handle),
        # GPU health signals (docs/HEALTH.md)
        "nvmlDeviceGetTotalEccErrors_corrected_aggregate": lambda: lib.nvmlDeviceGetTotalEccErrors(
            handle, pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED, pynvml.NVML_AGGREGATE_ECC),
        "nvmlDeviceGetTotalEccErrors_uncorrected_aggregate": lambda: lib.nvmlDeviceGetTotalEccErrors(
            handle, pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, pynvml.NVML_AGGREGATE_ECC),
        "nvmlDeviceGetRetiredPages_sbe": lambda: lib.nvmlDeviceGetRetiredPages(
            handle, pynvml.NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS),
        "nvmlDeviceGetRemappedRows": lambda: lib.nvmlDeviceGetRemappedRows(handle),
        "nvmlDeviceGetPcieReplayCounter": lambda: lib.nvmlDeviceGetPcieReplayCounter(handle),
        "nvmlDeviceGetFieldValues_MEMORY_TEMP_return_type_uiVal": lambda: [
            [v.nvmlReturn, v.valueType, v.value.uiVal]
            for v in lib.nvmlDeviceGetFieldValues(handle, [pynvml.NVML_FI_DEV_MEMORY_TEMP])],
        "xid_event_set": lambda: _xid_events(lib, handle),
    }
    for name, call in reads.items():
        attempt(out, name, call)
    bounds = out.get("nvmlDeviceGetPowerManagementLimitConstraints_mW")
    before = out.get("nvmlDeviceGetPowerManagementLimit_mW")
    if write and isinstance(bounds, list) and isinstance(before, int):
        target = int(bounds[0] + 0.1 * (bounds[1] - bounds[0]))
        out["write_target_mW"] = target
        try:
            attempt(out, "nvmlDeviceSetPowerManagementLimit", lambda: lib.nvmlDeviceSetPowerManagementLimit(
                handle, target))
            attempt(out, "limit_after_set_mW", lambda: lib.nvmlDeviceGetPowerManagementLimit(handle))
            time.sleep(1.0)
            attempt(out, "power_after_set_mW", lambda: lib.nvmlDeviceGetPowerUsage(handle))
            attempt(out, "nvmlDeviceSetGpuLockedClocks", lambda: lib.nvmlDeviceSetGpuLockedClocks(
                handle, 1000, 1000))
        finally:
            attempt(out, "reset_nvmlDeviceSetPowerManagementLimit", lambda: lib.nvmlDeviceSetPowerManagementLimit(
                handle, before))
            attempt(out, "nvmlDeviceResetGpuLockedClocks", lambda: lib.nvmlDeviceResetGpuLockedClocks(handle))
            attempt(out, "limit_after_reset_mW", lambda: lib.nvmlDeviceGetPowerManagementLimit(handle))
    attempt(out, "out_of_range_limit", lambda: lib.nvmlDeviceSetPowerManagementLimit(handle, 10**7)
            if write else None)
    attempt(out, "nvmlShutdown", lib.nvmlShutdown)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gpu", type=int, default=0)
    parser.add_argument("--no-write", action="store_true", help="read only; try no limit change")
    parser.add_argument("--fake", action="store_true", help="run against greengpu's fake NVML (1xH200)")
    args = parser.parse_args(argv)
    lib: Any = pynvml
    if args.fake:
        from greengpu.backends.fake_nvml import FakeNvml, make_gpus
        lib = FakeNvml(make_gpus("1xH200"))
    json.dump(probe(lib, args.gpu, write=not args.no_write), sys.stdout, indent=1, sort_keys=True)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
