"""The capping decision per class: limits always within constraints, latency budget, non-binding caps."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st
from schedkit import node_type

from greengpu.capping.cap_decision import CapDecision, LimitConstraints, busy_effect, cap_binds, decide
from greengpu.energy.curves import INFERENCE
from greengpu.energy.power_model import TRAINING_CURVE
from greengpu.policy import CappingPolicy, ClassCapping

A100 = LimitConstraints(min_w=100, max_w=400, default_w=400)


def policy(**classes: ClassCapping) -> CappingPolicy:
    return CappingPolicy(enabled=True, classes=classes, idle_to_min_limit=True)


def test_efficiency_from_the_model_caps_below_default_within_budget() -> None:
    decision = decide("training", policy(training=ClassCapping("efficiency", max_slowdown=0.05)), A100, 1410)
    assert decision.limit_w is not None and 100 <= decision.limit_w < 400
    assert decision.locked_clock_mhz is None
    assert 0 < decision.expected_slowdown <= 0.05
    assert decision.reason == (f"class training: {decision.limit_w:g} W, least energy within 5% slowdown "
                               "(power model, training curve)")
    power_w, speed = busy_effect(decision, node_type(8))
    assert power_w < 400 and speed >= 1 / 1.05 - 1e-9


def test_clocks_are_raised_to_keep_an_inference_job_within_its_latency_budget() -> None:
    # Inference's curve: only the clock-bound share of a decode step slows, so 5% allows a clock of
    # 1 / (1 + 0.05 / share) of the maximum (0.875 at the shipped share 0.35), not 1 / 1.05.
    rule = ClassCapping("clocks", clock_fraction=0.8, max_slowdown=0.05)
    decision = decide("inference", policy(inference=rule), A100, 1410)
    lowest = 1 / (1 + 0.05 / INFERENCE.clock_bound_share)
    assert decision.limit_w is None
    assert decision.clock_fraction == pytest.approx(lowest) and 0.8 < lowest < 1 / 1.05
    assert decision.locked_clock_mhz == round(1410 * lowest)
    assert decision.expected_slowdown == pytest.approx(0.05)
    assert "raised from 0.80" in decision.reason and "(inference curve)" in decision.reason
    loose = decide("inference", policy(inference=ClassCapping("clocks", clock_fraction=0.8, max_slowdown=0.3)),
                   A100, 1410)
    assert loose.locked_clock_mhz == 1128 and loose.clock_fraction == 0.8
    assert loose.expected_slowdown == pytest.approx(INFERENCE.clock_bound_share * 0.25)  # not 25%: memory-bound


def test_a_cap_that_never_binds_switches_to_locked_clocks() -> None:
    rule = ClassCapping("efficiency", max_slowdown=0.05)
    decision = decide("training", policy(training=rule), A100, 1980, cap_not_binding=True)
    assert decision.limit_w is None and decision.locked_clock_mhz == round(1980 / 1.05)
    assert "did not bind" in decision.reason
    assert not cap_binds([137.0, 220.0, 300.0], 500.0, sw_power_cap_seen=False)
    assert cap_binds([137.0, 480.0], 500.0, sw_power_cap_seen=False)
    assert cap_binds([137.0], 500.0, sw_power_cap_seen=True)


def test_off_idle_and_disabled() -> None:
    assert decide("interactive", policy(interactive=ClassCapping("off")), A100, 1410).limit_w is None
    assert decide(None, policy(), A100, 1410).limit_w == 100
    assert decide("training", CappingPolicy(enabled=False), A100, 1410).limit_w is None


@given(st.floats(min_value=-1e4, max_value=1e5, allow_nan=False))
def test_fixed_limits_never_leave_the_constraints(limit_w: float) -> None:
    decision = decide("batch", policy(batch=ClassCapping("fixed", limit_w=limit_w)), A100, 1410)
    assert decision.limit_w is not None and 100 <= decision.limit_w <= 400
    if not 100 <= limit_w <= 400:
        assert "clamped" in decision.reason


def test_capping_is_relaxed_while_jobs_wait_for_capacity() -> None:
    from greengpu.capping.cap_decision import LimitConstraints, decide
    from greengpu.policy import CappingPolicy, ClassCapping

    constraints = LimitConstraints(min_w=125.0, max_w=250.0, default_w=250.0)
    rules = {"training": ClassCapping(mode="efficiency", max_slowdown=0.05), "interactive": ClassCapping(mode="off")}
    relaxing = CappingPolicy(enabled=True, classes=rules, relax_when_queued=True)
    assert decide("training", relaxing, constraints, 1000).limit_w is not None
    relaxed = decide("training", relaxing, constraints, 1000, capacity_short=True)
    assert relaxed.limit_w is None and relaxed.locked_clock_mhz is None and "wait for capacity" in relaxed.reason
    steady = CappingPolicy(enabled=True, classes=rules, relax_when_queued=False)
    assert decide("training", steady, constraints, 1000, capacity_short=True).limit_w is not None
    assert decide(None, relaxing, constraints, 1000, capacity_short=True).reason.startswith("idle GPU")


def test_counting_the_host_share_never_picks_a_lower_limit() -> None:
    from greengpu.capping.cap_decision import LimitConstraints, decide
    from greengpu.policy import CappingPolicy, ClassCapping

    constraints = LimitConstraints(min_w=100.0, max_w=400.0, default_w=400.0)
    policy = CappingPolicy(enabled=True, classes={"training": ClassCapping(mode="efficiency", max_slowdown=0.5)})
    picks = [decide("training", policy, constraints, 1000, host_share_w=share).limit_w or 400.0
             for share in (0.0, 50.0, 200.0, 2000.0)]
    assert picks == sorted(picks)  # more host power riding on run time: a higher (or equal) limit
    assert picks[-1] == 400.0  # a huge host share makes any slowdown cost more than it saves


def test_a_pick_at_the_default_limit_is_no_cap_at_all() -> None:
    from greengpu.capping.cap_decision import ProfilePoint

    # A measured profile where every lower limit costs more energy per unit of work: the least-energy
    # point is the default limit itself, so the GPU is left alone (no limit written, nothing to restore).
    profile = [ProfilePoint(400.0, 1.0, 300.0), ProfilePoint(350.0, 0.80, 290.0), ProfilePoint(300.0, 0.60, 280.0)]
    rule = ClassCapping("efficiency", max_slowdown=0.5)
    decision = decide("training", policy(training=rule), A100, 1410, profile=profile)
    assert decision == CapDecision(None, None, "class training: no limit saves energy within 50% (measured profile)",
                                   job_class="training")
    # Within a 0% budget only the default limit is allowed: the model's pick is the default, so no cap either.
    strict = decide("training", policy(training=ClassCapping("efficiency", max_slowdown=0.0)), A100, 1410)
    assert strict.limit_w is None and strict.locked_clock_mhz is None and strict.expected_slowdown == 0.0


def test_a_pick_one_watt_under_the_default_is_a_cap() -> None:
    from greengpu.capping.cap_decision import ProfilePoint

    profile = [ProfilePoint(400.0, 1.0, 300.0), ProfilePoint(399.0, 1.0, 299.0)]
    decision = decide("training", policy(training=ClassCapping("efficiency", max_slowdown=0.0)), A100, 1410,
                      profile=profile)
    assert decision.limit_w == 399.0 and decision.expected_slowdown == 0.0
    assert decision.reason == "class training: 399 W, least energy within 0% slowdown (measured profile)"


def test_a_cap_binds_from_exactly_95_percent_of_the_limit() -> None:
    assert cap_binds([475.0], 500.0, sw_power_cap_seen=False)  # NVML averages power: 95% is binding
    assert not cap_binds([474.9], 500.0, sw_power_cap_seen=False)
    assert not cap_binds([], 500.0, sw_power_cap_seen=False)


def test_a_locked_clock_is_never_zero() -> None:
    # An unknown maximum clock reads as 0; NVML refuses a 0 MHz lock, so the pick is at least 1 MHz.
    rule = ClassCapping("clocks", clock_fraction=0.8, max_slowdown=0.5)
    assert decide("inference", policy(inference=rule), A100, 0).locked_clock_mhz == 1


def test_locked_clocks_run_at_the_compute_bound_speed_with_power_scaling_as_its_square() -> None:
    from greengpu.capping.cap_decision import CapDecision

    gpu = node_type(8)  # 50 W idle, 400 W at full load
    # Made without a clock fraction (elsewhere): taken at the compute-bound clock of its slowdown.
    locked = CapDecision(None, 1128, "test", expected_slowdown=0.25)  # speed 1 / 1.25 = 0.8
    power_w, speed = busy_effect(locked, gpu)
    assert speed == pytest.approx(0.8)
    assert power_w == pytest.approx(50 + 350 * 0.64)  # 274 W
    # A limit and a clock: the lower power holds (the limit's 0.498 x 400 W, under the clock's 274 W).
    assert busy_effect(CapDecision(200.0, 1128, "test", expected_slowdown=0.25), gpu)[0] == pytest.approx(199.2)
    assert busy_effect(CapDecision(None, None, "none"), gpu) == (400.0, 1.0)
    # The same clock for training and inference: the same power, but inference slows by its share only.
    training = busy_effect(CapDecision(None, 1128, "t", 0.25, job_class="training", clock_fraction=0.8), gpu)
    inference = busy_effect(CapDecision(None, 1128, "i", 0.0875, job_class="inference", clock_fraction=0.8), gpu)
    assert training == (pytest.approx(274.0), pytest.approx(0.8))
    assert inference == (pytest.approx(274.0), pytest.approx(1 / (1 + INFERENCE.clock_bound_share * 0.25)))


STEADY = CappingPolicy(enabled=True, classes={"off": ClassCapping("off"), "fixed": ClassCapping("fixed", limit_w=250),
                                              "low": ClassCapping("fixed", limit_w=50), "dflt": ClassCapping("fixed"),
                                              "tight": ClassCapping("efficiency", max_slowdown=0.05),
                                              "clk": ClassCapping("clocks", clock_fraction=0.9, max_slowdown=0.2)},
                       idle_to_min_limit=True, relax_when_queued=True)


def FIXED_SLOWDOWN(limit_w: float) -> float:  # noqa: N802 - a table's column
    """The compute-bound (training) curve's slowdown at `limit_w` of the A100's 400 W."""
    return TRAINING_CURVE.at(limit_w / 400.0)[0] - 1.0


@pytest.mark.parametrize(("job_class", "kwargs", "expected"), [
    ("off", {}, CapDecision(None, None, "class off: capping off")),
    ("nobody", {}, CapDecision(None, None, "class nobody: capping off")),  # a class without a rule: off
    # a fixed limit carries the model's slowdown there (the occupancy rule prices it: greengpu/capping/occupancy.py)
    ("fixed", {}, CapDecision(250, None, "class fixed: fixed 250 W", pytest.approx(FIXED_SLOWDOWN(250)),
                              job_class="fixed")),
    ("low", {}, CapDecision(100, None, "class low: fixed 100 W (asked 50 W, clamped to 100-400 W)",
                            pytest.approx(FIXED_SLOWDOWN(100)), job_class="low")),
    ("dflt", {}, CapDecision(400, None, "class dflt: fixed 400 W", job_class="dflt")),  # no limit: the default
    # 1410 MHz x 0.9 = 1269 MHz; a class the model does not know is compute-bound (the training curve):
    # slowdown 1 / 0.9 - 1 = 11.1%, inside the 20% budget.
    ("clk", {}, CapDecision(None, 1269, "class clk: SM clocks locked at 0.90 of max (training curve)",
                            pytest.approx(1 / 0.9 - 1), job_class="clk", clock_fraction=0.9)),
    # A cap that never bound: clocks at 1 / 1.05 of the maximum, 1410 / 1.05 = 1342.9 -> 1343 MHz.
    ("tight", {"cap_not_binding": True},
     CapDecision(None, 1343, "class tight: the power cap did not bind; SM clocks locked at 0.95 of max "
                 "(training curve)", pytest.approx(0.05), job_class="tight", clock_fraction=pytest.approx(1 / 1.05))),
    ("fixed", {"capacity_short": True},
     CapDecision(None, None, "class fixed: jobs wait for capacity, so this one runs uncapped "
                             "(a slower job would lengthen the queue)")),
    ("off", {"capacity_short": True}, CapDecision(None, None, "class off: capping off")),
    (None, {}, CapDecision(100, None, "idle GPU at its minimum limit")),
])
def test_each_mode_decides_and_says_why(job_class: str | None, kwargs: dict, expected: CapDecision) -> None:
    assert decide(job_class, STEADY, A100, 1410, **kwargs) == expected


def test_disabled_and_idle_without_minimum_say_so() -> None:
    assert decide("fixed", CappingPolicy(enabled=False), A100, 1410) == CapDecision(None, None, "capping disabled")
    assert decide(None, CappingPolicy(enabled=True), A100, 1410) == \
        CapDecision(None, None, "idle GPU, left at its default limit")


def test_the_model_profile_runs_from_the_default_down_to_the_minimum_in_watt_steps() -> None:
    from greengpu.capping.cap_decision import model_profile

    points = model_profile(A100)
    assert [p.limit_w for p in points] == [400.0 - w for w in range(301)]  # 400 W down to 100 W inclusive
    assert (points[0].throughput, points[0].power_w) == (1.0, 400.0)  # at the default: the reference
    coarse = model_profile(LimitConstraints(min_w=100, max_w=400, default_w=400), step_w=25.0)
    assert [p.limit_w for p in coarse][-2:] == [125.0, 100.0]


def test_pick_limit_counts_the_host_only_when_given_and_refuses_an_empty_profile() -> None:
    from greengpu.capping.cap_decision import ProfilePoint, pick_limit

    points = [ProfilePoint(400.0, 1.0, 300.0), ProfilePoint(300.0, 0.5, 149.9)]
    best, slowdown = pick_limit(points, max_slowdown=1.0)  # GPU energy alone: 299.8 < 300 per unit of work
    assert best.limit_w == 300.0 and slowdown == 1.0
    assert pick_limit(points, max_slowdown=1.0, host_share_w=1.0)[0].limit_w == 400.0  # 301 < 301.8
    with pytest.raises(ValueError, match="^an empty profile$"):
        pick_limit([], max_slowdown=0.1)
    profile = [ProfilePoint(400.0, 1.0, 300.0), ProfilePoint(300.0, 0.5, 149.9)]
    assert decide("tight", replace(STEADY, classes={"tight": ClassCapping("efficiency", max_slowdown=1.0)}),
                  A100, 1410, profile=profile).limit_w == 300.0  # decide's host share defaults to none too


def test_an_unknown_mode_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="^unknown capping mode 'turbo'$"):
        decide("x", CappingPolicy(enabled=True, classes={"x": ClassCapping("turbo")}), A100, 1410)
