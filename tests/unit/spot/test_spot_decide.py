"""The spot lever's pure decisions (greengpu.spot.decide): cost rule, classes, Uniform Progress."""

from __future__ import annotations

import math

import pytest

from greengpu.policy import SpotPolicy
from greengpu.spot.decide import (
    PoolPrice,
    SpotJobFacts,
    ahead_of_uniform_progress,
    capacity_for,
    cloud_capacity_for,
    expected_spot_run_s,
    leaves_spot,
    prefer_waking,
    spot_cost,
)

SPOT = PoolPrice(price_per_gpu_hour=0.9, interruptions_per_hour=0.1, notice_s=120.0)
ON_DEMAND = PoolPrice(price_per_gpu_hour=3.06)
POLICY = SpotPolicy(enabled=True, require_checkpointing=False)


def facts(**changes: object) -> SpotJobFacts:
    values: dict[str, object] = dict(job_class="training", interruptible=True, checkpoint_interval_s=1800.0,
                                     checkpoint_cost_s=60.0, remaining_s=4 * 3600.0, deadline_remaining_s=None,
                                     gpus=8.0)
    values.update(changes)
    return SpotJobFacts(**values)  # type: ignore[arg-type]


def test_checkpointing_training_goes_to_spot() -> None:
    assert cloud_capacity_for(facts(), SPOT, ON_DEMAND, POLICY) == "spot"


def test_long_job_without_checkpoints_stays_on_demand_when_rework_makes_spot_dearer() -> None:
    short = facts(checkpoint_interval_s=None, remaining_s=3600.0)
    long = facts(checkpoint_interval_s=None, remaining_s=30 * 3600.0)
    # One hour without checkpoints: about 5% expected rework, far cheaper on spot.
    assert cloud_capacity_for(short, SPOT, ON_DEMAND, POLICY) == "spot"
    # Thirty hours at 0.1 interruptions an hour: e^3 - 1 = 19 times the work expected, dearer than on-demand.
    assert expected_spot_run_s(long, SPOT) == pytest.approx(math.expm1(3.0) / (0.1 / 3600))
    assert spot_cost(long, SPOT) > ON_DEMAND.price_per_gpu_hour * 8 * 30
    assert cloud_capacity_for(long, SPOT, ON_DEMAND, POLICY) == "on-demand"
    # The same long job that checkpoints within the notice redoes nothing: spot again.
    assert cloud_capacity_for(facts(remaining_s=30 * 3600.0), SPOT, ON_DEMAND, POLICY) == "spot"


def test_checkpoint_too_slow_for_the_notice_loses_work_since_the_last_one() -> None:
    slow = facts(checkpoint_cost_s=300.0, remaining_s=7200.0, checkpoint_interval_s=3600.0)
    rate = 0.1 / 3600
    overhead = 2 * 300.0
    assert expected_spot_run_s(slow, SPOT) == pytest.approx(2 * math.expm1(rate * 3600) / rate + overhead)
    quick = facts(checkpoint_cost_s=60.0, remaining_s=7200.0, checkpoint_interval_s=3600.0)
    assert expected_spot_run_s(quick, SPOT) < expected_spot_run_s(slow, SPOT)


@pytest.mark.parametrize("job_class", ["inference", "interactive"])
def test_inference_and_interactive_never_on_spot(job_class: str) -> None:
    policy = SpotPolicy(enabled=True, classes=("training", "batch", "inference", "interactive"),
                        require_checkpointing=False)
    job = facts(job_class=job_class)
    assert cloud_capacity_for(job, SPOT, ON_DEMAND, policy) == "on-demand"
    assert cloud_capacity_for(job, SPOT, None, policy) is None  # no on-demand pool: it waits on-premises


def test_non_interruptible_and_unlisted_classes_and_disabled_policy_stay_off_spot() -> None:
    assert cloud_capacity_for(facts(interruptible=False), SPOT, ON_DEMAND, POLICY) == "on-demand"
    assert cloud_capacity_for(facts(job_class="batch"), SPOT, ON_DEMAND,
                              SpotPolicy(enabled=True, classes=("training",))) == "on-demand"
    assert cloud_capacity_for(facts(), SPOT, ON_DEMAND, SpotPolicy(enabled=False)) == "on-demand"
    never_checkpoints = facts(checkpoint_interval_s=None, remaining_s=600.0)
    assert cloud_capacity_for(never_checkpoints, SPOT, ON_DEMAND, SpotPolicy(enabled=True)) == "on-demand"
    assert cloud_capacity_for(never_checkpoints, SPOT, ON_DEMAND, POLICY) == "spot"


def test_no_pools_means_no_cloud_and_on_premises_comes_first() -> None:
    assert cloud_capacity_for(facts(), None, None, POLICY) is None
    assert cloud_capacity_for(facts(), SPOT, None, POLICY) == "spot"
    assert capacity_for(facts(), on_premises_free=True, spot=SPOT, on_demand=ON_DEMAND, policy=POLICY) == "on-premises"
    assert capacity_for(facts(), on_premises_free=False, spot=SPOT, on_demand=ON_DEMAND, policy=POLICY) == "spot"
    assert prefer_waking(boot_cost=0.05, cloud_cost=12.0)
    assert not prefer_waking(boot_cost=20.0, cloud_cost=12.0)


def test_spot_dearer_than_on_demand_loses_even_without_interruptions() -> None:
    dear = PoolPrice(price_per_gpu_hour=3.5, interruptions_per_hour=0.0)
    assert cloud_capacity_for(facts(), dear, ON_DEMAND, POLICY) == "on-demand"


def test_deadline_job_on_pace_with_slack_stays_on_spot() -> None:
    job = facts(remaining_s=4 * 3600.0, deadline_remaining_s=12 * 3600.0, work_s=4 * 3600.0, deadline_s=12 * 3600.0)
    assert ahead_of_uniform_progress(job)
    assert cloud_capacity_for(job, SPOT, ON_DEMAND, POLICY) == "spot"


def test_deadline_job_behind_uniform_progress_moves_to_on_demand() -> None:
    # Half the time is gone and only a quarter of the work is done: behind the uniform rate, though the
    # slack (6 h left for 3 h of work) would still survive an interruption.
    behind = facts(remaining_s=3 * 3600.0, deadline_remaining_s=6 * 3600.0, work_s=4 * 3600.0,
                   deadline_s=12 * 3600.0)
    assert not ahead_of_uniform_progress(behind)
    assert cloud_capacity_for(behind, SPOT, ON_DEMAND, POLICY) == "on-demand"


def test_deadline_job_without_slack_for_one_more_interruption_moves_to_on_demand() -> None:
    tight = facts(remaining_s=4 * 3600.0, deadline_remaining_s=4 * 3600.0 + 500.0)  # on pace, but 500 s < restart
    assert ahead_of_uniform_progress(tight)
    assert cloud_capacity_for(tight, SPOT, ON_DEMAND, POLICY) == "on-demand"
    passed = facts(deadline_remaining_s=-1.0)
    assert cloud_capacity_for(passed, SPOT, ON_DEMAND, POLICY) == "on-demand"


def test_a_running_deadline_job_leaves_spot_at_a_checkpoint_only_when_rule_4_would_not_place_it_there() -> None:
    ahead = facts(remaining_s=2 * 3600.0, deadline_remaining_s=8 * 3600.0, work_s=4 * 3600.0, deadline_s=12 * 3600.0)
    behind = facts(remaining_s=3 * 3600.0, deadline_remaining_s=6 * 3600.0, work_s=4 * 3600.0, deadline_s=12 * 3600.0)
    tight = facts(remaining_s=2 * 3600.0, deadline_remaining_s=2 * 3600.0 + 500.0)
    assert not leaves_spot(ahead, SPOT, POLICY)
    assert leaves_spot(behind, SPOT, POLICY) and leaves_spot(tight, SPOT, POLICY)
    assert not leaves_spot(facts(deadline_remaining_s=None), SPOT, POLICY)  # no deadline: never moved early


def test_lost_work_bound_keeps_a_cheap_job_that_would_redo_much_of_its_run_off_spot() -> None:
    from dataclasses import replace

    from greengpu.spot.decide import expected_lost_fraction

    # Without checkpoints at 0.1 interruptions per hour: 1 h redoes about 5% of its spot time, 3 h about 14%.
    one_hour, three_hours = facts(checkpoint_interval_s=None, remaining_s=3600.0), facts(
        checkpoint_interval_s=None, remaining_s=3 * 3600.0)
    assert 0.04 < expected_lost_fraction(one_hour, SPOT) < 0.06
    assert 0.13 < expected_lost_fraction(three_hours, SPOT) < 0.15
    assert expected_lost_fraction(facts(), SPOT) < 0.01  # checkpoints within the notice: one checkpoint each
    assert spot_cost(three_hours, SPOT) < 3 * 8 * ON_DEMAND.price_per_gpu_hour  # still far cheaper on spot ...
    assert cloud_capacity_for(one_hour, SPOT, ON_DEMAND, POLICY) == "spot"
    assert cloud_capacity_for(three_hours, SPOT, ON_DEMAND, POLICY) == "on-demand"  # ... but redoes too much
    lenient = replace(POLICY, max_expected_lost_fraction=0.2)
    assert cloud_capacity_for(three_hours, SPOT, ON_DEMAND, lenient) == "spot"
