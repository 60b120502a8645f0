"""Hourly demand series (greengpu.forecast.demand) from job intervals, traces and usage histories, each hour's
mean worked out by hand."""

from __future__ import annotations

import numpy as np
import pandas as pd

from greengpu.forecast.demand import (
    ANY_MODEL,
    demand_by_model_from_history,
    demand_by_model_from_jobs,
    demand_from_history,
    demand_from_intervals,
    demand_from_jobs,
    demand_from_replay,
    model_of_job,
)
from greengpu.model import Job

T0 = pd.Timestamp("1970-01-01", tz="UTC")  # times are seconds since the epoch


def job(job_id: str, submit_s: float, duration_s: float, gpus: float, gpu_types: frozenset[str] | None = None) -> Job:
    return Job(job_id=job_id, tenant="t", gpus=gpus, duration_s=duration_s, submit_time_s=submit_s,
               gpu_types=gpu_types)


def hourly(values: list[float], start: pd.Timestamp = T0) -> pd.Series:
    return pd.Series(values, index=pd.date_range(start, periods=len(values), freq="h"), name="gpus_demand")


def test_intervals_give_each_hour_the_mean_gpus_held_in_it() -> None:
    # 2 GPUs for the first half hour; 1 GPU from 00:30 to 02:30; 4 GPUs inside hour 1 for 15 minutes.
    series = demand_from_intervals(np.array([0.0, 1800.0, 4500.0]), np.array([1800.0, 9000.0, 5400.0]),
                                   np.array([2.0, 1.0, 4.0]))
    pd.testing.assert_series_equal(series, hourly([1.0 + 0.5, 1.0 + 1.0, 0.5, 0.0]))  # and the hour after the last end
    empty = demand_from_intervals(np.array([]), np.array([]), np.array([]))
    assert empty.empty and empty.dtype == float


def test_the_first_hour_is_the_hour_of_the_first_start() -> None:
    series = demand_from_intervals(np.array([5400.0]), np.array([7200.0]), np.array([3.0]))
    pd.testing.assert_series_equal(series, hourly([1.5, 0.0], T0 + pd.Timedelta(hours=1)))
    spanning = demand_from_intervals(np.array([0.0, 600.0]), np.array([3 * 3600.0, 3 * 3600.0 + 900.0]),
                                     np.array([1.0, 2.0]))
    # Job 1 holds every hour whole; job 2 from 00:10 to 03:15: 50/60, 1, 1, 1/4 of an hour.
    pd.testing.assert_series_equal(spanning, hourly([1 + 2 * 50 / 60, 3.0, 3.0, 2 * 0.25, 0.0]))


def test_jobs_offer_load_from_submission_and_a_replay_until_their_finish() -> None:
    jobs = [job("a", 0.0, 1800.0, 2.0), job("b", 3600.0, 3600.0, 1.0), job("never", 0.0, 60.0, 8.0)]
    pd.testing.assert_series_equal(demand_from_jobs(jobs[:2]), hourly([1.0, 1.0, 0.0]))
    replay = demand_from_replay(jobs, {"a": 3600.0, "b": 5400.0})
    pd.testing.assert_series_equal(replay, hourly([2.0, 0.5, 0.0]))


def test_a_job_pinned_to_one_model_counts_for_it_and_the_rest_for_any_model() -> None:
    assert model_of_job(job("x", 0, 1, 1, frozenset({"A100"}))) == "A100"
    assert model_of_job(job("x", 0, 1, 1, frozenset({"A100", "H100"}))) == ANY_MODEL
    assert model_of_job(job("x", 0, 1, 1)) == ANY_MODEL
    jobs = [job("a", 0.0, 3600.0, 2.0, frozenset({"H100"})), job("b", 7200.0, 3600.0, 1.0)]
    by_model = demand_by_model_from_jobs(jobs)
    assert list(by_model) == [ANY_MODEL, "H100"]  # sorted, on one index with zeros where a model had none
    pd.testing.assert_series_equal(by_model["H100"], hourly([2.0, 0.0, 0.0, 0.0]).asfreq("h"), check_names=False,
                                   check_freq=False)
    pd.testing.assert_series_equal(by_model[ANY_MODEL], hourly([0.0, 0.0, 1.0, 0.0]).asfreq("h"), check_names=False,
                                   check_freq=False)
    replayed = demand_by_model_from_jobs(jobs, {"a": 1800.0})
    assert list(replayed) == [ANY_MODEL, "H100"] and replayed[ANY_MODEL].empty is False
    assert float(replayed["H100"].sum()) == 1.0
    assert demand_by_model_from_jobs([]) == {}


def test_history_adds_pending_to_busy_and_sums_tenant_rows_before_the_hourly_mean() -> None:
    frame = pd.DataFrame({"time": ["1970-01-01T00:00Z", "1970-01-01T00:30Z", "1970-01-01T00:30Z", "1970-01-01T02:00Z"],
                          "gpus_busy": [4, 2, 3, 10], "gpus_pending": [1.0, None, 2.0, 0.0],
                          "tenant": ["a", "a", "b", "a"]})
    # 00:00 is 5; 00:30 is (2 + 0) + (3 + 2) = 7; hour 0 mean 6; hour 1 has no row; hour 2 is 10.
    series = demand_from_history(frame)
    assert series.index[0] == T0 and list(series.to_numpy()[[0, 2]]) == [6.0, 10.0] and np.isnan(series.iloc[1])
    busy_only = demand_from_history(frame[["time", "gpus_busy"]])
    assert list(busy_only.to_numpy()[[0, 2]]) == [3.0, 10.0]  # rows kept apart: the mean of 4, 2 and 3


def test_history_by_model_names_blank_models_any_model() -> None:
    frame = pd.DataFrame({"time": ["2026-01-01T00:00Z", "2026-01-01T00:00Z", "2026-01-01T01:00Z"],
                          "gpus_busy": [4, 2, 3], "gpu_model": ["A100", " ", None]})
    by_model = demand_by_model_from_history(frame)
    assert list(by_model) == [ANY_MODEL, "A100"]
    assert list(by_model["A100"].to_numpy()) == [4.0, 0.0] and list(by_model[ANY_MODEL].to_numpy()) == [2.0, 3.0]
    assert demand_by_model_from_history(frame.drop(columns="gpu_model")) == {}


def test_history_times_without_an_offset_are_utc_and_model_rows_add_up() -> None:
    frame = pd.DataFrame({"time": ["1970-01-01 00:00", "1970-01-01 00:00", "1970-01-01 01:00"],
                          "gpus_busy": [4, 2, 3], "gpu_model": ["A100", "H100", "A100"]})
    series = demand_from_history(frame)
    assert str(series.index.tz) == "UTC" and series.index[0] == T0
    assert list(series.to_numpy()) == [6.0, 3.0]  # the two models' rows of 00:00 add up
