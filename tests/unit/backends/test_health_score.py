"""The GPU health score: signals read through the real NVML adapter from the fake NVML, kept as a history,
scored. The expected states follow from the rules in greengpu/health/score.py and docs/HEALTH.md."""

from __future__ import annotations

import math

import pynvml
import pytest

from greengpu.backends.fake_nvml import FakeNvml, make_gpus
from greengpu.backends.nvml import NvmlBackend
from greengpu.health.score import DAY_S, HealthPolicy, HealthState, SignalLevels, assess
from greengpu.health.signals import GpuHealthSample, SignalHistory, counter_increase

HOUR_S = 3600.0


class Clock:
    def __init__(self) -> None:
        self.now_s = 1_000_000.0

    def __call__(self) -> float:
        return self.now_s


def rig(spec: str = "2xA100") -> tuple[FakeNvml, NvmlBackend, Clock]:
    clock = Clock()
    fake = FakeNvml(make_gpus(spec), clock=clock)
    backend = NvmlBackend(lib=fake, clock=clock)
    backend.open()
    return fake, backend, clock


def run_hours(fake: FakeNvml, backend: NvmlBackend, clock: Clock, hours: int, sbe_per_hour: dict[int, float],
              window_s: float = DAY_S) -> dict[int, SignalHistory]:
    """Sample every GPU once an hour for `hours`, the corrected ECC counters climbing at the given rates."""
    histories = {i: SignalHistory(window_s) for i in range(backend.gpu_count)}
    owed = dict.fromkeys(sbe_per_hour, 0.0)
    for _ in range(hours):
        clock.now_s += HOUR_S
        for index, rate in sbe_per_hour.items():
            owed[index] += rate
            whole = int(owed[index])
            fake.gpus[index].ecc_corrected += whole
            owed[index] -= whole
        for index in range(backend.gpu_count):
            histories[index].add(backend.read_health(index))
    return histories


def test_a_gpu_whose_single_bit_errors_climb_past_ten_a_day_crosses_warning_a_steady_one_does_not() -> None:
    fake, backend, clock = rig()
    fake.gpus[0].ecc_corrected = 40  # an old count: the total is not the trend
    fake.gpus[1].ecc_corrected = 40
    histories = run_hours(fake, backend, clock, 48, {0: 12 / 24, 1: 0.0})  # 12 a day on GPU 0; GPU 1 steady
    climbing = assess(histories[0].samples, histories[0].critical, clock.now_s)
    steady = assess(histories[1].samples, histories[1].critical, clock.now_s)
    assert climbing.state is HealthState.WARNING and climbing.score > 0.7
    sbe = {s.signal: s for s in climbing.signals}["sbe_per_day"]
    assert sbe.value == pytest.approx(12.0, abs=1.0) and sbe.unit == "errors/day"
    assert steady.state is HealthState.HEALTHY and steady.score == 0.0


def test_fewer_than_ten_a_day_stays_healthy_and_the_score_rises_with_the_rate() -> None:
    fake, backend, clock = rig("3xA100")
    histories = run_hours(fake, backend, clock, 30, {0: 4 / 24, 1: 8 / 24, 2: 20 / 24})
    scores = [assess(h.samples, h.critical, clock.now_s).score for h in histories.values()]
    assert scores[0] < scores[1] <= 0.7 < scores[2]
    states = [assess(h.samples, h.critical, clock.now_s).state for h in histories.values()]
    assert states == [HealthState.HEALTHY, HealthState.HEALTHY, HealthState.WARNING]


def test_errors_that_leave_the_window_no_longer_count() -> None:
    fake, backend, clock = rig("1xA100")
    histories = run_hours(fake, backend, clock, 24, {0: 1.0})  # 24 in a day
    assert assess(histories[0].samples, histories[0].critical, clock.now_s).state is HealthState.WARNING
    history = histories[0]
    for _ in range(30):  # a quiet day and a bit
        clock.now_s += HOUR_S
        history.add(backend.read_health(0))
    assert assess(history.samples, history.critical, clock.now_s).state is HealthState.HEALTHY


def test_each_signals_contribution_is_reported_and_they_add_up_to_the_score() -> None:
    fake, backend, clock = rig("1xA100")
    gpu = fake.gpus[0]
    gpu.memory_temp_offset_c = 12.0  # die and memory 12 C apart
    history = SignalHistory(DAY_S)
    for hour in range(24):
        clock.now_s += HOUR_S
        gpu.ecc_corrected += 1 if hour % 4 == 0 else 0  # 6 a day
        gpu.pcie_replays += 2 * 60  # 2 a minute
        gpu.remapped_rows_correctable += 1 if hour == 10 else 0
        gpu.hw_slowdown_reasons = pynvml.nvmlClocksEventReasonHwThermalSlowdown if hour % 3 == 0 else 0
        history.add(backend.read_health(0))
    result = assess(history.samples, history.critical, clock.now_s)
    by_name = {s.signal: s for s in result.signals}
    assert set(by_name) == {"sbe_per_day", "memory_temp_spread_c", "pcie_replays_per_min", "retired_rows_per_day",
                            "slowdown_fraction"}
    assert by_name["memory_temp_spread_c"].value == pytest.approx(12.0, abs=1.0)
    assert by_name["pcie_replays_per_min"].value == pytest.approx(2.0 * 23 / 24, rel=0.05)
    assert by_name["retired_rows_per_day"].value == pytest.approx(1.0)
    assert by_name["slowdown_fraction"].value == pytest.approx(1 / 3)
    assert all(s.contribution > 0 for s in result.signals)
    assert sum(s.contribution for s in result.signals) == pytest.approx(result.score)
    # Additive hazard: the score is 1 - exp(-sum of the signals' hazards).
    assert result.score == pytest.approx(1 - math.exp(-sum(s.hazard for s in result.signals)))
    # Several signals each below its own warning level add up past the threshold.
    assert all(s.value < s.warn_level for s in result.signals if s.signal != "retired_rows_per_day")
    assert result.state is not HealthState.HEALTHY
    top = result.top_signals(2)
    assert [s.contribution for s in top] == sorted((s.contribution for s in result.signals), reverse=True)[:2]


def test_a_critical_xid_moves_a_gpu_to_failing_and_stays_until_repaired() -> None:
    fake, backend, clock = rig()
    backend.watch_xids()
    history = SignalHistory(DAY_S)
    clock.now_s += HOUR_S
    history.add(backend.read_health(0, backend.drain_xids().get(0, ())))
    assert assess(history.samples, history.critical, clock.now_s).state is HealthState.HEALTHY
    fake.inject_xid(0, 79)  # fallen off the bus
    fake.inject_xid(1, 13)  # an application's fault, on the other GPU: not a health signal
    xids = backend.drain_xids()
    assert xids == {0: (79,), 1: (13,)}
    clock.now_s += HOUR_S
    history.add(backend.read_health(0, xids.get(0, ())))
    failing = assess(history.samples, history.critical, clock.now_s)
    assert failing.state is HealthState.FAILING and failing.score == 1.0
    assert [e.detail for e in failing.critical] == ["Xid 79"]
    other = SignalHistory(DAY_S)
    other.add(backend.read_health(1, xids.get(1, ())))
    assert assess(other.samples, other.critical, clock.now_s).state is HealthState.HEALTHY
    for _ in range(48):  # latched: two quiet days later it still is failing
        clock.now_s += HOUR_S
        history.add(backend.read_health(0))
    assert assess(history.samples, history.critical, clock.now_s).state is HealthState.FAILING
    history.clear_critical()
    assert assess(history.samples, history.critical, clock.now_s).state is HealthState.HEALTHY


def test_an_uncorrectable_error_or_a_failed_remap_is_failing_an_old_one_is_not() -> None:
    fake, backend, clock = rig()
    fake.gpus[0].ecc_uncorrected = 2  # before greengpu started watching: not news
    history = SignalHistory(DAY_S)
    history.add(backend.read_health(0))
    assert not history.critical
    clock.now_s += 60
    fake.gpus[0].ecc_uncorrected = 3
    history.add(backend.read_health(0))
    assert assess(history.samples, history.critical, clock.now_s).state is HealthState.FAILING
    assert history.critical[0].signal == "uncorrectable_ecc"
    remap = SignalHistory(DAY_S)
    fake.gpus[1].remap_failure = True
    remap.add(backend.read_health(1))
    assert [e.signal for e in remap.critical] == ["row_remap_failure"]


def test_signals_a_gpu_does_not_support_are_missing_not_zero() -> None:
    fake, backend, clock = rig("1xRTX6000,1xV100,1xP100")
    consumer, volta, pascal = (backend.read_health(i) for i in range(3))
    assert consumer.ecc_corrected_total is None and consumer.remapped_rows_correctable is None
    assert consumer.retired_pages_sbe is None and consumer.temperatures_c == ()  # no memory sensor on GDDR
    assert volta.retired_pages_sbe == 0 and volta.remapped_rows_correctable is None  # page retirement era
    assert pascal.retired_pages_dbe == 0
    assert backend.watch_xids() == 2  # the P100 reports no Xid events
    result = assess((consumer,), (), clock.now_s)
    assert {s.signal for s in result.signals} == {"pcie_replays_per_min", "slowdown_fraction"}


def test_fake_refuses_what_nvml_refuses() -> None:
    fake, backend, _ = rig("1xA100,1xRTX6000")
    handle = fake.nvmlDeviceGetHandleByIndex(0)
    with pytest.raises(pynvml.NVMLError_NotSupported):
        fake.nvmlDeviceGetRetiredPages(handle, pynvml.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR)
    with pytest.raises(pynvml.NVMLError_NotSupported):
        fake.nvmlDeviceGetRemappedRows(fake.nvmlDeviceGetHandleByIndex(1))
    volta = FakeNvml(make_gpus("1xV100"))
    volta.nvmlInit()
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        volta.nvmlDeviceGetRetiredPages(volta.nvmlDeviceGetHandleByIndex(0), pynvml.NVML_PAGE_RETIREMENT_CAUSE_COUNT)
    with pytest.raises(TypeError):
        fake.nvmlDeviceGetFieldValues(handle, [float(pynvml.NVML_FI_DEV_MEMORY_TEMP)])
    fields = fake.nvmlDeviceGetFieldValues(fake.nvmlDeviceGetHandleByIndex(1), [pynvml.NVML_FI_DEV_MEMORY_TEMP])
    assert fields[0].nvmlReturn == pynvml.NVML_ERROR_NOT_SUPPORTED  # in the field, not raised
    event_set = fake.nvmlEventSetCreate()
    with pytest.raises(pynvml.NVMLError_Timeout):
        fake.nvmlEventSetWait(event_set, 0)
    fake.nvmlEventSetFree(event_set)
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        fake.nvmlEventSetWait(event_set, 0)
    fresh = FakeNvml(make_gpus("1xA100"))
    with pytest.raises(pynvml.NVMLError_Uninitialized):
        fresh.nvmlEventSetCreate()


def test_counter_resets_count_the_new_value_as_growth() -> None:
    assert counter_increase([(0, 5), (1, 7), (2, 1), (3, 4)]) == 2 + 1 + 3
    assert counter_increase([(0, None), (1, None)]) is None
    assert counter_increase([(0, None), (1, 3), (2, 3)]) == 0


def test_history_keeps_one_baseline_before_the_window_and_refuses_the_past() -> None:
    history = SignalHistory(10.0)
    for t in range(0, 31, 5):
        history.add(GpuHealthSample(time_s=float(t), ecc_corrected_total=t))
    assert [s.time_s for s in history.samples] == [15.0, 20.0, 25.0, 30.0]
    with pytest.raises(ValueError, match="older"):
        history.add(GpuHealthSample(time_s=29.0))


def test_policy_refuses_thresholds_out_of_order() -> None:
    with pytest.raises(ValueError):
        HealthPolicy(warning_score=0.9, failing_score=0.8)
    with pytest.raises(ValueError):
        SignalLevels(ok=5, warn=5)
    strict = HealthPolicy(sbe_per_day=SignalLevels(ok=0, warn=2))
    samples = (GpuHealthSample(0.0, ecc_corrected_total=0), GpuHealthSample(DAY_S, ecc_corrected_total=3))
    assert assess(samples, (), DAY_S, strict).state is HealthState.WARNING
    assert assess(samples, (), DAY_S).state is HealthState.HEALTHY
