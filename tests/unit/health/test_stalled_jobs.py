"""The stalled-job rule: a training job below half its own baseline for the sustain period alerts once, clears
when it recovers; jobs that never used their GPUs, short dips and too few early samples do not alert."""

from __future__ import annotations

from greengpu.health.stalled import StallChange, StallPolicy, StallWatch, checkpoint_text, stall_line

POLICY = StallPolicy(baseline_s=600.0, min_samples=3, ratio=0.5, sustain_s=900.0, min_baseline=0.1)


def feed(watch: StallWatch, samples: list[tuple[float, float]]) -> list[tuple[float, StallChange]]:
    events = []
    for time_s, util in samples:
        event = watch.observe("j", time_s, util)
        if event is not None:
            events.append((time_s, event.change))
    return events


def minutes(start_min: int, end_min: int, util: float) -> list[tuple[float, float]]:
    return [(60.0 * m, util) for m in range(start_min, end_min)]


def test_a_sustained_drop_below_half_the_baseline_alerts_once_and_clears_on_recovery() -> None:
    watch = StallWatch(POLICY)
    # Baseline: the median of its first 10 minutes (0.8); one early outlier does not move it.
    samples = minutes(0, 10, 0.8) + [(600.0, 0.1)] + minutes(11, 40, 0.3) + minutes(40, 45, 0.7)
    events = feed(watch, samples)
    # Below 0.4 from minute 11: the alert at minute 26 (15 minutes), one only; cleared at minute 40.
    assert events == [(26 * 60.0, StallChange.STALLED), (40 * 60.0, StallChange.RECOVERED)]
    assert watch.jobs["j"].baseline == 0.8


def test_a_short_dip_and_a_dip_to_just_half_do_not_alert() -> None:
    watch = StallWatch(POLICY)
    samples = minutes(0, 11, 0.8) + minutes(11, 20, 0.1) + minutes(20, 22, 0.8) + minutes(22, 60, 0.4)
    assert feed(watch, samples) == []  # 9 minutes below, then exactly half (not below) for long


def test_a_job_that_never_used_its_gpus_is_never_stalled() -> None:
    watch = StallWatch(POLICY)
    assert feed(watch, minutes(0, 120, 0.05)) == []


def test_too_few_early_samples_learn_the_baseline_afresh() -> None:
    watch = StallWatch(POLICY)
    # Two samples in the first 10 minutes (a report gap): no baseline yet; learnt again from minute 20.
    samples = [(0.0, 0.9), (300.0, 0.9)] + minutes(20, 31, 0.6) + minutes(31, 60, 0.2)
    events = feed(watch, samples)
    assert watch.jobs["j"].baseline == 0.6
    assert events == [(46 * 60.0, StallChange.STALLED)]


def test_jobs_that_end_are_forgotten() -> None:
    watch = StallWatch(POLICY)
    watch.observe("a", 0.0, 0.5)
    watch.observe("b", 0.0, 0.5)
    watch.forget_except({"b"})
    assert set(watch.jobs) == {"b"}


def test_the_alert_names_job_tenant_node_utilisation_baseline_and_last_checkpoint() -> None:
    watch = StallWatch(POLICY)
    events = [watch.observe("j", t, u) for t, u in minutes(0, 11, 0.8) + minutes(11, 27, 0.2)]
    stalled = [e for e in events if e is not None][0]
    line = stall_line(stalled, "vision", "n3", 1000.0)
    assert line == ("job j (tenant vision) on n3 stalled: GPU utilisation 20%, below half its baseline 80% for "
                    "900 s; last checkpoint 560 s ago (at 1000)")
    assert checkpoint_text(None, 5.0) == "last checkpoint: none seen since start"
