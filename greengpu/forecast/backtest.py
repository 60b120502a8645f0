"""Rolling-origin backtest, the shipping gate, and quantiles calibrated from backtest errors.

- Origins: an expanding window; `origins` cut-offs spread evenly from `min_train_h` to the end minus
  one horizon (fewer when the history is short). Every model forecasts `horizon_h` hours from each.
- Metrics per origin: MASE (scaled by the training window's in-sample one-day seasonal naive error),
  sMAPE; and, for the calibrated bands, pinball loss and interval coverage.
- The gate (FIELD-NOTES.md): a candidate ships only if its mean MASE is at most 0.95 x the best
  baseline's and it beats that baseline on at least half of the origins; otherwise the best baseline
  ships, and the report says so.
- Calibration: per horizon step, the empirical quantiles of the shipped model's backtest errors.
  Coverage is measured leave-one-origin-out (each origin's band comes from the other origins' errors),
  so the reported coverage is what a new forecast can expect, not a fit to itself.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from greengpu.forecast.models import BASELINES, CANDIDATES, DAY_H, ModelSpec, guarded

GATE_RATIO = 0.95
CANDIDATE_WINDOW_H = 21 * DAY_H


@dataclass(frozen=True)
class Prepared:
    series: pd.Series
    flags: tuple[str, ...]


def prepare(series: pd.Series, capacity: float | None = None) -> Prepared:
    """An hourly series without holes, and what was done or noticed on the way (gaps, a ceiling)."""
    flags: list[str] = []
    hourly = series.astype(float).resample("h").mean()
    missing = int(hourly.isna().sum())
    if missing:
        flags.append(f"{missing} missing hours filled by interpolation")
        hourly = hourly.interpolate(method="time").bfill().ffill()
    ceiling = capacity if capacity is not None else float(hourly.max())
    at_ceiling = float((hourly >= ceiling - 1e-9).mean())
    if ceiling > 0 and at_ceiling >= 0.05:
        flags.append(f"demand sits at its ceiling ({ceiling:g}) {at_ceiling:.0%} of the time: it may be capped "
                     "by capacity or quota, so the forecast understates demand")
    hourly = hourly.asfreq("h")  # statsmodels wants the frequency on the index
    return Prepared(hourly, tuple(flags))


@dataclass(frozen=True)
class ModelBacktest:
    name: str
    kind: str
    mase: float
    smape: float
    per_origin_mase: tuple[float, ...]
    forecasts: np.ndarray
    """Shape (origins, horizon)."""
    fallbacks: int
    fit_s: float
    """Mean seconds per fit and forecast."""


@dataclass(frozen=True)
class Backtest:
    origins: tuple[int, ...]
    horizon_h: int
    actuals: np.ndarray
    models: dict[str, ModelBacktest]
    notes: list[str] = field(default_factory=list)


def origin_positions(length: int, horizon_h: int, count: int, min_train_h: int) -> list[int]:
    """Cut-off indexes (training is `[:cut]`, test `[cut:cut + horizon]`), evenly spread."""
    last = length - horizon_h
    if last < min_train_h:
        return []
    count = max(1, min(count, last - min_train_h + 1))
    if count == 1:
        return [last]
    return sorted({int(round(min_train_h + i * (last - min_train_h) / (count - 1))) for i in range(count)})


def mase_scale(train: np.ndarray, season: int = DAY_H) -> float:
    if len(train) > season:
        scale = float(np.mean(np.abs(train[season:] - train[:-season])))
    else:
        scale = float(np.mean(np.abs(np.diff(train)))) if len(train) > 1 else 0.0
    return max(scale, 1e-9)


def smape(actual: np.ndarray, forecast: np.ndarray) -> float:
    denominator = np.abs(actual) + np.abs(forecast)
    ratio = np.where(denominator > 0, 2.0 * np.abs(forecast - actual) / np.where(denominator > 0, denominator, 1), 0)
    return float(np.mean(ratio) * 100.0)


def pinball(actual: np.ndarray, quantile_forecast: np.ndarray, tau: float) -> float:
    diff = actual - quantile_forecast
    return float(np.mean(np.maximum(tau * diff, (tau - 1.0) * diff)))


def run_backtest(series: pd.Series, horizon_h: int = DAY_H, origins: int = 12, min_train_h: int = 7 * DAY_H,
                 models: Sequence[ModelSpec] = BASELINES + CANDIDATES, season: int = DAY_H,
                 candidate_window: int | None = CANDIDATE_WINDOW_H) -> Backtest:
    """Every model from every origin. `horizon_h`, `min_train_h`, `season` (the MASE scale's and the
    fallback's) and `candidate_window` are in steps of the series: hours, or days for daily peaks."""
    values = series.to_numpy(dtype=float)
    cuts = origin_positions(len(values), horizon_h, origins, min_train_h)
    notes = []
    if len(cuts) < 10:
        notes.append(f"only {len(cuts)} origins: the history is short for a {horizon_h} h horizon")
    actuals = np.array([values[c:c + horizon_h] for c in cuts]) if cuts else np.zeros((0, horizon_h))
    results: dict[str, ModelBacktest] = {}
    for spec in models:
        forecasts, per_origin, smapes, fallbacks, elapsed = [], [], [], 0, 0.0
        for cut, actual in zip(cuts, actuals, strict=True):
            # Candidates fit on the last CANDIDATE_WINDOW_H hours only: fit time grows with the
            # history, and three weeks hold both seasonalities (the weekly one three times).
            windowed = spec.kind == "candidate" and candidate_window is not None
            first = max(0, cut - candidate_window) if windowed and candidate_window is not None else 0
            history = series.iloc[first:cut]
            start = time.perf_counter()
            result = guarded(spec, history, horizon_h, season)
            elapsed += time.perf_counter() - start
            fallbacks += result.fell_back
            forecasts.append(result.values)
            per_origin.append(float(np.mean(np.abs(actual - result.values))) / mase_scale(values[:cut], season))
            smapes.append(smape(actual, result.values))
        results[spec.name] = ModelBacktest(
            spec.name, spec.kind, float(np.mean(per_origin)) if per_origin else float("nan"),
            float(np.mean(smapes)) if smapes else float("nan"), tuple(per_origin),
            np.array(forecasts) if forecasts else np.zeros((0, horizon_h)), fallbacks,
            elapsed / max(1, len(cuts)))
    return Backtest(tuple(cuts), horizon_h, actuals, results, notes)


@dataclass(frozen=True)
class Choice:
    model: str
    baseline: str
    mase: float
    baseline_mase: float
    wins: int
    origins: int
    shipped_candidate: bool
    reason: str


def choose(backtest: Backtest) -> Choice:
    """Apply the gate: the best candidate ships only if it clearly and consistently beats the best baseline."""
    baselines = [m for m in backtest.models.values() if m.kind == "baseline"]
    candidates = [m for m in backtest.models.values() if m.kind == "candidate"]
    best_baseline = min(baselines, key=lambda m: m.mase)
    origins = len(backtest.origins)
    best: tuple[ModelBacktest, int] | None = None
    for candidate in sorted(candidates, key=lambda m: m.mase):
        wins = sum(c < b for c, b in zip(candidate.per_origin_mase, best_baseline.per_origin_mase, strict=True))
        if candidate.mase <= GATE_RATIO * best_baseline.mase and 2 * wins >= origins:
            best = (candidate, wins)
            break
    if best is None:
        top = min(candidates, key=lambda m: m.mase) if candidates else None
        why = (f"no candidate passed the gate (best: {top.name}, MASE {top.mase:.3f} vs {best_baseline.name} "
               f"{best_baseline.mase:.3f}; it must be <= {GATE_RATIO} x and win on half the origins)"
               if top else "no candidates")
        wins = sum(c < b for c, b in zip(top.per_origin_mase, best_baseline.per_origin_mase, strict=True)) if top else 0
        return Choice(best_baseline.name, best_baseline.name, best_baseline.mase, best_baseline.mase, wins, origins,
                      False, f"shipping the baseline {best_baseline.name}: {why}")
    model, wins = best
    return Choice(model.name, best_baseline.name, model.mase, best_baseline.mase, wins, origins, True,
                  f"{model.name} ships: MASE {model.mase:.3f} vs {best_baseline.name} {best_baseline.mase:.3f}, "
                  f"better on {wins} of {origins} origins")


@dataclass(frozen=True)
class Calibration:
    levels: tuple[float, ...]
    lower: dict[float, np.ndarray]
    """Per level, offsets per horizon step added to the point forecast."""
    upper: dict[float, np.ndarray]
    coverage: dict[float, float]
    """Leave-one-origin-out coverage of each level's band."""
    pinball_upper: float
    """Mean pinball loss of the upper quantile of the widest level (leave-one-origin-out)."""


POOL_STEPS = 2
"""Errors of horizon steps within +-2 h are pooled: a dozen origins alone give too few samples per step."""


def conformal_upper(samples: np.ndarray | list[float], level: float) -> float:
    """The split-conformal upper quantile: with n samples, the ceil((n + 1) level)-th smallest (the
    largest when n is small), so a band from a dozen origins is not narrower than `level` promises."""
    values = np.sort(np.asarray(samples, dtype=float).ravel())
    if len(values) == 0:
        return 0.0
    rank = min(len(values), math.ceil((len(values) + 1) * level))
    return float(values[rank - 1])


def _conformal_quantile(samples: np.ndarray, q: float) -> float:
    """`conformal_upper` at q >= 0.5, and its mirror (from the far low tail) below."""
    if q >= 0.5:
        return conformal_upper(samples, q)
    return -conformal_upper(-np.asarray(samples, dtype=float), 1.0 - q)


def _step_quantiles(errors: np.ndarray, q: float) -> np.ndarray:
    """Per horizon step, the q-quantile of the errors at that step and its neighbours."""
    horizon = errors.shape[1]
    return np.array([_conformal_quantile(errors[:, max(0, h - POOL_STEPS):h + POOL_STEPS + 1], q)
                     for h in range(horizon)])


def calibrate(backtest: Backtest, model: str, levels: Sequence[float] = (0.8, 0.95)) -> Calibration:
    errors = backtest.actuals - backtest.models[model].forecasts  # (origins, horizon)
    lower, upper, coverage = {}, {}, {}
    pinball_upper = float("nan")
    for level in levels:
        lo_q, hi_q = (1.0 - level) / 2.0, 1.0 - (1.0 - level) / 2.0
        lower[level] = _step_quantiles(errors, lo_q) if len(errors) else np.zeros(backtest.horizon_h)
        upper[level] = _step_quantiles(errors, hi_q) if len(errors) else np.zeros(backtest.horizon_h)
        covered, losses = [], []
        for i in range(len(errors)):
            others = np.delete(errors, i, axis=0)
            if len(others) == 0:
                continue
            lo = _step_quantiles(others, lo_q)
            hi = _step_quantiles(others, hi_q)
            covered.append(np.mean((errors[i] >= lo) & (errors[i] <= hi)))
            losses.append(pinball(errors[i], hi, hi_q))
        coverage[level] = float(np.mean(covered)) if covered else float("nan")
        if level == max(levels) and losses:
            pinball_upper = float(np.mean(losses))
    return Calibration(tuple(levels), lower, upper, coverage, pinball_upper)
