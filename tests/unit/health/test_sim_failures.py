"""The simulator's GPU failure model: seeded per GPU, hazard rising with the health score, and what the
scheduler sees of it with and without health-aware placement."""

from __future__ import annotations

import math

import pytest
from schedkit import job, make_cluster, node_type

from greengpu.health.score import HealthState
from greengpu.model import GpuSlot, NodeState, PowerState, RunningJob
from greengpu.sim.failures import (
    YEAR_S,
    FailureModel,
    FailureReplay,
    GpuEvent,
    GpuEventKind,
    failure_replay,
    failure_time_s,
    failure_timeline,
    gpu_timeline,
)

DAY_S = 86400.0


def test_the_same_seed_gives_the_same_timeline_and_a_gpu_does_not_depend_on_the_others() -> None:
    small = make_cluster([(2, node_type(4), "d")])
    large = make_cluster([(50, node_type(4), "d")])
    model = FailureModel(seed=7).scaled(50)  # many events
    first = failure_timeline(small, model, 0.0, 365 * DAY_S)
    assert first == failure_timeline(small, model, 0.0, 365 * DAY_S)
    assert first != failure_timeline(small, FailureModel(seed=8).scaled(50), 0.0, 365 * DAY_S)
    in_large = [e for e in failure_timeline(large, model, 0.0, 365 * DAY_S) if e.node in ("n0000", "n0001")]
    assert in_large == list(first)
    assert list(first) == sorted(first)


@pytest.mark.parametrize("exposure", [1e-6, 0.01, 0.05, 0.5, 3.0])
def test_failure_time_inverts_the_cumulative_hazard(exposure: float) -> None:
    base, ratio, onset, ramp = 1e-6, 50.0, 20_000.0, 30_000.0

    def hazard(t: float) -> float:
        score = min(1.0, max(0.0, (t - onset) / ramp))
        return base * ratio ** score

    t = failure_time_s(0.0, onset, ramp, base, ratio, exposure)
    steps = 20_000
    integral = sum(hazard((i + 0.5) * t / steps) for i in range(steps)) * t / steps
    assert integral == pytest.approx(exposure, rel=1e-3)


def test_without_degradation_failures_come_at_the_base_rate() -> None:
    model = FailureModel(seed=1, base_failures_per_gpu_year=2.0, degradations_per_gpu_year=0.0, repair_hours=0.0)
    failures = sum(1 for gpu in range(3000) for e in gpu_timeline(model, "n", gpu, 0.0, YEAR_S)
                   if e.kind is GpuEventKind.FAILED)
    expected = 2.0 * 3000
    assert abs(failures - expected) < 5 * math.sqrt(expected)
    assert not any(e.kind is GpuEventKind.WARNING
                   for gpu in range(100) for e in gpu_timeline(model, "n", gpu, 0, YEAR_S))


def test_warnings_come_before_most_failures_of_degrading_gpus_and_predict_them() -> None:
    model = FailureModel(seed=3, base_failures_per_gpu_year=0.5, degradations_per_gpu_year=2.0, ramp_days=5.0,
                         hazard_ratio=100.0, repair_hours=24.0)
    warned_gpu_s = 0.0
    warned_failures = 0
    failures = 0
    for gpu in range(400):
        events = gpu_timeline(model, "n", gpu, 0.0, YEAR_S)
        warned_since = None
        for event in events:
            if event.kind is GpuEventKind.WARNING:
                warned_since = event.time_s
            elif event.kind is GpuEventKind.FAILED:
                failures += 1
                if warned_since is not None:
                    warned_failures += 1
                    warned_gpu_s += event.time_s - warned_since
                warned_since = None
    # Most failures were warned of, and a warned GPU fails far faster than the base rate.
    assert warned_failures / failures > 0.6
    warned_rate_per_year = warned_failures / (warned_gpu_s / YEAR_S)
    assert warned_rate_per_year > 10 * model.base_failures_per_gpu_year


def test_what_the_scheduler_sees_with_and_without_health_aware_placement() -> None:
    timeline = (
        GpuEvent(10.0, "n0", 1, GpuEventKind.WARNING),
        GpuEvent(20.0, "n0", 1, GpuEventKind.FAILING),
        GpuEvent(30.0, "n0", 1, GpuEventKind.FAILED),
        GpuEvent(40.0, "n0", 1, GpuEventKind.REPAIRED, life=1),
    )
    model = FailureModel()
    aware, blind = FailureReplay(model, timeline, 1e9, True), FailureReplay(model, timeline, 1e9, False)
    base = {"n9": NodeState(PowerState.ASLEEP)}
    seen: list[tuple[object, object]] = []
    for event in timeline:
        changed = aware.apply(event).changed, blind.apply(event).changed
        seen.append((changed, (aware.node_states(base).get("n0"), blind.node_states(base).get("n0"))))
    assert [c for c, _ in seen] == [(True, False), (True, False), (False, True), (True, True)]
    assert seen[0][1][0] == NodeState(warning_gpus=frozenset({1}))
    assert seen[2][1] == (NodeState(failing_gpus=frozenset({1})),) * 2
    assert seen[3][1] == (None, None)
    assert [e for e in timeline if aware.apply(e).failed] == []  # old events of a GPU already repaired
    assert aware.node_states(base) is base  # nothing to add: the same mapping, the core's books skip the walk
    assert aware.stats.failures == blind.stats.failures == 1


def test_failure_stats_count_jobs_and_lost_gpu_hours_by_class() -> None:
    replay = FailureReplay(FailureModel(), (), 1e9, True)
    event = GpuEvent(100.0, "n0", 2, GpuEventKind.FAILED)
    running = {
        "a": RunningJob(job("a", job_class="inference"), (GpuSlot("n0", 2, 500),), 0.0, 1e4),
        "b": RunningJob(job("b"), (GpuSlot("n0", 2, 500),), 0.0, 1e4),
        "c": RunningJob(job("c"), (GpuSlot("n0", 3),), 0.0, 1e4),
    }
    assert replay.jobs_on(running, event) == ["a", "b"]
    replay.charge(running["a"], 3600.0)
    replay.charge(running["b"], 7200.0)
    stats = replay.stats.as_dict()
    assert stats["jobs_hit_by_failures_by_class"] == {"inference": 1, "training": 1}
    assert stats["failure_lost_gpu_hours"] == pytest.approx(3.0)
    assert HealthState.FAILING.value == GpuEventKind.FAILING.value  # the replay maps event kinds onto states


def test_an_accelerated_model_has_more_events_but_the_same_course_of_a_degrading_gpu() -> None:
    model = FailureModel()
    fast = model.scaled(10)
    assert fast.base_failures_per_gpu_year == pytest.approx(10 * model.base_failures_per_gpu_year)
    assert fast.degradations_per_gpu_year == pytest.approx(10 * model.degradations_per_gpu_year)
    assert fast.base_failures_per_gpu_year * fast.hazard_ratio == pytest.approx(
        model.base_failures_per_gpu_year * model.hazard_ratio)
    with pytest.raises(ValueError):
        model.scaled(100)


def test_the_model_refuses_rates_that_make_no_sense() -> None:
    with pytest.raises(ValueError):
        FailureModel(hazard_ratio=1.0)
    with pytest.raises(ValueError):
        FailureModel(base_failures_per_gpu_year=-1)
    with pytest.raises(ValueError):
        FailureModel(ramp_days=float("nan"))


def test_health_aware_replay_replaces_a_failing_gpu_once_its_node_is_empty_and_its_old_failure_never_comes() -> None:
    model = FailureModel(seed=5, repair_hours=1.0)
    timeline = (
        GpuEvent(10.0, "n0", 1, GpuEventKind.FAILING),
        GpuEvent(20.0, "", -1, GpuEventKind.CHECK),
        GpuEvent(30.0, "", -1, GpuEventKind.CHECK),
        GpuEvent(40.0, "n0", 1, GpuEventKind.FAILED),
    )
    replay = FailureReplay(model, timeline, 1e9, True)
    assert replay.apply(timeline[0]).changed
    assert replay.apply(timeline[1], lambda node: True).later == []  # jobs still run there: not yet
    later = replay.apply(timeline[2], lambda node: False).later  # empty: drained, the GPU replaced
    assert later[0] == GpuEvent(30.0 + 3600.0, "n0", 1, GpuEventKind.REPAIRED, life=1)
    assert all(e.life >= 1 and e.time_s > 3630.0 for e in later[1:])  # its successors' own lives
    assert later[1:] == gpu_timeline(model, "n0", 1, 3630.0, 1e9, life=1)
    assert replay.stats.replaced_before_failing == 1
    assert replay.node_states({})["n0"].failing_gpus == {1}  # out of service while replaced
    assert not replay.apply(timeline[3]).failed  # the old GPU's failure never comes
    assert replay.stats.failures == 0
    assert replay.apply(later[0]).changed and replay.node_states({}) == {}


def test_failure_replay_adds_checks_only_when_health_aware() -> None:
    cluster = make_cluster([(1, node_type(2), "d")])
    model = FailureModel(seed=5, check_interval_s=3600.0).scaled(50)
    aware = failure_replay(cluster, model, 0.0, 2 * DAY_S, True)
    blind = failure_replay(cluster, model, 0.0, 2 * DAY_S, False)
    assert [e for e in aware.timeline if e.kind is not GpuEventKind.CHECK] == list(blind.timeline)
    assert sum(e.kind is GpuEventKind.CHECK for e in aware.timeline) == 48
