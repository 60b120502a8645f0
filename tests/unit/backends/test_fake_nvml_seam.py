"""The fake NVML refuses what pynvml and NVML refuse, the way they refuse it.

pynvml converts each argument with ctypes before it calls the library (`c_uint(limit)`, enum types that
are `c_uint` too), then NVML checks ranges and permissions and returns a code that pynvml raises as the
matching `NVMLError_*` subclass. A fake that took a float milliwatt figure or an unknown clock type would
let the agent pass its tests and crash on the first real GPU.
"""

from __future__ import annotations

import numpy as np
import pynvml
import pytest
from manual_clock import ManualClock

from greengpu.backends.fake_nvml import FakeNvml, make_gpus


def opened(spec: str = "1xA100", root: bool = True) -> FakeNvml:
    fake = FakeNvml(make_gpus(spec), root=root, clock=ManualClock())
    fake.nvmlInit()
    return fake


def test_pynvml_itself_refuses_a_float_where_it_builds_a_c_uint() -> None:
    # The conversion the fake mirrors, from pynvml's own namespace (what nvmlDeviceSetPowerManagementLimit
    # does before it reaches the library); an integer wraps silently, as C's unsigned int does.
    with pytest.raises(TypeError):
        pynvml.c_uint(250000.0)
    assert pynvml.c_uint(-1).value == 2**32 - 1


@pytest.mark.parametrize("call", [
    lambda f, h: f.nvmlDeviceSetPowerManagementLimit(h, 250000.0),
    lambda f, h: f.nvmlDeviceSetPowerManagementLimit(h, np.float64(250000)),
    lambda f, h: f.nvmlDeviceSetGpuLockedClocks(h, 1200.0, 1200),
    lambda f, h: f.nvmlDeviceSetGpuLockedClocks(h, 1200, 1200.5),
    lambda f, h: f.nvmlDeviceGetHandleByIndex(0.0),
    lambda f, h: f.nvmlDeviceGetClockInfo(h, float(pynvml.NVML_CLOCK_SM)),
    lambda f, h: f.nvmlDeviceGetMaxClockInfo(h, float(pynvml.NVML_CLOCK_SM)),
    lambda f, h: f.nvmlDeviceGetTemperature(h, 0.0),
    lambda f, h: f.nvmlDeviceGetTemperatureV(h, 0.0),
    lambda f, h: f.nvmlDeviceGetTotalEccErrors(h, 1.0, pynvml.NVML_VOLATILE_ECC),
    lambda f, h: f.nvmlDeviceGetTotalEccErrors(h, pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, 0.0),
], ids=["limit", "limit-numpy", "clock-min", "clock-max", "index", "clock-type", "max-clock-type",
        "sensor", "sensor-v", "ecc-type", "ecc-counter"])
def test_a_float_argument_raises_type_error_and_changes_nothing(call) -> None:  # noqa: ANN001
    fake = opened()
    handle = fake.nvmlDeviceGetHandleByIndex(0)
    with pytest.raises(TypeError):
        call(fake, handle)
    assert fake.calls == [] and fake.gpus[0].limit_w == 400.0 and fake.gpus[0].locked_clock_mhz is None


def test_numpy_integers_pass_as_pynvml_passes_them() -> None:
    fake = opened()
    handle = fake.nvmlDeviceGetHandleByIndex(np.int64(0))
    fake.nvmlDeviceSetPowerManagementLimit(handle, np.int64(250_000))
    assert fake.gpus[0].limit_w == 250.0


def test_a_negative_integer_wraps_to_a_huge_unsigned_value_that_nvml_refuses() -> None:
    fake = opened()
    handle = fake.nvmlDeviceGetHandleByIndex(0)
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        fake.nvmlDeviceSetPowerManagementLimit(handle, -1)
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        fake.nvmlDeviceSetGpuLockedClocks(handle, -1, 1200)
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        fake.nvmlDeviceGetHandleByIndex(-1)
    assert fake.gpus[0].limit_w == 400.0 and fake.gpus[0].locked_clock_mhz is None


def test_limits_and_clocks_are_checked_against_the_gpu_to_the_milliwatt() -> None:
    fake = opened()
    handle = fake.nvmlDeviceGetHandleByIndex(0)
    fake.nvmlDeviceSetPowerManagementLimit(handle, 100_000)  # exactly the minimum
    fake.nvmlDeviceSetPowerManagementLimit(handle, 400_000)  # exactly the maximum
    for limit_mw in (99_999, 400_001):
        with pytest.raises(pynvml.NVMLError_InvalidArgument):
            fake.nvmlDeviceSetPowerManagementLimit(handle, limit_mw)
    assert fake.gpus[0].limit_w == 400.0
    fake.nvmlDeviceSetGpuLockedClocks(handle, 210, 1410)
    for low, high in ((209, 1000), (1000, 1411), (1200, 1100)):
        with pytest.raises(pynvml.NVMLError_InvalidArgument):
            fake.nvmlDeviceSetGpuLockedClocks(handle, low, high)
    assert fake.gpus[0].locked_clock_mhz == 1410


def test_enum_arguments_outside_their_nvml_range_are_invalid() -> None:
    fake = opened()
    handle = fake.nvmlDeviceGetHandleByIndex(0)
    fake.gpus[0].ecc_corrected, fake.gpus[0].ecc_uncorrected = 7, 2
    corrected = fake.nvmlDeviceGetTotalEccErrors(handle, pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED,
                                                 pynvml.NVML_AGGREGATE_ECC)
    uncorrected = fake.nvmlDeviceGetTotalEccErrors(handle, pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
                                                   pynvml.NVML_VOLATILE_ECC)
    assert (corrected, uncorrected) == (7, 2)
    assert fake.nvmlDeviceGetMaxClockInfo(handle, pynvml.NVML_CLOCK_SM) == 1410
    assert fake.nvmlDeviceGetMaxClockInfo(handle, pynvml.NVML_CLOCK_MEM) == 1593
    invalid = [
        lambda: fake.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_COUNT),
        lambda: fake.nvmlDeviceGetMaxClockInfo(handle, pynvml.NVML_CLOCK_COUNT),
        lambda: fake.nvmlDeviceGetTemperature(handle, pynvml.NVML_TEMPERATURE_COUNT),
        lambda: fake.nvmlDeviceGetTotalEccErrors(handle, pynvml.NVML_MEMORY_ERROR_TYPE_COUNT,
                                                 pynvml.NVML_VOLATILE_ECC),
        lambda: fake.nvmlDeviceGetTotalEccErrors(handle, pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
                                                 pynvml.NVML_ECC_COUNTER_TYPE_COUNT),
    ]
    for call in invalid:
        with pytest.raises(pynvml.NVMLError_InvalidArgument):
            call()
    with pytest.raises(pynvml.NVMLError_ArgumentVersionMismatch):
        fake.nvmlDeviceGetTemperatureV(handle, pynvml.NVML_TEMPERATURE_GPU, version=0)


def test_errors_are_the_exact_pynvml_subclasses() -> None:
    fake = FakeNvml(make_gpus("1xP100"), root=False, clock=ManualClock())
    with pytest.raises(pynvml.NVMLError_Uninitialized):
        fake.nvmlDeviceGetCount()
    with pytest.raises(pynvml.NVMLError_Uninitialized):  # pynvml finds no function before it converts
        fake.nvmlDeviceSetPowerManagementLimit(object(), 250000.0)
    with pytest.raises(pynvml.NVMLError_Uninitialized):
        fake.nvmlShutdown()
    fake.nvmlInit()
    handle = fake.nvmlDeviceGetHandleByIndex(0)
    with pytest.raises(pynvml.NVMLError) as refused:
        fake.nvmlDeviceSetPowerManagementLimit(handle, 200_000)
    assert type(refused.value) is pynvml.NVMLError_NoPermission
    assert refused.value.value == pynvml.NVML_ERROR_NO_PERMISSION
    with pytest.raises(pynvml.NVMLError) as unsupported:
        fake.nvmlDeviceGetTotalEnergyConsumption(handle)
    assert type(unsupported.value) is pynvml.NVMLError_NotSupported
    with pytest.raises(pynvml.NVMLError) as bad_index:
        fake.nvmlDeviceGetHandleByIndex(1)
    assert type(bad_index.value) is pynvml.NVMLError_InvalidArgument
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        fake.nvmlDeviceGetName("GPU-0")  # not a handle
