"""The NVML adapter against the fake NVML: units, clamping, and the translated error paths."""

from __future__ import annotations

import logging

import pynvml
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from manual_clock import ManualClock

from greengpu.backends.fake_nvml import FakeNvml, make_gpus
from greengpu.backends.nvml import (
    CLAMP_MESSAGE,
    PERMISSION_MESSAGE,
    NvmlBackend,
    NvmlUnavailable,
)


def backend_for(spec: str, root: bool = True) -> tuple[NvmlBackend, FakeNvml, ManualClock]:
    clock = ManualClock()
    fake = FakeNvml(make_gpus(spec), root=root, clock=clock)
    backend = NvmlBackend(lib=fake, clock=clock)
    backend.open()
    return backend, fake, clock


def test_readings_are_in_watts_joules_and_ratios() -> None:
    backend, fake, clock = backend_for("1xA100")
    fake.set_load(0, 0.5, [321])
    first = backend.read(0)
    clock.now_s += 10.0
    second = backend.read(0)
    # 52 W idle + (400 - 52) x 0.5 = 226 W for 10 s = 2260 J.
    assert second.power_w == pytest.approx(226.0)
    assert second.energy_j - first.energy_j == pytest.approx(2260.0, abs=0.01)
    assert second.energy_from_counter
    assert (second.constraints.min_w, second.constraints.max_w, second.constraints.default_w) == (100, 400, 400)
    assert second.utilization == 0.5 and second.pids == (321,)
    assert second.limit_w == 400.0 and second.sw_power_cap is False
    assert second.ecc_uncorrected_volatile == 0 and second.temperature_c is not None


def test_sw_power_cap_bit_reported_when_the_limit_holds_power_down() -> None:
    backend, fake, _ = backend_for("1xA100")
    fake.set_load(0, 1.0, [1])
    assert backend.set_power_limit_w(0, 250.0) == 250.0
    reading = backend.read(0)
    assert reading.sw_power_cap and reading.power_w == 250.0 and reading.enforced_limit_w == 250.0


@settings(max_examples=200, deadline=None)
@given(asked_w=st.floats(min_value=-1e4, max_value=1e4, allow_nan=False))
def test_limits_always_reach_nvml_within_constraints(asked_w: float) -> None:
    backend, fake, _ = backend_for("1xH200")
    set_w = backend.set_power_limit_w(0, asked_w)
    assert set_w is not None and 200.0 <= set_w <= 700.0
    assert fake.gpus[0].limit_w == set_w
    assert fake.calls == ["nvmlDeviceSetPowerManagementLimit"]  # one call, never refused


def test_out_of_range_limit_is_clamped_and_logged(caplog: pytest.LogCaptureFixture) -> None:
    backend, fake, _ = backend_for("1xA100")
    with caplog.at_level(logging.WARNING, logger="greengpu.nvml"):
        assert backend.set_power_limit_w(0, 50.0) == 100.0
    assert caplog.messages == [CLAMP_MESSAGE.format(index=0, asked_w=50.0, min_w=100.0, max_w=400.0, limit_w=100.0)]
    assert caplog.messages[0] == "GPU 0: asked for a 50 W limit, outside 100-400 W; setting 100 W"


def test_the_fake_raises_nvml_s_own_error_for_an_out_of_range_limit() -> None:
    # The seam is honest: what the backend protects against is what the fake (and NVML) refuse.
    _, fake, _ = backend_for("1xA100")
    handle = fake.nvmlDeviceGetHandleByIndex(0)
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        fake.nvmlDeviceSetPowerManagementLimit(handle, 50_000)
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        fake.nvmlDeviceSetGpuLockedClocks(handle, 1500, 1500)  # above the A100's 1410 MHz


def test_not_root_turns_read_only_with_one_message(caplog: pytest.LogCaptureFixture) -> None:
    backend, fake, _ = backend_for("2xA100", root=False)
    with caplog.at_level(logging.WARNING, logger="greengpu.nvml"):
        assert backend.set_power_limit_w(0, 300.0) is None
        assert backend.set_power_limit_w(1, 300.0) is None
        assert backend.lock_clocks_mhz(0, 1200) is False
    assert backend.read_only
    assert caplog.messages == [PERMISSION_MESSAGE.format(action="set the power limit", index=0)]
    assert "needs root or CAP_SYS_ADMIN" in caplog.messages[0] and "carrying on read-only" in caplog.messages[0]
    assert fake.calls == []  # the refused call never got past the permission check; later ones were skipped
    assert backend.read(0).power_w > 0  # reads carry on


def test_no_energy_counter_integrates_power(caplog: pytest.LogCaptureFixture) -> None:
    backend, fake, clock = backend_for("1xP100")
    fake.set_load(0, 1.0, [9])
    with caplog.at_level(logging.WARNING, logger="greengpu.nvml"):
        backend.read(0)
        clock.now_s += 4.0
        reading = backend.read(0)
        clock.now_s += 4.0
        backend.read(0)
    assert not reading.energy_from_counter
    assert reading.energy_j == pytest.approx(250.0 * 4.0)
    assert caplog.messages == ["GPU 0: NVML does not support 'energy counter' on this GPU (NotSupported): "
                               "energy is integrated from power samples instead"]


def test_clock_locking_not_supported_falls_back_to_limits(caplog: pytest.LogCaptureFixture) -> None:
    backend, fake, _ = backend_for("1xP100")
    with caplog.at_level(logging.WARNING, logger="greengpu.nvml"):
        assert backend.lock_clocks_mhz(0, 1000) is False
    assert "NotSupported" in caplog.messages[-1] and "power limits still apply" in caplog.messages[-1]
    assert backend.set_power_limit_w(0, 200.0) == 200.0  # the other lever still works


def test_consumer_gpu_without_ecc_reports_none() -> None:
    backend, _, _ = backend_for("1xRTX6000")
    assert backend.read(0).ecc_uncorrected_volatile is None


def test_locked_clock_is_kept_under_the_maximum() -> None:
    backend, fake, _ = backend_for("1xA100")
    assert backend.lock_clocks_mhz(0, 5000)
    assert fake.gpus[0].locked_clock_mhz == 1410


def test_calls_before_init_are_refused_like_nvml() -> None:
    fake = FakeNvml(make_gpus("1xA100"))
    with pytest.raises(pynvml.NVMLError_Uninitialized):
        fake.nvmlDeviceGetCount()


def test_real_library_without_a_gpu_says_so() -> None:
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        pass
    else:
        pynvml.nvmlShutdown()
        pytest.skip("an NVIDIA driver is present here; this test is for machines without one (CI)")
    with pytest.raises(NvmlUnavailable, match="NVML cannot start: .*is the NVIDIA driver installed"):
        NvmlBackend().open()


def test_probe_script_records_values_and_exact_errors_and_restores() -> None:
    import json
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parents[3] / "scripts" / "nvml_probe.py"
    out = subprocess.run([sys.executable, str(script), "--fake"], check=True, capture_output=True, text=True).stdout
    result = json.loads(out)
    assert result["nvmlDeviceGetPowerManagementLimitConstraints_mW"] == [200000, 700000]
    assert result["limit_after_set_mW"] == result["write_target_mW"] == 250000
    assert result["limit_after_reset_mW"] == 700000
    assert result["out_of_range_limit"] == {"error": "NVMLError_InvalidArgument", "code": 2,
                                            "message": "Invalid Argument"}
