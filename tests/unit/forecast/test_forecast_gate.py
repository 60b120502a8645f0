"""The forecast gate decides on evidence over many origins: one outlier day cannot turn the verdict, a
candidate must beat every baseline by a median ratio and a sign test, naive and drift do not trade
places on noise, and the backtest's origins, kept parameters and ensemble do what the docs say."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from greengpu.cli import main
from greengpu.forecast.backtest import (
    MAX_ORIGINS,
    Backtest,
    ModelBacktest,
    origin_positions,
    refit_schedule,
    run_backtest,
    task_chunks,
)
from greengpu.forecast.gate import choose, gate_summary, median_interval, sign_test_p, wins_needed
from greengpu.forecast.models import BASELINES, ModelSpec, ensemble
from greengpu.forecast.plan import make_plan
from greengpu.forecast.plan_types import PlanSettings


def hour_of_day_mean(history: pd.Series, horizon: int) -> np.ndarray:
    """A cheap candidate that knows the daily shape: each hour's mean over the last seven days."""
    values = history.to_numpy(dtype=float)
    days = min(7, len(values) // 24)
    profile = values[len(values) - days * 24:].reshape(days, 24).mean(axis=0)
    return np.array([profile[i % 24] for i in range(horizon)])


PROFILE = ModelSpec("hour_of_day_mean", "candidate", hour_of_day_mean)


def daily_shape(days: int = 36, seed: int = 0) -> pd.Series:
    rng = np.random.default_rng(seed)
    t = np.arange(days * 24)
    values = 200 + 20 * np.sin(2 * np.pi * t / 24) + rng.normal(0, 12, len(t))
    return pd.Series(values, index=pd.date_range("2026-03-02", periods=len(t), freq="h"))


def mean_mase_verdict(backtest: Backtest, candidate: str) -> bool:
    """The old gate, for contrast: mean MASE <= 0.95 x the best baseline's by mean, winning half the origins."""
    bases = [m for m in backtest.models.values() if m.kind == "baseline"]
    best = min(bases, key=lambda m: m.mase)
    model = backtest.models[candidate]
    wins = sum(c < b for c, b in zip(model.per_origin_mase, best.per_origin_mase, strict=True))
    return model.mase <= 0.95 * best.mase and 2 * wins >= len(backtest.origins)


def test_an_outlier_last_day_does_not_turn_the_verdict() -> None:
    steady = daily_shape()
    # The last day is an outlier: demand triples an hour before the final origin and stays there, which
    # naive follows and a model of the daily shape cannot.
    outlier = steady.copy()
    outlier.iloc[-25:] *= 3.0
    verdicts = []
    for series in (steady, outlier):
        backtest = run_backtest(series, min_train_h=14 * 24, models=BASELINES + (PROFILE,))
        assert len(backtest.origins) == 22  # every day from day 14 to day 35
        verdicts.append((choose(backtest), mean_mase_verdict(backtest, "hour_of_day_mean")))
    (steady_choice, steady_mean_gate), (outlier_choice, outlier_mean_gate) = verdicts
    # A gate on the mean MASE turns on that one day ...
    assert steady_mean_gate and not outlier_mean_gate
    # ... the median ratio and the sign test do not.
    assert steady_choice.model == outlier_choice.model == "hour_of_day_mean"
    assert steady_choice.shipped_candidate and outlier_choice.shipped_candidate
    assert outlier_choice.evidence is not None and outlier_choice.evidence.median_ratio < 0.85


def test_sign_test_and_wins_needed_match_the_binomial_by_hand() -> None:
    assert sign_test_p(5, 0) == pytest.approx(1 / 32)
    assert sign_test_p(9, 1) == pytest.approx(11 / 1024)  # (C(10,9) + C(10,10)) / 2^10
    assert sign_test_p(8, 2) == pytest.approx(56 / 1024)
    assert sign_test_p(0, 0) == 1.0
    assert sign_test_p(0, 3) == 1.0
    assert wins_needed(4) is None  # 4 of 4 is p = 1/16 > 0.05
    assert wins_needed(5) == 5
    assert wins_needed(10) == 9
    assert wins_needed(24) == 17  # P(X >= 17) = 0.032, P(X >= 16) = 0.076


def test_the_median_interval_takes_the_order_statistics_the_binomial_allows() -> None:
    # n = 10 at 90%: P(X <= 1) = 11/1024 <= 0.05 < P(X <= 2) = 56/1024, so the 2nd smallest and largest.
    assert median_interval([7, 1, 9, 3, 5, 2, 10, 4, 8, 6]) == (2.0, 9.0)
    # n = 24: P(X <= 7) = 0.032 <= 0.05 < P(X <= 8) = 0.076, so the 8th smallest and the 8th largest.
    assert median_interval(list(range(1, 25))) == (8.0, 17.0)
    assert median_interval([3.0, 1.0, 2.0]) == (1.0, 3.0)  # few values: the whole range


def backtest_of(per_origin: dict[str, list[float]]) -> Backtest:
    origins = len(next(iter(per_origin.values())))
    models = {name: ModelBacktest(name, "baseline" if name in {"naive", "seasonal_naive", "drift"} else "candidate",
                                  float(np.mean(values)), 0.0, tuple(values), np.zeros((origins, 24)), 0, 0.0)
              for name, values in per_origin.items()}
    return Backtest(tuple(range(origins)), 24, np.zeros((origins, 24)), models)


def test_a_candidate_must_beat_every_baseline() -> None:
    naive = [1.0] * 12
    seasonal = [0.7] * 12
    drift = [1.0] * 12
    beats_naive_only = [0.8] * 12  # 0.8 against naive, 1.14 against seasonal naive
    choice = choose(backtest_of({"naive": naive, "seasonal_naive": seasonal, "drift": drift,
                                 "cand": beats_naive_only}))
    assert not choice.shipped_candidate
    assert choice.model == "seasonal_naive"  # it beats naive on all 12 origins by 30%
    assert choice.evidence is not None and choice.evidence.baseline == "seasonal_naive"
    assert choice.evidence.median_ratio == pytest.approx(0.8 / 0.7)
    beats_all = [0.6] * 11 + [0.9]
    choice = choose(backtest_of({"naive": naive, "seasonal_naive": seasonal, "drift": drift, "cand": beats_all}))
    assert choice.shipped_candidate and choice.model == "cand" and choice.baseline == "seasonal_naive"
    assert choice.evidence is not None and choice.evidence.wins == 11 and choice.evidence.losses == 1
    # P(X >= 10 of 12) = 79/4096 <= 0.05 < P(X >= 9) = 299/4096
    assert "stop shipping if its median ratio rose above 0.95 or it won fewer than 10 of its 12" in choice.to_change


def test_a_clear_median_win_on_too_few_origins_does_not_ship_and_says_what_it_needs() -> None:
    choice = choose(backtest_of({"naive": [1.0] * 4, "seasonal_naive": [1.2] * 4, "drift": [1.0] * 4,
                                 "cand": [0.5] * 4}))
    assert not choice.shipped_candidate and choice.model == "naive"
    assert "cannot reach p <= 0.05" in choice.to_change


def test_naive_and_drift_do_not_trade_places_on_noise() -> None:
    rng = np.random.default_rng(5)
    naive = list(1.0 + rng.normal(0, 0.05, 30))
    # Drift is a hair better on most origins (0.99 x naive): not 5% better, so naive, the simpler, ships.
    drift = [v * 0.99 for v in naive]
    choice = choose(backtest_of({"naive": naive, "seasonal_naive": [2.0] * 30, "drift": drift}))
    assert choice.model == "naive"
    # Clearly better on almost every origin, it takes naive's place.
    drift = [v * (0.8 if i % 10 else 1.1) for i, v in enumerate(naive)]
    assert choose(backtest_of({"naive": naive, "seasonal_naive": [2.0] * 30, "drift": drift})).model == "drift"


def test_every_daily_origin_is_backtested_by_default_at_the_live_forecasts_hour() -> None:
    hours = 90 * 24 + 5  # ends at 05:00, like a history read at 05:00
    cuts = origin_positions(hours, 24, None, 14 * 24, spacing=24)
    # Every day from the first with two weeks of history before it to the last that leaves 24 hours to
    # test: hours 336 to 2,141, one a day back from the last, so (2,141 - 336) // 24 + 1 = 76 of them.
    assert len(cuts) == 76 and cuts[-1] == hours - 24 and cuts[0] >= 14 * 24 and cuts[0] - 24 < 14 * 24
    assert all((hours - c) % 24 == 0 for c in cuts)  # the same hour of the day as the live forecast's origin
    every_day = origin_positions(40 * 24, 24, None, 14 * 24, spacing=24)
    assert every_day == list(range(14 * 24, 39 * 24 + 1, 24))  # 26 days: all of them
    # --origins thins only when asked, evenly, keeping the first and the last.
    half = origin_positions(40 * 24, 24, 13, 14 * 24, spacing=24)
    assert half == [every_day[i] for i in (0, 2, 4, 6, 8, 10, 12, 15, 17, 19, 21, 23, 25)]
    twice = origin_positions(40 * 24, 24, 52, 14 * 24, spacing=24)
    assert len(twice) == 52 and twice[-1] == 39 * 24 and len(set(twice)) == 52  # finer than a day
    # Past half a year of days, the last MAX_ORIGINS (182) are backtested: the time budget.
    long = origin_positions(500 * 24, 24, None, 14 * 24, spacing=24)
    assert long == list(range(500 * 24 - 24 - (MAX_ORIGINS - 1) * 24, 500 * 24 - 24 + 1, 24))


class CountingFit:
    """A fitted model that forecasts its window's last value, and records each fit, refit and re-filter."""

    log: list[tuple[str, pd.Timestamp]] = []

    def __init__(self, history: pd.Series, kind: str = "fit") -> None:
        self.last = float(history.iloc[-1])
        CountingFit.log.append((kind, history.index[-1]))

    def forecast(self, horizon: int) -> np.ndarray:
        return np.full(horizon, self.last)

    def extend(self, history: pd.Series) -> CountingFit:
        return CountingFit(history, "extend")

    def refit(self, history: pd.Series) -> CountingFit:
        return CountingFit(history, "refit")


def test_kept_parameters_are_estimated_again_after_seven_days_and_see_no_future() -> None:
    CountingFit.log = []
    spec = ModelSpec("counting", "candidate", lambda h, n: CountingFit(h).forecast(n), fit=CountingFit)
    series = daily_shape(days=30)
    backtest = run_backtest(series, min_train_h=14 * 24, models=(BASELINES[0], spec))
    kinds = [kind for kind, _ in CountingFit.log]
    assert len(kinds) == len(backtest.origins) == 16
    # Daily origins: a cold fit at the first, the parameters estimated again (warm) 7 and 14 days later.
    assert [(i, kind) for i, kind in enumerate(kinds) if kind != "extend"] == [(0, "fit"), (7, "refit"),
                                                                            (14, "refit")]
    # Each origin's model saw the history up to the hour before its first forecast, and no further.
    for (_, seen), first_forecast in zip(CountingFit.log, backtest.origin_times, strict=True):
        assert seen == first_forecast - pd.Timedelta(hours=1)
    # Re-filtering with kept parameters forecasts what a fresh fit would for this model: naive's values.
    assert np.allclose(backtest.models["counting"].forecasts, backtest.models["naive"].forecasts)


def test_sarimax_keeps_its_parameters_for_days_not_origins(monkeypatch: pytest.MonkeyPatch) -> None:
    from greengpu.forecast.models import CANDIDATES, KeptFit

    calls: list[str] = []
    extend, refit = KeptFit.extend, KeptFit.refit
    monkeypatch.setattr(KeptFit, "extend", lambda self, h: (calls.append("extend"), extend(self, h))[1])
    monkeypatch.setattr(KeptFit, "refit", lambda self, h: (calls.append("refit"), refit(self, h))[1])
    sarimax = next(m for m in CANDIDATES if m.name == "sarimax")
    assert sarimax.fit is not None
    fit = sarimax.fit
    spec = ModelSpec("sarimax", "candidate", sarimax.forecast, fit=lambda h: (calls.append("fit"), fit(h))[1])
    # 42 days: 28 daily origins (days 14 to 41), thinned to 10, three days apart.
    backtest = run_backtest(daily_shape(days=42), min_train_h=14 * 24, origins=10, models=(BASELINES[0], spec))
    gaps = {(b - a).days for a, b in zip(backtest.origin_times, backtest.origin_times[1:], strict=False)}
    assert gaps == {3} and backtest.models["sarimax"].fallbacks == 0
    # Parameters at most 7 days old: estimated on days 0, 9, 18 and 27 of the origins, filtered in between
    # (kept for 7 origins they would have served 21 days).
    assert calls == ["fit", "extend", "extend", "refit", "extend", "extend", "refit", "extend", "extend", "refit"]
    assert refit_schedule(backtest.origin_times) == [c != "extend" for c in calls]


RAN_HERE: list[int] = []
"""Tasks run in this process: a forked worker appends to its own copy of the list."""


def counted_run_task(*args: object, **kwargs: object) -> object:
    from greengpu.forecast import backtest

    RAN_HERE.append(1)
    return backtest.__dict__["_unpatched_run_task"](*args, **kwargs)


def test_the_backtest_gives_the_same_figures_with_any_number_of_workers(monkeypatch: pytest.MonkeyPatch) -> None:
    from greengpu.forecast import backtest

    ran_here = RAN_HERE
    ran_here.clear()
    monkeypatch.setattr(backtest, "_unpatched_run_task", backtest._run_task, raising=False)
    monkeypatch.setattr(backtest, "_run_task", counted_run_task)  # a module function: the pool can name it
    spec = ModelSpec("counting", "candidate", lambda h, n: CountingFit(h).forecast(n), fit=CountingFit)
    series = daily_shape(days=75)  # 61 daily origins: 9 refit periods, so 3 tasks per model
    serial = run_backtest(series, min_train_h=14 * 24, models=BASELINES + (PROFILE, spec))
    assert len(serial.origins) == 61 and len(task_chunks(refit_schedule(serial.origin_times))) == 3
    assert len(ran_here) == 5 * 3
    forked = run_backtest(series, min_train_h=14 * 24, models=BASELINES + (PROFILE, spec), workers=2)
    assert len(ran_here) == 5 * 3  # every task ran in a worker process
    assert forked.origins == serial.origins and list(forked.models) == list(serial.models)
    for name, model in serial.models.items():
        assert np.array_equal(forked.models[name].forecasts, model.forecasts)
        assert forked.models[name].per_origin_mase == model.per_origin_mase


def test_the_ensemble_is_the_per_hour_median_of_its_members() -> None:
    # All three within the guard's range of a series around 200, so none falls back.
    low = ModelSpec("low", "candidate", lambda h, n: np.full(n, 120.0))
    mid = ModelSpec("mid", "candidate", lambda h, n: np.arange(n, dtype=float) + 190.0)
    high = ModelSpec("high", "candidate", lambda h, n: np.full(n, 280.0))
    spec = ensemble("median_ensemble", (low, mid, high), 24)
    series = daily_shape(days=20)
    backtest = run_backtest(series, min_train_h=14 * 24, models=(BASELINES[0], low, mid, high, spec))
    assert np.array_equal(backtest.models["median_ensemble"].forecasts, backtest.models["mid"].forecasts)
    # Outside a backtest it fits its members itself, and says nothing new.
    assert np.array_equal(spec.forecast(series, 24), np.arange(24, dtype=float) + 190.0)


def test_the_plan_reports_the_verdict_with_its_evidence() -> None:
    settings = PlanSettings(horizon_days=30, models=BASELINES + (PROFILE,), daily_candidates=False)
    forecast = make_plan(daily_shape(), 400, settings).forecast
    gate = forecast["gate"]
    assert forecast["model"] == gate["candidate"] == "hour_of_day_mean" and gate["shipped_candidate"]
    assert gate["baseline"] in ("naive", "seasonal_naive", "drift")
    assert gate["wins"] + gate["losses"] + gate["ties"] == forecast["origins"] == 22
    assert gate["ratio_interval"][0] <= gate["median_ratio"] <= gate["ratio_interval"][1] <= 0.95
    assert gate["p_value"] <= gate["alpha"] == 0.05 and gate["wins"] >= gate["wins_needed"]
    assert gate["to_change"].startswith("hour_of_day_mean would stop shipping")
    assert len(forecast["per_origin"]["times"]) == 22
    assert all(len(values) == 22 for values in forecast["per_origin"]["mase"].values())
    # Per origin, the reported ratio's median is the one the JSON gives.
    mase = forecast["per_origin"]["mase"]
    ratios = np.array(mase["hour_of_day_mean"]) / np.array(mase[gate["baseline"]])
    assert float(np.median(ratios)) == pytest.approx(gate["median_ratio"], abs=1e-3)


def test_plan_origins_flag_sets_the_count_and_refuses_too_few(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    series = daily_shape(days=40)
    history = tmp_path / "history.csv"
    pd.DataFrame({"time": series.index.strftime("%Y-%m-%dT%H:%M:%SZ"), "gpus_busy": series.round(1)}).to_csv(
        history, index=False)
    base = ["plan", "--history", str(history), "--models", "baselines", "--horizon", "30d", "--json"]
    assert main([*base, "--origins", "52"]) == 0
    payload = json.loads(capsys.readouterr().out)
    assert payload["forecast"]["origins"] == 52  # 26 days of origins, so half a day apart
    assert len(payload["forecast"]["per_origin"]["times"]) == 52
    assert main([*base, "--origins", "3"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--origins" in err[0]


def test_plan_html_never_overwrites_an_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    series = daily_shape(days=20)
    history = tmp_path / "history.csv"
    pd.DataFrame({"time": series.index.strftime("%Y-%m-%dT%H:%M:%SZ"), "gpus_busy": series.round(1)}).to_csv(
        history, index=False)
    before = history.read_bytes()
    assert main(["plan", "--history", str(history), "--models", "baselines", "--html", str(history)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--html" in err[0] and "input" in err[0]
    assert history.read_bytes() == before


def test_baselines_only_ship_the_simplest_and_say_so() -> None:
    choice = choose(backtest_of({"naive": [1.0, 2.0, 3.0], "seasonal_naive": [2.0] * 3, "drift": [1.5] * 3}))
    assert (choice.model, choice.baseline, choice.shipped_candidate, choice.wins, choice.origins) == \
        ("naive", "naive", False, 0, 3)
    assert (choice.mase, choice.baseline_mase) == (2.0, 2.0)
    assert choice.reason == "shipping the baseline naive: no candidates"
    assert choice.evidence is None and choice.to_change == ""
    assert gate_summary(choice) == {
        "max_ratio": 0.95, "alpha": 0.05, "test": "one-sided sign test", "interval_level": 0.9,
        "shipped_candidate": False, "to_change": "", "can_pass": False,
        "power": {"level": 0.8, "untied_origins": 3, "wins_needed": None, "detectable_win_rate": None,
                  "text": "the gate cannot pass on 3 untied origins: even 3 wins of 3 give p = 0.125 > 0.05; "
                          "the sign test needs at least 5 untied origins"}}
    assert gate_summary(None) is None


def test_the_verdict_reads_as_written_by_hand() -> None:
    # 12 origins: the candidate beats naive by half on 11 of them and loses on the last.
    per_origin = {"naive": [1.0] * 12, "seasonal_naive": [2.0] * 12, "drift": [1.0] * 12,
                  "cand": [0.5] * 11 + [2.0]}
    choice = choose(backtest_of(per_origin))
    assert choice.model == "cand" and choice.baseline == "naive" and choice.origins == 12
    assert choice.mase == pytest.approx((0.5 * 11 + 2.0) / 12) and choice.baseline_mase == 1.0
    assert choice.reason == ("cand ships: median MASE ratio 0.500 against naive (90% interval 0.500-0.500), "
                             "better on 11 of 12 origins (1 worse, 0 tied; sign test p = 0.00317)")
    assert choice.to_change == ("cand would stop shipping if its median ratio rose above 0.95 or it won fewer "
                                "than 10 of its 12 untied origins")
    summary = gate_summary(choice)
    assert summary == {"max_ratio": 0.95, "alpha": 0.05, "test": "one-sided sign test", "interval_level": 0.9,
                       "shipped_candidate": True, "to_change": choice.to_change, "candidate": "cand",
                       "baseline": "naive", "median_ratio": 0.5, "ratio_interval": [0.5, 0.5], "wins": 11,
                       "losses": 1, "ties": 0, "win_share": round(11 / 12, 4), "p_value": round(13 / 4096, 4),
                       "wins_needed": 10, "can_pass": True, "power": summary["power"]}
    # 12 untied origins: 10 wins needed; a candidate better on a share w of them wins 10 or more with
    # probability sum_k>=10 C(12, k) w^k (1 - w)^(12 - k), which reaches 0.8 at w = 0.869 (checked on both sides).
    assert summary["power"]["wins_needed"] == 10 and summary["power"]["untied_origins"] == 12
    w = summary["power"]["detectable_win_rate"]
    tail = [sum(math.comb(12, k) * x ** k * (1 - x) ** (12 - k) for k in range(10, 13)) for x in (w - 1e-3, w + 1e-3)]
    assert tail[0] < 0.8 <= tail[1] and round(w, 3) == 0.869
    assert summary["power"]["text"] == ("on 12 untied origins the sign test needs 10 wins (83%); it detects, 80% of "
                                        "the time, a candidate better on 87% of origins or more")
    per_origin["cand"] = [1.2] * 6 + [0.9] * 6  # median ratio 1.05 against naive, 6 of 12 better
    choice = choose(backtest_of(per_origin))
    assert choice.reason == ("shipping the baseline naive: no candidate passed the gate against every baseline "
                             "(best: cand, median MASE ratio 1.050 against naive (90% interval 0.900-1.200), "
                             "better on 6 of 12 origins (6 worse, 0 tied; sign test p = 0.613); a candidate needs "
                             "a median ratio <= 0.95 and sign test p <= 0.05)")
    assert choice.to_change == ("to ship, cand needs a median ratio <= 0.95 (it has 1.050) and at least 10 wins of "
                                "12 untied origins (it has 6)")
    assert (choice.mase, choice.baseline_mase, choice.wins) == (1.0, 1.0, 6)
    per_origin["cand"] = [0.5] * 8 + [1.2] * 4  # median ratio 0.5 meets the bound; 8 wins of 12 are too few
    assert choose(backtest_of(per_origin)).to_change == (
        "to ship, cand needs at least 10 wins of 12 untied origins (it has 8); its median ratio already meets the "
        "bound")
    per_origin["cand"] = [0.97] * 11 + [1.2]  # 11 wins pass the sign test; a median ratio of 0.97 does not
    assert choose(backtest_of(per_origin)).to_change == (
        "to ship, cand needs a median ratio <= 0.95 (it has 0.970); its wins already meet the sign test")
    per_origin["cand"] = [1.2] * 6 + [0.9] * 6
    infinite = gate_summary(choose(backtest_of({**per_origin, "naive": [0.0] * 12, "drift": [0.0] * 12})))
    assert infinite is not None and infinite["median_ratio"] is None  # a ratio against a perfect forecast
