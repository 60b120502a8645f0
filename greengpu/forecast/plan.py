"""`greengpu plan`'s capacity plan, pure: forecast choice, calibrated peak demand, GPUs needed per month,
run-out and order-by dates.

Method (docs/FORECAST.md):
1. A day-ahead rolling-origin backtest (one origin a day, `backtest.py`) picks the shipped model by the
   gate (`gate.py`: median MASE ratio and a sign test over the origins) and calibrates its bands.
2. Peak demand: the daily peaks of the last `growth_window_days`; their level is the median of the
   last week's peaks, their growth the Theil-Sen slope (robust to a burst) over the window, floored
   at zero unless `allow_decline`.
3. For each day of the horizon, the upper peak = level + growth x days ahead + the calibrated upper
   offset of daily peaks (`peak_upper_offset`: how far a day's peak rose above the previous week's
   median, at 95%, out of sample). GPUs needed = ceil(upper
   peak / target utilisation) + redundancy, and at least the Erlang-C count that keeps P(wait) under
   `max_wait_probability` for the day's mean demand.
4. Planning inputs beyond history (`PlanInputs`, each shown in the report): the measured growth can be
   replaced by an expected one; efficiency gains scale the organic demand from their date (-15% GPU-hours
   from quantization: x 0.85); planned projects add their GPUs from their start to their end; the
   buffer factor multiplies the upper peak last.
5. Run-out: the first day that needs more GPUs than are installed; order-by: run-out minus the lead
   time (flagged when already past).
6. Scenarios: the same plan at the median, 80% and 95% peak quantiles x several utilisation targets.
7. Day ahead: the shipped model's next 24 hours with the calibrated 80% and 95% bands (the chart, and
   the sleep planner's forecast-driven warm reserve).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pandas as pd

from greengpu.forecast.backtest import available_cpus, prepare, run_backtest
from greengpu.forecast.blas import one_blas_thread
from greengpu.forecast.calibration import calibrate_best, conformal_upper
from greengpu.forecast.capacity import gpus_needed, servers_for_wait
from greengpu.forecast.daily import forecast_daily_peaks, theil_sen_slope
from greengpu.forecast.demand import ANY_MODEL
from greengpu.forecast.gate import choose, gate_summary
from greengpu.forecast.models import DAY_H
from greengpu.forecast.plan_summary import daily_summary, day_ahead, iso_date, rounded
from greengpu.forecast.plan_types import (
    InputsSummary,
    ModelPoolRow,
    MonthRow,
    PlanResult,
    PlanSettings,
    ScenarioRow,
)
from greengpu.plan_inputs import EfficiencyGain, PlanInputs, Project

SCENARIO_QUANTILES = (0.5, 0.8, 0.95)
SCENARIO_UTILISATIONS = (0.5, 0.65, 0.8)


def peak_upper_offset(daily_peaks: np.ndarray, level: float = 0.95, lookback_days: int = 7) -> float:
    """How far a day's peak rises above the median of the previous week's peaks, at `level`.

    Calibrated out of sample (each day against the days before it), with the split-conformal
    correction: the upper quantile of peak demand the plan sizes for.
    """
    errors = [daily_peaks[i] - float(np.median(daily_peaks[i - lookback_days:i]))
              for i in range(lookback_days, len(daily_peaks))]
    return max(0.0, conformal_upper(errors, level))


DAYS_PER_MONTH = 365.25 / 12


@dataclass(frozen=True)
class PeakModel:
    """Where daily peaks stand and go: the organic part, before planning inputs."""
    level: float
    slope_per_day: float
    mean_ratio: float
    """Median daily mean over median daily peak: the Erlang-C check's mean demand per peak GPU."""
    path: np.ndarray | None = None
    """A daily model's peak for each day ahead (it replaces level + slope x days when it ships)."""


@dataclass(frozen=True)
class PlannedDay:
    day: pd.Timestamp
    peak: float
    upper: float
    required: int


def efficiency_factor(day: pd.Timestamp, gains: tuple[EfficiencyGain, ...]) -> float:
    factor = 1.0
    for gain in gains:
        if day >= gain.start:
            factor *= 1.0 + gain.change
    return factor


def project_gpus(day: pd.Timestamp, projects: tuple[Project, ...]) -> float:
    return sum(p.gpus for p in projects if day >= p.start and (p.end is None or day < p.end))


@dataclass(frozen=True)
class PeakHistory:
    """What the history says of daily peaks: the plan's starting point, before any planning input."""
    daily_peaks: pd.Series
    level: float
    """Median of the last week's peaks."""
    slope_per_day: float
    """Theil-Sen growth over the growth window, as measured (may be negative)."""
    window_days: int
    mean_ratio: float


def peak_history(series: pd.Series, settings: PlanSettings) -> PeakHistory:
    daily_peaks = series.resample("D").max().dropna()
    window = daily_peaks.iloc[-settings.growth_window_days:].to_numpy(dtype=float)
    level = float(np.median(window[-7:]))
    mean_level = float(np.median(series.resample("D").mean().dropna().to_numpy(dtype=float)[-7:]))
    return PeakHistory(daily_peaks, level, theil_sen_slope(window), len(window),
                       mean_level / level if level > 0 else 1.0)


def horizon_days(series: pd.Series, settings: PlanSettings) -> pd.DatetimeIndex:
    """The days planned: from the day after the history ends, `horizon_days` of them."""
    return pd.date_range(series.index[-1].normalize() + pd.Timedelta(days=1), periods=settings.horizon_days,
                         freq="D")


def plan_days(days: pd.DatetimeIndex, peaks: PeakModel, upper_offset: float, target_utilisation: float,
              settings: PlanSettings, inputs: PlanInputs) -> list[PlannedDay]:
    """Each day's peak, upper peak (with the planning inputs) and GPUs required."""
    planned = []
    for ahead, day in enumerate(days, start=1):
        day_naive = day.tz_localize(None) if day.tz is not None else day
        if peaks.path is not None and ahead <= len(peaks.path):
            organic = float(peaks.path[ahead - 1])
            if not settings.allow_decline:
                organic = max(organic, peaks.level)
        else:
            organic = max(0.0, peaks.level + peaks.slope_per_day * ahead)
        factor = efficiency_factor(day_naive, inputs.efficiency)
        extra = project_gpus(day_naive, inputs.projects)
        peak = organic * factor + extra
        upper = ((organic + upper_offset) * factor + extra) * inputs.buffer_factor
        by_rule = gpus_needed(upper, target_utilisation, settings.redundancy_gpus)
        mean_demand = organic * peaks.mean_ratio * factor + extra
        by_wait = servers_for_wait(max(0.0, mean_demand), settings.max_wait_probability)
        planned.append(PlannedDay(day, peak, upper, max(by_rule, by_wait)))
    return planned


def run_out_day(planned: list[PlannedDay], installed_gpus: int | None) -> pd.Timestamp | None:
    if installed_gpus is None:
        return None
    return next((d.day for d in planned if d.required > installed_gpus), None)


Progress = Callable[[str], None]
"""Hears what the plan is doing, in a few words, as it goes (for a display on stderr)."""


@dataclass(frozen=True)
class OrderDates:
    """When to order the GPUs that run-out needs, given the lead time, never before the plan's first day."""
    lead_time_date: pd.Timestamp | None
    """Run-out minus the lead time: may lie in the past, even before the history."""
    order_by: pd.Timestamp | None
    """The later of that and the plan's first day (today: order now)."""
    arrival: pd.Timestamp | None
    """When GPUs ordered on `order_by` arrive."""
    late_days: int
    """Days after run-out that they arrive (0: in time)."""
    already_short: bool
    """Run-out is the plan's first day: more GPUs are needed now than are installed."""


def order_dates(run_out: pd.Timestamp | None, first_day: pd.Timestamp | None, lead_time_days: int) -> OrderDates:
    """The order-by date for `run_out`, clamped to `first_day`, with the arrival and how late it is."""
    if run_out is None or first_day is None:
        return OrderDates(None, None, None, 0, False)
    lead = pd.Timedelta(days=lead_time_days)
    by_lead_time = run_out - lead
    order_by = max(by_lead_time, first_day)
    arrival = order_by + lead
    return OrderDates(by_lead_time, order_by, arrival, max(0, (arrival - run_out).days), run_out <= first_day)


def order_note(order: OrderDates, run_out: pd.Timestamp | None, lead_time_days: int,
               history_start: pd.Timestamp) -> str:
    """The note for an order-by date that is today or has passed: order now, and how late the GPUs come."""
    assert order.lead_time_date is not None and order.arrival is not None and run_out is not None
    before = f" (before the history starts on {history_start.date()})" if order.lead_time_date < history_start else ""
    if order.late_days == 0:
        return (f"order today: with a lead time of {lead_time_days} days the GPUs needed from {run_out.date()} must "
                f"be ordered by {order.lead_time_date.date()}, the plan's first day")
    return (f"order now: with a lead time of {lead_time_days} days the GPUs needed from {run_out.date()} had to be "
            f"ordered by {order.lead_time_date.date()}{before}; ordered now they arrive {order.arrival.date()}, "
            f"{order.late_days} day{'s' if order.late_days != 1 else ''} after they are needed")


def make_plan(history: pd.Series, installed_gpus: int | None, settings: PlanSettings,
              inputs: PlanInputs | None = None, progress: Progress | None = None) -> PlanResult:
    """The capacity plan (docs/FORECAST.md), with one BLAS thread per process for the many small fits."""
    with one_blas_thread():
        return _make_plan(history, installed_gpus, settings, inputs or PlanInputs(), progress or (lambda text: None))


def _backtest_progress(say: Progress, what: str) -> Callable[[int, int], None]:
    started = time.perf_counter()

    def heard(done: int, total: int) -> None:
        say(f"{what}: {done} of {total} tasks ({time.perf_counter() - started:.0f} s)")

    return heard


def _make_plan(history: pd.Series, installed_gpus: int | None, settings: PlanSettings, inputs: PlanInputs,
               say: Progress) -> PlanResult:
    prepared = prepare(history, capacity=float(installed_gpus) if installed_gpus else None)
    series = prepared.series
    flags = list(prepared.flags)
    workers = settings.workers if settings.workers is not None else available_cpus()
    started = time.perf_counter()
    backtest = run_backtest(series, horizon_h=DAY_H, origins=settings.origins, min_train_h=14 * DAY_H,
                            models=settings.models, workers=workers,
                            progress=_backtest_progress(say, "day-ahead backtest"))
    backtest_s = time.perf_counter() - started
    flags += backtest.notes
    choice = choose(backtest)
    calibration = calibrate_best(backtest, choice.model)

    history_peaks = peak_history(series, settings)
    level, measured_slope = history_peaks.level, history_peaks.slope_per_day
    slope = measured_slope
    if inputs.growth_gpus_per_month is not None:
        slope = inputs.growth_gpus_per_month / DAYS_PER_MONTH
    elif slope < 0 and not settings.allow_decline:
        flags.append(f"demand peaks fell {-slope:.2f} GPUs/day ({-slope * DAYS_PER_MONTH:,.0f} GPUs/month) over the "
                     f"last {history_peaks.window_days} days; planned flat at {level:,.1f} GPUs rather than falling")
        slope = 0.0
    peak_values = history_peaks.daily_peaks.to_numpy(dtype=float)
    offsets = {q: peak_upper_offset(peak_values, level=q) for q in SCENARIO_QUANTILES}
    upper_offset = offsets[0.95]
    daily = forecast_daily_peaks(history_peaks.daily_peaks, settings.horizon_days, settings.origins,
                                 settings.daily_candidates, workers=workers,
                                 progress=_backtest_progress(say, "long-horizon backtest"))
    path = daily.path if inputs.growth_gpus_per_month is None else None
    peaks = PeakModel(level, slope, history_peaks.mean_ratio, path)

    days = horizon_days(series, settings)
    planned = plan_days(days, peaks, upper_offset, settings.target_utilisation, settings, inputs)
    run_out = run_out_day(planned, installed_gpus)
    order = order_dates(run_out, days[0] if len(days) else None, settings.lead_time_days)
    if order.lead_time_date is not None and order.lead_time_date <= days[0]:
        flags.append(order_note(order, run_out, settings.lead_time_days, series.index[0].normalize()))
    required = max((d.required for d in planned), default=0)
    return PlanResult(
        forecast={"model": choice.model, "mase": rounded(choice.mase), "baseline": choice.baseline,
                  "baseline_mase": rounded(choice.baseline_mase), "origins": choice.origins,
                  "wins": choice.wins, "shipped_candidate": choice.shipped_candidate, "reason": choice.reason,
                  "coverage_80": rounded(calibration.coverage[0.8]), "coverage_95": rounded(calibration.coverage[0.95]),
                  "bands": {"scale": calibration.scale, "interval_score": rounded(calibration.interval_score),
                            "interval_scores": {k: rounded(v) for k, v in calibration.compared.items()}},
                  "models": {m.name: rounded(m.mase) for m in backtest.models.values()},
                  "fit_s": {m.name: rounded(m.fit_s) for m in backtest.models.values()},
                  "backtest_s": round(backtest_s, 2),
                  "gate": gate_summary(choice),
                  "per_origin": {"times": [t.isoformat() for t in backtest.origin_times],
                                 "mase": {m.name: [rounded(v) for v in m.per_origin_mase]
                                          for m in backtest.models.values()}},
                  "daily": daily_summary(daily, path is not None)},
        capacity={"installed_gpus": installed_gpus, "required_gpus": required,
                  "run_out_date": iso_date(run_out), "order_by_date": iso_date(order.order_by),
                  "order_by_lead_time_date": iso_date(order.lead_time_date), "arrival_date": iso_date(order.arrival),
                  "late_days": order.late_days, "already_short": order.already_short,
                  "plan_start_date": iso_date(days[0]) if len(days) else None,
                  "required_now_gpus": planned[0].required if planned else 0,
                  "target_utilisation": settings.target_utilisation, "redundancy_gpus": settings.redundancy_gpus,
                  "lead_time_days": settings.lead_time_days, "horizon_days": settings.horizon_days,
                  "max_wait_probability": settings.max_wait_probability},
        months=_months(planned),
        growth={"peak_level_gpus": round(level, 1), "peak_growth_gpus_per_day": round(slope, 3),
                "measured_growth_gpus_per_day": round(measured_slope, 3),
                "upper_offset_gpus": round(upper_offset, 1), "window_days": float(history_peaks.window_days)},
        flags=flags,
        inputs=_inputs_summary(inputs, measured_slope, slope),
        scenarios=_scenarios(days, peaks, offsets, settings, inputs, installed_gpus),
        days=[{"day": iso_date(d.day), "peak_gpus": round(d.peak, 1), "upper_peak_gpus": round(d.upper, 1),
               "required_gpus": d.required} for d in planned],
        day_ahead=day_ahead(series, choice.model, settings.models, calibration),
    )


def size_by_model(demand_by_model: dict[str, pd.Series], installed_by_model: dict[str, int],
                  settings: PlanSettings) -> list[ModelPoolRow]:
    """Per GPU model jobs are pinned to: the same peak rule as the cluster (level, Theil-Sen growth,
    calibrated upper rise), sized against that model's installed GPUs. Planning inputs are the
    cluster's and are not split by model; the demand that accepts any model is reported, not sized."""
    rows: list[ModelPoolRow] = []
    for model, series in demand_by_model.items():
        if series.dropna().empty:
            continue
        history_peaks = peak_history(series, settings)
        level = history_peaks.level
        slope = history_peaks.slope_per_day if settings.allow_decline else max(0.0, history_peaks.slope_per_day)
        offset = peak_upper_offset(history_peaks.daily_peaks.to_numpy(dtype=float))
        peaks = PeakModel(level, slope, history_peaks.mean_ratio)
        days = horizon_days(series, settings)
        # A model the cluster lacks has 0 installed: its pinned jobs can never run, and it says so.
        installed = installed_by_model.get(model, 0) if installed_by_model and model != ANY_MODEL else None
        required, run_out = None, None  # accepts any model: it shares every pool
        if model != ANY_MODEL or not installed_by_model:
            planned = plan_days(days, peaks, offset, settings.target_utilisation, settings, PlanInputs())
            required = max((d.required for d in planned), default=0)
            run_out = iso_date(run_out_day(planned, installed))
        rows.append({"gpu_model": model, "installed_gpus": installed, "peak_gpus": round(level, 1),
                     "growth_gpus_per_day": round(slope, 3), "upper_offset_gpus": round(offset, 1),
                     "required_gpus": required, "run_out_date": run_out})
    return rows


def _months(planned: list[PlannedDay]) -> list[MonthRow]:
    if not planned:
        return []
    frame = pd.DataFrame([(d.day, d.peak, d.upper, d.required) for d in planned],
                         columns=["day", "peak", "upper", "need"]).set_index("day")
    day_index = pd.DatetimeIndex(frame.index)
    months_index = (day_index.tz_convert(None) if day_index.tz is not None else day_index).to_period("M")
    return [{"month": str(month), "peak_gpus": round(float(part["peak"].max()), 1),
             "upper_peak_gpus": round(float(part["upper"].max()), 1), "required_gpus": int(part["need"].max())}
            for month, part in frame.groupby(months_index)]


def _scenarios(days: pd.DatetimeIndex, peaks: PeakModel, offsets: dict[float, float], settings: PlanSettings,
               inputs: PlanInputs, installed_gpus: int | None) -> list[ScenarioRow]:
    """Required GPUs and run-out date for each peak quantile x utilisation target."""
    utilisations = sorted({*SCENARIO_UTILISATIONS, settings.target_utilisation})
    rows: list[ScenarioRow] = []
    for quantile in SCENARIO_QUANTILES:
        for utilisation in utilisations:
            planned = plan_days(days, peaks, offsets[quantile], utilisation, settings, inputs)
            rows.append({"quantile": quantile, "target_utilisation": utilisation,
                         "required_gpus": max((d.required for d in planned), default=0),
                         "run_out_date": iso_date(run_out_day(planned, installed_gpus))})
    return rows


def _inputs_summary(inputs: PlanInputs, measured_slope: float, used_slope: float) -> InputsSummary:
    return {
        "projects": [{"name": p.name, "gpus": p.gpus, "start": iso_date(p.start), "end": iso_date(p.end)}
                     for p in inputs.projects],
        "efficiency": [{"name": g.name, "change": g.change, "start": iso_date(g.start)} for g in inputs.efficiency],
        "buffer_factor": inputs.buffer_factor,
        "growth_gpus_per_month": (round(inputs.growth_gpus_per_month, 2) if inputs.growth_gpus_per_month is not None
                                  else None),
        "measured_growth_gpus_per_month": round(measured_slope * DAYS_PER_MONTH, 2),
        "used_growth_gpus_per_month": round(used_slope * DAYS_PER_MONTH, 2),
    }
