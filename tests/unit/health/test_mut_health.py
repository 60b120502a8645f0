"""GPU health at its edges: thresholds met exactly (above is the rule), each signal's rate over a window
that is not a day, the baseline sample before the window, what latches as critical and with which words,
the checkpoint an alert assumes, and the alert's line and JSON written out whole."""

from __future__ import annotations

import math

import pytest
from schedkit import job

from greengpu.health.alerts import HealthAlert, JobOnGpu, alert_dict, alert_line, build_alert, last_checkpoint_s
from greengpu.health.score import (
    DAY_S,
    HealthAssessment,
    HealthPolicy,
    HealthState,
    SignalLevels,
    SignalScore,
    assess,
    signal_values,
)
from greengpu.health.signals import CriticalEvent, GpuHealthSample, SignalHistory
from greengpu.model import GpuSlot, RunningJob

H_WARN = -math.log(1.0 - 0.7)  # the hazard at the default warning score


# --- thresholds and their messages ------------------------------------------------------------------

def test_policies_out_of_range_are_refused_with_what_was_given() -> None:
    with pytest.raises(ValueError, match=r"^signal levels need 0 <= ok < warn, got ok=5.0 warn=5.0$"):
        SignalLevels(ok=5.0, warn=5.0)
    for warning, failing in ((0.0, 0.9), (0.8, 0.8), (0.7, 1.0), (0.7, 1.5)):
        with pytest.raises(ValueError, match=rf"^need 0 < warning_score < failing_score < 1, got {warning} "
                                             rf"and {failing}$"):
            HealthPolicy(warning_score=warning, failing_score=failing)
    for window_s in (0.0, math.inf):
        with pytest.raises(ValueError, match=rf"^window_s must be positive, got {window_s}$"):
            HealthPolicy(window_s=window_s)
    assert HealthPolicy(window_s=0.5).window_s == 0.5  # any positive window, however short


def test_a_history_needs_a_positive_window() -> None:
    with pytest.raises(ValueError, match=r"^window_s must be positive, got 0$"):
        SignalHistory(0)
    assert SignalHistory(0.5).window_s == 0.5


def test_a_sample_at_the_same_time_is_taken_an_older_one_refused_naming_the_last() -> None:
    history = SignalHistory(DAY_S)
    for t in (0.0, 10.0, 20.0):
        history.add(GpuHealthSample(t))
    with pytest.raises(ValueError, match=r"^sample at 15.0 s is older than the last one at 20.0 s$"):
        history.add(GpuHealthSample(15.0))
    history.add(GpuHealthSample(20.0))
    assert [s.time_s for s in history.samples] == [0.0, 10.0, 20.0, 20.0]


def one_day(**grown: int) -> tuple[GpuHealthSample, ...]:
    """Two samples a day apart, each named counter growing from 0 by the given amount."""
    zeros = {k: 0 for k in grown}
    return (GpuHealthSample(0.0, **zeros), GpuHealthSample(DAY_S, **grown))  # type: ignore[arg-type]


def test_a_score_on_the_warning_threshold_is_not_yet_a_warning() -> None:
    # warn level 8 and warning score 0.75: 8 errors in a day is a hazard of exactly -ln(0.25), score 0.75.
    policy = HealthPolicy(warning_score=0.75, sbe_per_day=SignalLevels(ok=0.0, warn=8.0))
    assert assess(one_day(ecc_corrected_total=8), (), DAY_S, policy).state is HealthState.HEALTHY
    assert assess(one_day(ecc_corrected_total=9), (), DAY_S, policy).state is HealthState.WARNING


def test_a_score_on_the_failing_threshold_is_a_warning_above_it_failing() -> None:
    # 20 errors a day, twice the warning level: 1 - 0.3^2 = 0.91.
    policy = HealthPolicy(failing_score=0.91)
    assessment = assess(one_day(ecc_corrected_total=20), (), DAY_S, policy)
    assert assessment.score == pytest.approx(0.91) and assessment.state is HealthState.WARNING
    # 30 a day: 1 - 0.3^3 = 0.973, over the default 0.95, with no critical event.
    assessment = assess(one_day(ecc_corrected_total=30), (), DAY_S)
    assert assessment.score == pytest.approx(0.973) and assessment.state is HealthState.FAILING
    assert assessment.critical == ()


# --- signals over the window ------------------------------------------------------------------------

def test_the_hazard_counts_from_the_ok_level_over_the_span_to_the_warning_level() -> None:
    # Sensors 10 C apart; ok 5, warn 15: half-way, half the warning hazard.
    samples = (GpuHealthSample(0.0, temperatures_c=(60.0, 70.0)), GpuHealthSample(60.0, temperatures_c=(61.0, 71.0)))
    assessment = assess(samples, (), 60.0)
    (spread,) = assessment.signals
    assert spread.signal == "memory_temp_spread_c" and spread.value == 10.0
    assert spread.hazard == pytest.approx(0.5 * H_WARN)
    assert assessment.score == pytest.approx(1.0 - math.sqrt(0.3))


def test_growth_counts_from_the_last_sample_before_the_window() -> None:
    # Window 100 s ending at 200: it starts at 100. The sample at 100 is inside; the baseline is the one at 50.
    samples = (GpuHealthSample(50.0, ecc_corrected_total=0), GpuHealthSample(100.0, ecc_corrected_total=3),
               GpuHealthSample(200.0, ecc_corrected_total=8))
    assert signal_values(samples, 200.0, 100.0)["sbe_per_day"] == pytest.approx(8 * DAY_S / 100.0)
    # Three samples before the window: only the last of them is the baseline (4 -> 10, not 2 -> 10).
    four = (GpuHealthSample(10.0, ecc_corrected_total=0), GpuHealthSample(30.0, ecc_corrected_total=2),
            GpuHealthSample(50.0, ecc_corrected_total=4), GpuHealthSample(150.0, ecc_corrected_total=10))
    assert signal_values(four, 200.0, 100.0)["sbe_per_day"] == pytest.approx(6 * DAY_S / 100.0)


def test_rates_are_per_day_and_per_minute_of_a_window_that_is_not_a_day() -> None:
    half_day = DAY_S / 2
    samples = (GpuHealthSample(0.0, ecc_corrected_total=0, retired_pages_sbe=0, remapped_rows_correctable=0,
                               pcie_replays_total=0),
               GpuHealthSample(half_day, ecc_corrected_total=5, retired_pages_sbe=2, remapped_rows_correctable=1,
                               pcie_replays_total=1440))
    values = signal_values(samples, half_day, half_day)
    assert values["sbe_per_day"] == pytest.approx(10.0)
    assert values["retired_rows_per_day"] == pytest.approx(6.0)  # 2 pages and 1 row in half a day
    assert values["pcie_replays_per_min"] == pytest.approx(2.0)  # 1440 in 720 minutes
    only_pages = (GpuHealthSample(0.0, retired_pages_sbe=0), GpuHealthSample(DAY_S, retired_pages_sbe=2))
    assert signal_values(only_pages, DAY_S, DAY_S)["retired_rows_per_day"] == pytest.approx(2.0)


def test_a_signal_at_its_ok_level_contributes_nothing() -> None:
    assessment = assess(one_day(ecc_corrected_total=0), (), DAY_S)
    assert [(s.signal, s.hazard, s.contribution) for s in assessment.signals] == [("sbe_per_day", 0.0, 0.0)]
    assert assessment.top_signals() == ()


def test_with_a_critical_event_the_trends_contribute_nothing() -> None:
    event = CriticalEvent(DAY_S, "xid_critical", "Xid 79")
    assessment = assess(one_day(ecc_corrected_total=5), (event,), DAY_S)
    assert assessment.score == 1.0 and assessment.state is HealthState.FAILING
    assert [s.contribution for s in assessment.signals] == [0.0]


def signal(name: str, contribution: float) -> SignalScore:
    return SignalScore(name, 1.0, "u", 1.0, contribution, contribution)


def test_the_top_three_contributing_signals_are_named() -> None:
    assessment = HealthAssessment(0.8, HealthState.WARNING, (signal("a", 0.1), signal("b", 0.4), signal("c", 0.2),
                                                             signal("d", 0.1), signal("e", 0.0)))
    assert [s.signal for s in assessment.top_signals()] == ["b", "c", "a"]
    assert [s.signal for s in assessment.top_signals(10)] == ["b", "c", "a", "d"]
    alert = build_alert(5.0, "n1", 0, "GPU-0", assessment, ())
    assert alert is not None and [s.signal for s in alert.top_signals] == ["b", "c", "a"]


# --- what latches as critical -----------------------------------------------------------------------

def test_critical_xids_and_a_failed_remap_latch_once_with_their_time_and_words() -> None:
    history = SignalHistory(DAY_S)
    history.add(GpuHealthSample(5.0, xids=(79, 13)))
    history.add(GpuHealthSample(6.0, remap_failure=True))
    history.add(GpuHealthSample(7.0, remap_failure=True))
    assert history.critical == (CriticalEvent(5.0, "xid_critical", "Xid 79"),
                                CriticalEvent(6.0, "row_remap_failure", "row remapping failed: no spare rows"))


def test_uncorrectable_growth_latches_per_counter_with_its_count() -> None:
    history = SignalHistory(DAY_S)
    history.add(GpuHealthSample(0.0, ecc_uncorrected_total=3, retired_pages_dbe=0, remapped_rows_uncorrectable=None))
    history.add(GpuHealthSample(10.0, ecc_uncorrected_total=5, retired_pages_dbe=1, remapped_rows_uncorrectable=4))
    history.add(GpuHealthSample(20.0, ecc_uncorrected_total=5, retired_pages_dbe=1, remapped_rows_uncorrectable=4))
    history.add(GpuHealthSample(30.0, ecc_uncorrected_total=1, retired_pages_dbe=1, remapped_rows_uncorrectable=7))
    assert history.critical == (
        CriticalEvent(10.0, "uncorrectable_ecc", "2 new uncorrectable ECC errors"),
        CriticalEvent(10.0, "uncorrectable_ecc", "1 new pages retired for double-bit errors"),
        # rows: not reported before, so nothing to compare at 10; unchanged at 20
        CriticalEvent(30.0, "uncorrectable_ecc", "1 new uncorrectable ECC errors"),  # a reset: 1 is all new
        CriticalEvent(30.0, "uncorrectable_ecc", "3 new rows remapped for uncorrectable errors"),
    )


# --- alerts -----------------------------------------------------------------------------------------

def running(interval_s: float | None, start_s: float = 1000.0, seen_s: float | None = None) -> RunningJob:
    return RunningJob(job("j", checkpoint_interval_s=interval_s), (GpuSlot("n1", 0),), start_s, 1e6,
                      last_checkpoint_s=seen_s)


def test_the_last_checkpoint_is_the_last_whole_interval_since_the_start() -> None:
    assert last_checkpoint_s(running(600.0), 1100.0) is None  # not one interval yet
    assert last_checkpoint_s(running(600.0), 1600.0) == 1600.0  # exactly one
    assert last_checkpoint_s(running(600.0), 2500.0) == 2200.0  # two whole intervals, not 2.5
    assert last_checkpoint_s(running(1.0), 1002.5) == 1002.0
    assert last_checkpoint_s(running(0.0), 5000.0) is None  # no interval: none assumed
    assert last_checkpoint_s(running(None), 5000.0) is None
    assert last_checkpoint_s(running(600.0, seen_s=1234.0), 5000.0) == 1234.0  # one the body saw


def an_alert(**overrides: object) -> HealthAlert:
    values: dict[str, object] = dict(
        time_s=1000.0, node="n1", gpu_index=2, uuid="GPU-1", state=HealthState.WARNING, score=0.812345,
        top_signals=(SignalScore("sbe_per_day", 30.0, "errors/day", 10.0, 1.0, 0.5),
                     SignalScore("pcie_replays_per_min", 2.5, "replays/min", 8.0, 0.6, 0.123456)),
        critical=("Xid 79", "1 new uncorrectable ECC errors"),
        jobs=(JobOnGpu("a", "t1", "training", 400.0), JobOnGpu("b", "t2", "inference", None)))
    values.update(overrides)
    return HealthAlert(**values)  # type: ignore[arg-type]


def test_the_alert_line_written_out() -> None:
    assert alert_line(an_alert()) == (
        "GPU health warning: n1 GPU 2 (GPU-1) score 0.81; critical: Xid 79, 1 new uncorrectable ECC errors; "
        "top signals: sbe_per_day 30 errors/day (+0.50), pcie_replays_per_min 2.5 replays/min (+0.12); "
        "jobs: a (tenant t1, training, last checkpoint 600 s ago), "
        "b (tenant t2, inference, last checkpoint: none seen since start)")
    assert alert_line(an_alert(top_signals=(), critical=(), jobs=())) == (
        "GPU health warning: n1 GPU 2 (GPU-1) score 0.81; top signals: none; jobs: none")


def test_the_alert_as_json_written_out() -> None:
    assert alert_dict(an_alert()) == {
        "time_s": 1000.0, "node": "n1", "gpu": 2, "uuid": "GPU-1", "state": "warning", "score": 0.8123,
        "top_signals": [
            {"signal": "sbe_per_day", "value": 30.0, "unit": "errors/day", "contribution": 0.5},
            {"signal": "pcie_replays_per_min", "value": 2.5, "unit": "replays/min", "contribution": 0.1235},
        ],
        "critical": ["Xid 79", "1 new uncorrectable ECC errors"],
        "jobs": [{"job": "a", "tenant": "t1", "class": "training", "last_checkpoint_s": 400.0},
                 {"job": "b", "tenant": "t2", "class": "inference", "last_checkpoint_s": None}],
    }
