"""The forecast gate at its edges: the sign test's first step, a significance level met exactly, the
median interval's ranks on many origins and at a level its binomial reaches exactly, ratios against a
perfect baseline, what counts as a tie, and which evidence and candidate the verdict reports."""

from __future__ import annotations

import math
import warnings
from dataclasses import replace

import numpy as np
import pytest
from test_forecast_gate import backtest_of

from greengpu.forecast.gate import (
    Evidence,
    against_every_baseline,
    choose,
    evidence,
    gate_summary,
    median_interval,
    per_origin_ratios,
    sign_test_p,
    wins_needed,
)


def test_one_win_in_one_toss_is_a_coin_flip() -> None:
    assert sign_test_p(1, 0) == 0.5
    assert sign_test_p(1, 2) == pytest.approx(7 / 8)  # 1 - P(no win in 3)


def test_a_tail_exactly_at_alpha_is_accepted() -> None:
    # p <= alpha, not p < alpha: 5 wins of 5 is p = 1/32, exactly the level asked.
    assert wins_needed(5, alpha=1 / 32) == 5
    assert wins_needed(6, alpha=7 / 64) == 5  # P(X >= 5 of 6) = (6 + 1) / 64


def test_the_median_interval_on_no_values_and_on_one() -> None:
    low, high = median_interval([])
    assert math.isnan(low) and math.isnan(high)
    assert median_interval([4.0]) == (4.0, 4.0)


def test_the_median_interval_on_thirty_values_takes_the_eleventh() -> None:
    # n = 30 at 90%: P(X <= 10) = 0.0494 <= 0.05 < P(X <= 11) = 0.100, so the 11th smallest and 11th largest.
    assert median_interval([float(v) for v in range(30, 0, -1)]) == (11.0, 20.0)


def test_the_median_interval_keeps_a_rank_whose_coverage_meets_the_level_exactly() -> None:
    # n = 6: the 2nd smallest to the 2nd largest covers the median with 1 - 2 x P(X <= 1) = 1 - 14/64 = 0.78125.
    assert median_interval([6.0, 5.0, 4.0, 3.0, 2.0, 1.0], level=0.78125) == (2.0, 5.0)
    assert median_interval([6.0, 5.0, 4.0, 3.0, 2.0, 1.0], level=0.79) == (1.0, 6.0)


def test_ratios_against_a_perfect_baseline() -> None:
    ratios = per_origin_ratios([0.0, 0.5, 3.0, 1.0], [0.0, 0.0, 0.0, 4.0])
    # Both perfect: a tie at 1. A perfect baseline against any error: infinitely worse.
    assert list(ratios) == [1.0, math.inf, math.inf, 0.25]
    assert ratios.dtype == np.float64


def test_ratios_of_infinite_errors_warn_nothing() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ratios = per_origin_ratios([math.inf, 1.0], [math.inf, 2.0])
    assert math.isnan(ratios[0]) and ratios[1] == 0.5


def test_a_tie_is_a_relative_difference_of_a_billionth_or_an_absolute_one_of_a_trillionth() -> None:
    # 1e-6 apart in 1: a real difference (one win), though numpy's default tolerance would call it a tie.
    found = evidence("cand", [1.0, 2.0], "naive", [1.000001, 2.0 + 1e-10])
    assert (found.wins, found.losses, found.ties) == (1, 0, 1)
    # Near zero the absolute tolerance decides: 1e-10 against 0 is a loss, 1e-13 against 0 a tie.
    found = evidence("cand", [1e-10, 1e-13], "naive", [0.0, 0.0])
    assert (found.wins, found.losses, found.ties) == (0, 1, 1)


def test_evidence_on_no_origins_is_empty_and_quiet() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        found = evidence("cand", [], "naive", [])
    assert (found.wins, found.losses, found.ties, found.origins) == (0, 0, 0, 0)
    assert math.isnan(found.median_ratio) and found.p_value == 1.0 and not found.passes


def test_between_equal_median_ratios_the_worse_evidence_is_the_weaker_sign_test() -> None:
    candidate = [1.0] * 5
    # Against both the median ratio is 0.5; against `close` it wins 3 of 5 (p = 1/2), against `clear` 4 of 5
    # (p = 6/32). The evidence reported is the baseline it does worst against: `close`.
    close = [2.0, 2.0, 2.0, 0.5, 0.5]
    clear = [2.0, 2.0, 2.0, 2.0, 0.5]
    for order in ([("clear", clear), ("close", close)], [("close", close), ("clear", clear)]):
        worst = against_every_baseline("cand", candidate, order)
        assert worst.baseline == "close" and worst.p_value == 0.5


def test_a_passing_candidate_ships_over_one_with_a_lower_median_that_fails() -> None:
    naive, seasonal, drift = [1.0] * 10, [2.0] * 10, [1.0] * 10
    steady = [0.8] * 10  # 0.8 on every origin: 10 wins of 10
    spiky = [0.5] * 6 + [1.5] * 4  # median 0.5, but 6 of 10 is no evidence (p = 0.377)
    choice = choose(backtest_of({"naive": naive, "seasonal_naive": seasonal, "drift": drift,
                                 "steady": steady, "spiky": spiky}))
    assert choice.shipped_candidate is True and choice.model == "steady"


def test_between_equal_median_ratios_the_candidate_with_more_wins_ships() -> None:
    naive, seasonal, drift = [1.0] * 12, [2.0] * 12, [1.0] * 12
    eleven = [0.5] * 11 + [2.0]
    twelve = [0.5] * 12
    for first, second in (("eleven", "twelve"), ("twelve", "eleven")):
        per_origin = {"naive": naive, "seasonal_naive": seasonal, "drift": drift}
        per_origin.update({first: eleven if first == "eleven" else twelve,
                           second: eleven if second == "eleven" else twelve})
        assert choose(backtest_of(per_origin)).model == "twelve"
    # The same when neither passes: the report names the one with more wins.
    few = {"naive": [1.0] * 4, "seasonal_naive": [2.0] * 4, "drift": [1.0] * 4}
    for three_first in (True, False):
        per_origin = dict(few)
        candidates = [("three", [0.5, 0.5, 0.5, 2.0]), ("four", [0.5] * 4)]
        per_origin.update(candidates if three_first else candidates[::-1])
        choice = choose(backtest_of(per_origin))
        assert choice.evidence is not None and choice.evidence.model == "four" and choice.wins == 4


def test_when_a_baseline_ships_over_a_failing_candidate_the_choice_names_it_whole() -> None:
    per_origin = {"naive": [1.0] * 7, "seasonal_naive": [2.0] * 7, "drift": [1.0] * 7, "cand": [1.5] * 7}
    choice = choose(backtest_of(per_origin))
    assert choice.model == "naive" and choice.baseline == "naive"
    assert choice.origins == 7 and choice.shipped_candidate is False and choice.wins == 0


def test_the_summary_of_evidence_with_no_origins_has_no_win_share() -> None:
    empty = Evidence("cand", "naive", math.nan, (math.nan, math.nan), 0, 0, 0, 1.0, None)
    choice = choose(backtest_of({"naive": [1.0], "seasonal_naive": [1.0], "drift": [1.0]}))
    summary = gate_summary(replace(choice, evidence=empty))
    assert summary is not None
    assert (summary["wins"], summary["losses"], summary["ties"]) == (0, 0, 0)
    assert summary["win_share"] is None and summary["median_ratio"] is None
