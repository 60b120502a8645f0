"""The fake NVML keeps what was written like a GPU does: a limit or clock set by a process outlives it,
even when the process is killed right after the write (the daemon's and the agent's crash tests rely on it)."""

from __future__ import annotations

from pathlib import Path

import pynvml
import pytest

from greengpu.backends.fake_nvml import WRITE_LOG_LINES, FakeNvml, make_gpus


def fresh(path: Path) -> FakeNvml:
    """What a process started after a kill finds: a new fake over the same state file."""
    fake = FakeNvml(make_gpus("2xA100"), state_path=path)
    fake.nvmlInit()
    return fake


def test_a_write_outlives_a_process_killed_right_after_it(tmp_path: Path) -> None:
    path = tmp_path / "nvml.json"
    first = fresh(path)
    first.nvmlDeviceSetPowerManagementLimit(first.nvmlDeviceGetHandleByIndex(0), 250_000)
    first.nvmlDeviceSetPowerManagementLimit(first.nvmlDeviceGetHandleByIndex(1), 300_000)
    first.nvmlDeviceSetGpuLockedClocks(first.nvmlDeviceGetHandleByIndex(1), 1200, 1200)
    first.nvmlDeviceSetPowerManagementLimit(first.nvmlDeviceGetHandleByIndex(1), 200_000)
    # No save, no nvmlShutdown: the process is gone.
    second = fresh(path)
    assert [g.limit_w for g in second.gpus] == [250.0, 200.0]  # the last write of each GPU
    assert [g.locked_clock_mhz for g in second.gpus] == [None, 1200]
    second.nvmlDeviceResetGpuLockedClocks(second.nvmlDeviceGetHandleByIndex(1))
    assert fresh(path).gpus[1].locked_clock_mhz is None


def test_a_torn_last_line_is_a_write_that_never_returned(tmp_path: Path) -> None:
    path = tmp_path / "nvml.json"
    first = fresh(path)
    first.nvmlDeviceSetPowerManagementLimit(first.nvmlDeviceGetHandleByIndex(0), 250_000)
    first.nvmlDeviceSetPowerManagementLimit(first.nvmlDeviceGetHandleByIndex(0), 150_000)
    with path.with_suffix(".json.writes").open("a") as log:
        log.write('{"gpu": 0, "limit_w": 12')  # killed in the middle of the next write
    assert fresh(path).gpus[0].limit_w == 150.0


def test_save_folds_the_log_into_the_file_and_a_long_log_is_folded_on_its_own(tmp_path: Path) -> None:
    path = tmp_path / "nvml.json"
    log = path.with_suffix(".json.writes")
    first = fresh(path)
    handle = first.nvmlDeviceGetHandleByIndex(0)
    first.nvmlDeviceSetPowerManagementLimit(handle, 250_000)  # the first write creates the file
    first.nvmlDeviceSetPowerManagementLimit(handle, 260_000)
    assert log.exists()
    first.save()
    assert not log.exists() and fresh(path).gpus[0].limit_w == 260.0
    for step in range(WRITE_LOG_LINES + 5):
        first.nvmlDeviceSetPowerManagementLimit(handle, 100_000 + step * 100)
    assert len(log.read_text().splitlines()) < WRITE_LOG_LINES  # folded once it grew that long
    assert fresh(path).gpus[0].limit_w == 100.0 + (WRITE_LOG_LINES + 4) * 0.1


def test_a_refused_write_is_not_logged(tmp_path: Path) -> None:
    path = tmp_path / "nvml.json"
    first = fresh(path)
    handle = first.nvmlDeviceGetHandleByIndex(0)
    first.nvmlDeviceSetPowerManagementLimit(handle, 250_000)
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        first.nvmlDeviceSetPowerManagementLimit(handle, 999_000)
    assert fresh(path).gpus[0].limit_w == 250.0
