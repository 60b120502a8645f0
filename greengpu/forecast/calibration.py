"""Calibrated bands around a model's forecasts: from a backtest's errors, by split-conformal quantiles per horizon
step, on the scale (additive, square root, log) whose leave-one-origin-out interval score is best."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from greengpu.forecast.backtest import Backtest, pinball

SCALES = ("additive", "sqrt", "log1p")


def to_scale(values: np.ndarray, scale: str) -> np.ndarray:
    """Demand on the scale the bands are calibrated on: as it is, its square root or log(1 + GPUs) (below
    zero taken as 0)."""
    values = np.asarray(values, dtype=float)
    if scale == "log1p":
        return np.asarray(np.log1p(np.maximum(values, 0.0)), dtype=float)
    if scale == "sqrt":
        return np.asarray(np.sqrt(np.maximum(values, 0.0)), dtype=float)
    return values


def from_scale(values: np.ndarray, scale: str) -> np.ndarray:
    values = np.asarray(values, dtype=float)
    if scale == "log1p":
        return np.asarray(np.expm1(values), dtype=float)
    if scale == "sqrt":
        return np.asarray(np.square(np.maximum(values, 0.0)), dtype=float)
    return values


@dataclass(frozen=True)
class Calibration:
    levels: tuple[float, ...]
    lower: dict[float, np.ndarray]
    """Per level, offsets per horizon step added to the point forecast (on `scale`)."""
    upper: dict[float, np.ndarray]
    coverage: dict[float, float]
    """Leave-one-origin-out coverage of each level's band."""
    pinball_upper: float
    """Mean pinball loss of the upper quantile of the widest level (leave-one-origin-out), in GPUs."""
    scale: str = "additive"
    """`additive`: errors in GPUs, added to the forecast; `sqrt` and `log1p`: errors on the square root or the
    log of (1 + GPUs), so a band widens and narrows with the level it is drawn around (a drop of 400 GPUs seen
    from 1,000 is not one from 300)."""
    interval_score: float = float("nan")
    """Leave-one-origin-out interval score of the bands, summed over the levels, in GPUs: the band's width plus
    2 / (1 - level) times how far the demand fell outside it (lower is better; Gneiting and Raftery, 2007)."""
    compared: dict[str, float] = field(default_factory=dict)
    """With `calibrate_best`: every scale's interval score, the one chosen among them."""

    def band(self, point: np.ndarray, level: float) -> tuple[np.ndarray, np.ndarray]:
        """The `level` band around the point forecasts `point` (one per horizon step), in GPUs."""
        centre = to_scale(point, self.scale)
        return (from_scale(centre + self.lower[level][:len(centre)], self.scale),
                from_scale(centre + self.upper[level][:len(centre)], self.scale))


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


def interval_score(actual: np.ndarray, lower: np.ndarray, upper: np.ndarray, level: float) -> float:
    """The mean interval score of a central `level` band: width, plus 2 / (1 - level) x each miss."""
    penalty = 2.0 / (1.0 - level)
    return float(np.mean((upper - lower) + penalty * np.maximum(lower - actual, 0.0)
                         + penalty * np.maximum(actual - upper, 0.0)))


def calibrate(backtest: Backtest, model: str, levels: Sequence[float] = (0.8, 0.95),
              scale: str = "additive") -> Calibration:
    """Bands per level from the backtest errors of `model` on `scale` (`SCALES`), with their leave-one-origin-out
    coverage and interval score."""
    if scale not in SCALES:
        raise ValueError(f"scale must be one of {SCALES}, got {scale!r}")
    forecasts = backtest.models[model].forecasts
    centres = to_scale(forecasts, scale)
    errors = to_scale(backtest.actuals, scale) - centres if len(forecasts) else np.zeros((0, backtest.horizon_h))
    lower, upper, coverage = {}, {}, {}
    pinball_upper, scores = float("nan"), []
    for level in levels:
        lo_q, hi_q = (1.0 - level) / 2.0, 1.0 - (1.0 - level) / 2.0
        lower[level] = _step_quantiles(errors, lo_q) if len(errors) else np.zeros(backtest.horizon_h)
        upper[level] = _step_quantiles(errors, hi_q) if len(errors) else np.zeros(backtest.horizon_h)
        covered, losses, scored = [], [], []
        for i in range(len(errors)):
            others = np.delete(errors, i, axis=0)
            if len(others) == 0:
                continue
            lo = _step_quantiles(others, lo_q)
            hi = _step_quantiles(others, hi_q)
            covered.append(np.mean((errors[i] >= lo) & (errors[i] <= hi)))
            # In GPUs whatever the scale: the bands a planner would have drawn (no demand below zero).
            low_gpus = np.maximum(from_scale(centres[i] + lo, scale), 0.0)
            high_gpus = from_scale(centres[i] + hi, scale)
            losses.append(pinball(backtest.actuals[i], high_gpus, hi_q))
            scored.append(interval_score(backtest.actuals[i], low_gpus, high_gpus, level))
        coverage[level] = float(np.mean(covered)) if covered else float("nan")
        scores.append(float(np.mean(scored)) if scored else float("nan"))
        if level == max(levels) and losses:
            pinball_upper = float(np.mean(losses))
    return Calibration(tuple(levels), lower, upper, coverage, pinball_upper, scale, float(sum(scores)))


def calibrate_best(backtest: Backtest, model: str, levels: Sequence[float] = (0.8, 0.95)) -> Calibration:
    """The bands on the scale whose leave-one-origin-out interval score is lowest (additive on a tie).

    Additive errors learnt where demand stood high, drawn around a low level, can reach far below anything
    seen (on the bundled Philly demand at 301 GPUs, its 95% band fell to 0 while the 80% one kept 150-494);
    on the square root or log scale a band follows its level. Which one fits is the backtest's to say."""
    judged = [calibrate(backtest, model, levels, scale) for scale in SCALES]
    finite = [c for c in judged if math.isfinite(c.interval_score)]
    best = min(finite, key=lambda c: c.interval_score) if finite else judged[0]
    return replace(best, compared={c.scale: c.interval_score for c in judged})
