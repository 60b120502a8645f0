"""The wait-or-rent rule and the come-back move (greengpu/spot/wait_or_rent.py), on hand-built facts."""

from __future__ import annotations

import pytest

from greengpu.config.policy import build_policy
from greengpu.config.yamlsource import load_yaml_text
from greengpu.errors import ConfigError
from greengpu.policy import ON_DEMAND_VALUE, ClassWaiting, SpotPolicy
from greengpu.spot.wait_or_rent import ComeBackFacts, WaitOrRentFacts, comes_back, waits_on_premises

HOUR = 3600.0
OD = 4.0
"""On-demand price per GPU-hour in these facts."""
WAITING = SpotPolicy().waiting


def facts(start_in_s: float | None, remaining_s: float = 30 * HOUR, job_class: str = "training",
          cloud_start_in_s: float = 180.0, checkpoint_s: float | None = None,
          deadline_s: float | None = None) -> WaitOrRentFacts:
    cost = OD * 8 * remaining_s / HOUR  # on-demand for the whole run
    return WaitOrRentFacts(job_class, 8, remaining_s, start_in_s, cloud_start_in_s, cost, OD, deadline_s, 600.0,
                           checkpoint_s)


def test_never_rents_while_on_premises_starts_it_no_later_than_a_cloud_node() -> None:
    # A sleeping node that boots in 120 s beats a cloud node's 180 s start-up, for every class.
    for job_class in ("training", "inference", "interactive"):
        assert waits_on_premises(facts(120.0, job_class=job_class), WAITING)
        assert waits_on_premises(facts(180.0, job_class=job_class), WAITING)


def test_without_a_prediction_it_rents_as_before() -> None:
    assert not waits_on_premises(facts(None), WAITING)


def test_a_long_job_without_checkpoints_waits_when_its_bill_exceeds_the_wait() -> None:
    # 30 h in the cloud against a 2 h wait, both at the on-demand price: waiting is cheaper.
    assert waits_on_premises(facts(2 * HOUR), WAITING)
    # A 1 h job predicted to start in 2 h: renting it costs less than the wait is worth.
    assert not waits_on_premises(facts(2 * HOUR, remaining_s=HOUR), WAITING)


def test_inference_never_waits_for_money_only_within_its_tolerance() -> None:
    assert not waits_on_premises(facts(2 * HOUR, job_class="inference"), WAITING)
    tolerant = {"inference": ClassWaiting(tolerance_s=600.0)}
    assert waits_on_premises(facts(700.0, job_class="inference"), tolerant)  # 520 s beyond the cloud's start
    assert not waits_on_premises(facts(900.0, job_class="inference"), tolerant)


def test_a_job_that_comes_back_at_a_checkpoint_rents_rather_than_waits() -> None:
    assert not waits_on_premises(facts(2 * HOUR, checkpoint_s=1800.0), WAITING)


def test_a_deadline_job_waits_only_while_the_predicted_start_leaves_its_run_and_a_restart() -> None:
    assert waits_on_premises(facts(2 * HOUR, deadline_s=40 * HOUR), WAITING)
    assert not waits_on_premises(facts(2 * HOUR, deadline_s=32 * HOUR), WAITING)  # 2 + 30 h + restart > 32 h


def come_back(fits: bool = True, remaining_s: float = 5 * HOUR, price: float = 1.0,
              deadline_s: float | None = None) -> bool:
    return comes_back(ComeBackFacts("training", 8, remaining_s, price, fits, 600.0, OD, deadline_s), WAITING)


def test_comes_back_when_room_is_free_and_the_rent_saved_exceeds_the_restart() -> None:
    assert come_back()
    assert not come_back(fits=False)
    # Spot at a quarter of on-demand: 30 minutes left save 2 GPU-h-equivalents, the 10-minute restart is worth
    # 8 x 4 x 1/6 = 5.3: it stays. Five hours left save far more: it comes back.
    assert not come_back(remaining_s=1800.0)
    assert not come_back(deadline_s=5 * HOUR)  # the restart would miss the deadline


def test_policy_keys_default_validate_and_fail_in_one_line() -> None:
    spot = build_policy(load_yaml_text("spot: {}\n", "p.yaml"), "p").spot
    assert spot.max_expected_lost_fraction == 0.1 and spot.come_back
    assert spot.waiting["training"].value_per_gpu_hour == ON_DEMAND_VALUE and "inference" not in spot.waiting
    text = "spot:\n  waiting:\n    batch: {tolerance_s: 900, value_per_gpu_hour: 2.5}\n"
    spot = build_policy(load_yaml_text(text, "p.yaml"), "p").spot
    assert spot.waiting == {"batch": ClassWaiting(900.0, 2.5)}
    for bad in ("spot: {max_expected_lost_fraction: 1.5}\n", "spot: {waiting: {training: {value_per_gpu_hour: x}}}\n",
                "spot: {waiting: {gaming: {tolerance_s: 1}}}\n", "spot: {waiting: {training: {tolerance_s: -1}}}\n"):
        with pytest.raises(ConfigError) as error:
            build_policy(load_yaml_text(bad, "p.yaml"), "p")
        assert "\n" not in str(error.value) and "p.yaml" in str(error.value)


def test_slack_runs_out_when_the_predicted_start_leaves_no_run_and_restart() -> None:
    from greengpu.spot.wait_or_rent import slack_runs_out

    assert not slack_runs_out(HOUR, None, 600.0, 10 * HOUR)  # no deadline: never urgent
    assert not slack_runs_out(HOUR, 3 * HOUR, 600.0, HOUR)  # 1 h + 1 h + 10 min fit in 3 h
    assert slack_runs_out(HOUR, 3 * HOUR, 600.0, 2 * HOUR)
    assert not slack_runs_out(HOUR, 3 * HOUR, 600.0, None)  # unknown start: taken as now
    assert slack_runs_out(HOUR, HOUR + 300.0, 600.0, None)
