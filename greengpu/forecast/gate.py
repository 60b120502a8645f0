"""The shipping gate: a candidate ships only when the evidence over many origins says it beats the
baselines, not when one day does.

Per origin, the ratio of a candidate's MASE to a baseline's. A candidate ships when, against every
baseline (naive, seasonal naive, drift),
- the median of those ratios is at most `GATE_RATIO` (0.95: at least 5% better on a typical origin;
  a median, so that one outlier day cannot decide), and
- it beats that baseline on significantly more origins than it loses: a one-sided sign test (ties
  left out) at `GATE_ALPHA` (0.05), which asks for a win share well above one half, more so on few
  origins (5 of 5, 9 of 10, 17 of 24, 32 of 50).
Among the candidates that pass, the one with the lowest median ratio ships. Otherwise a baseline
ships: the simplest one that no other baseline beats under the same test. The evidence (median
ratio with its distribution-free interval, wins, losses, ties, p-value, against the baseline the
candidate does worst against) is reported for the shipped candidate, or for the best candidate when
a baseline ships, with what it would take to change the verdict.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from greengpu.forecast.backtest import Backtest
from greengpu.forecast.plan_types import GateSummary

GATE_RATIO = 0.95
GATE_ALPHA = 0.05
INTERVAL_LEVEL = 0.90
"""Two-sided level of the interval reported around the median ratio."""
GATE_POWER = 0.80
"""The power at which the gate reports the smallest effect it detects: a candidate better on that share of
origins (or more) passes the sign test at least 80% of the time."""


def _binomial_tail_at_least(successes: int, trials: int, p: float = 0.5) -> float:
    """P(X >= successes) for X ~ Binomial(trials, p); exactly (in rationals' stead, integer binomials) at 1/2."""
    if successes <= 0:
        return 1.0
    if p == 0.5:
        return sum(math.comb(trials, k) for k in range(successes, trials + 1)) / 2.0 ** trials
    return float(sum(math.comb(trials, k) * p ** k * (1.0 - p) ** (trials - k) for k in range(successes, trials + 1)))


def sign_test_p(wins: int, losses: int) -> float:
    """One-sided sign test: the chance of at least `wins` wins in `wins + losses` fair coin tosses."""
    return _binomial_tail_at_least(wins, wins + losses)


def wins_needed(trials: int, alpha: float = GATE_ALPHA) -> int | None:
    """The fewest wins out of `trials` (ties left out) that the sign test accepts at `alpha`; None when
    even winning all of them is not enough."""
    return next((k for k in range(trials + 1) if _binomial_tail_at_least(k, trials) <= alpha), None)


MIN_TRIALS = 5
"""The fewest untied origins on which the sign test can pass at `GATE_ALPHA`: 5 wins of 5 is p = 1/32;
4 of 4 is 1/16 = 0.0625."""


@dataclass(frozen=True)
class Power:
    """What the gate can see with this many untied origins."""
    trials: int
    wins_needed: int | None
    """None: even winning every origin does not reach p <= `GATE_ALPHA`."""
    detectable_win_rate: float | None
    """The smallest share of origins a candidate must be better on to pass the sign test with probability
    `GATE_POWER` (None when the test cannot pass)."""

    @property
    def can_pass(self) -> bool:
        return self.wins_needed is not None

    def text(self) -> str:
        """In words: what it takes, and what it would catch."""
        if self.wins_needed is None or self.detectable_win_rate is None:
            return (f"the gate cannot pass on {self.trials} untied origins: even {self.trials} wins of "
                    f"{self.trials} give p = {0.5 ** self.trials:.3g} > {GATE_ALPHA}; the sign test needs at least "
                    f"{MIN_TRIALS} untied origins")
        return (f"on {self.trials} untied origins the sign test needs {self.wins_needed} wins "
                f"({self.wins_needed / self.trials:.0%}); it detects, {GATE_POWER:.0%} of the time, a candidate "
                f"better on {self.detectable_win_rate:.0%} of origins or more")


def gate_power(trials: int, alpha: float = GATE_ALPHA, power: float = GATE_POWER) -> Power:
    """The sign test's reach on `trials` untied origins: the wins it needs and the smallest win rate it
    detects with probability `power` (by bisection on the binomial tail, to 1e-6)."""
    needed = wins_needed(trials, alpha)
    if needed is None:
        return Power(trials, None, None)
    low, high = 0.5, 1.0  # at 1/2 the tail is <= alpha < power; at 1 it is 1
    while high - low > 1e-6:
        middle = (low + high) / 2.0
        if _binomial_tail_at_least(needed, trials, middle) >= power:
            high = middle
        else:
            low = middle
    return Power(trials, needed, round(high, 4))


def median_interval(values: Sequence[float] | np.ndarray, level: float = INTERVAL_LEVEL) -> tuple[float, float]:
    """A distribution-free interval for the median: the j-th smallest and j-th largest values, with j the
    largest rank whose binomial tail keeps coverage at or above `level` (the whole range on few values)."""
    ordered = np.sort(np.asarray(values, dtype=float))
    n = len(ordered)
    if n == 0:
        return (math.nan, math.nan)
    tail = (1.0 - level) / 2.0
    j = 1
    while j < n // 2 and 1.0 - _binomial_tail_at_least(j + 1, n) <= tail:
        j += 1  # P(X <= j) <= tail: the (j+1)-th order statistic still bounds the median at `level`
    return (float(ordered[j - 1]), float(ordered[n - j]))


@dataclass(frozen=True)
class Evidence:
    """A candidate against one baseline, origin by origin."""
    model: str
    baseline: str
    median_ratio: float
    interval: tuple[float, float]
    wins: int
    losses: int
    ties: int
    p_value: float
    wins_needed: int | None
    """Wins (of wins + losses) the sign test needs at `GATE_ALPHA`."""

    @property
    def origins(self) -> int:
        return self.wins + self.losses + self.ties

    @property
    def passes(self) -> bool:
        return self.median_ratio <= GATE_RATIO and self.p_value <= GATE_ALPHA

    def summary(self) -> str:
        low, high = self.interval
        return (f"median MASE ratio {self.median_ratio:.3f} against {self.baseline} "
                f"({INTERVAL_LEVEL:.0%} interval {low:.3f}-{high:.3f}), better on {self.wins} of {self.origins} "
                f"origins ({self.losses} worse, {self.ties} tied; sign test p = {self.p_value:.3g})")


def per_origin_ratios(candidate: Sequence[float], baseline: Sequence[float]) -> np.ndarray:
    """Candidate MASE over baseline MASE per origin; two perfect forecasts tie at 1."""
    cand, base = np.asarray(candidate, dtype=float), np.asarray(baseline, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratios = np.where(base > 0, cand / np.where(base > 0, base, 1.0), np.where(cand > 0, np.inf, 1.0))
    return np.asarray(ratios, dtype=float)


def evidence(name: str, candidate: Sequence[float], baseline_name: str, baseline: Sequence[float]) -> Evidence:
    ratios = per_origin_ratios(candidate, baseline)
    cand, base = np.asarray(candidate, dtype=float), np.asarray(baseline, dtype=float)
    tied = np.isclose(cand, base, rtol=1e-9, atol=1e-12)
    wins = int(np.sum((cand < base) & ~tied))
    losses = int(np.sum((cand > base) & ~tied))
    ties = int(np.sum(tied))
    median = float(np.median(ratios)) if len(ratios) else math.nan
    return Evidence(name, baseline_name, median, median_interval(ratios), wins, losses, ties,
                    sign_test_p(wins, losses), wins_needed(wins + losses))


def shipped_baseline(baselines: Sequence[tuple[str, Sequence[float]]]) -> str:
    """The simplest baseline no other beats: baselines in order of simplicity, each later one replacing
    the one kept so far only when it passes the gate against it (naive and drift, nearly the same
    forecast on most histories, do not trade places on noise)."""
    kept_name, kept = baselines[0]
    for name, per_origin in baselines[1:]:
        if evidence(name, per_origin, kept_name, kept).passes:
            kept_name, kept = name, per_origin
    return kept_name


def against_every_baseline(name: str, candidate: Sequence[float],
                           baselines: Sequence[tuple[str, Sequence[float]]]) -> Evidence:
    """A candidate's evidence against the baseline it does worst against: it passes only if it passes
    against every baseline."""
    judged = [evidence(name, candidate, base_name, base) for base_name, base in baselines]
    return min(judged, key=lambda e: (e.passes, -e.median_ratio, -e.p_value))


def what_would_change(chosen: Evidence, shipped: bool) -> str:
    trials = chosen.wins + chosen.losses
    needed = chosen.wins_needed
    if shipped:
        return (f"{chosen.model} would stop shipping if its median ratio rose above {GATE_RATIO} or it won fewer "
                f"than {needed} of its {trials} untied origins")
    ratio_part = f"a median ratio <= {GATE_RATIO} (it has {chosen.median_ratio:.3f})"
    wins_part = (f"at least {needed} wins of {trials} untied origins (it has {chosen.wins})" if needed is not None
                 else f"more origins: {trials} untied origins cannot reach p <= {GATE_ALPHA} even with every win "
                      f"(it takes at least {MIN_TRIALS})")
    ratio_met = chosen.median_ratio <= GATE_RATIO
    wins_met = needed is not None and chosen.wins >= needed
    # Name only what is missing, and say which condition already holds, so the line reads as the way to ship.
    missing = [part for part, met in ((ratio_part, ratio_met), (wins_part, wins_met)) if not met]
    if not missing:  # both hold against this baseline: another baseline stopped it
        return f"to ship, {chosen.model} must also pass against every other baseline"
    held = ("; its median ratio already meets the bound" if ratio_met else
            "; its wins already meet the sign test" if wins_met else "")
    return f"to ship, {chosen.model} needs {' and '.join(missing)}{held}"


@dataclass(frozen=True)
class Choice:
    model: str
    baseline: str
    mase: float
    """Mean MASE over the origins of the shipped model."""
    baseline_mase: float
    wins: int
    origins: int
    shipped_candidate: bool
    reason: str
    evidence: Evidence | None = None
    """The shipped candidate's, or the best candidate's when a baseline ships (None without candidates)."""
    to_change: str = ""

    @property
    def power(self) -> Power:
        """The gate's reach on the untied origins of its evidence (all the origins without candidates)."""
        trials = self.evidence.wins + self.evidence.losses if self.evidence is not None else self.origins
        return gate_power(trials)


def choose(backtest: Backtest) -> Choice:
    """Apply the gate to a backtest's per-origin MASE: a candidate ships only if it passes against every
    baseline; otherwise the simplest baseline that no other beats ships."""
    models = backtest.models
    baselines = [(m.name, m.per_origin_mase) for m in models.values() if m.kind == "baseline"]
    base = models[shipped_baseline(baselines)]
    origins = len(backtest.origins)
    judged = [against_every_baseline(m.name, m.per_origin_mase, baselines)
              for m in models.values() if m.kind == "candidate"]
    ranked = sorted(judged, key=lambda e: (not e.passes, e.median_ratio, -e.wins))
    if ranked and ranked[0].passes:
        chosen = ranked[0]
        model = models[chosen.model]
        return Choice(model.name, chosen.baseline, model.mase, models[chosen.baseline].mase, chosen.wins, origins,
                      True, f"{model.name} ships: {chosen.summary()}", chosen, what_would_change(chosen, True))
    if not ranked:
        return Choice(base.name, base.name, base.mase, base.mase, 0, origins, False,
                      f"shipping the baseline {base.name}: no candidates")
    top = ranked[0]
    if top.wins_needed is None:  # no candidate could have passed: say so first, then what the best one did
        return Choice(base.name, base.name, base.mase, base.mase, top.wins, origins, False,
                      f"shipping the baseline {base.name}: {gate_power(top.wins + top.losses).text()} (best "
                      f"candidate: {top.model}, {top.summary()})", top, what_would_change(top, False))
    return Choice(base.name, base.name, base.mase, base.mase, top.wins, origins, False,
                  f"shipping the baseline {base.name}: no candidate passed the gate against every baseline "
                  f"(best: {top.model}, {top.summary()}; a candidate needs a median ratio <= {GATE_RATIO} and "
                  f"sign test p <= {GATE_ALPHA})", top, what_would_change(top, False))


def gate_summary(choice: Choice | None) -> GateSummary | None:
    """The gate's verdict with its evidence: the shipped candidate's, or the best candidate's when a
    baseline ships."""
    if choice is None:
        return None
    power = choice.power
    summary: GateSummary = {
        "max_ratio": GATE_RATIO, "alpha": GATE_ALPHA, "test": "one-sided sign test", "interval_level": INTERVAL_LEVEL,
        "shipped_candidate": choice.shipped_candidate, "to_change": choice.to_change, "can_pass": power.can_pass,
        "power": {"level": GATE_POWER, "untied_origins": power.trials, "wins_needed": power.wins_needed,
                  "detectable_win_rate": power.detectable_win_rate, "text": power.text()}}
    evidence = choice.evidence
    if evidence is not None:
        summary.update({"candidate": evidence.model, "baseline": evidence.baseline,
                        "median_ratio": _rounded(evidence.median_ratio),
                        "ratio_interval": [_rounded(evidence.interval[0]), _rounded(evidence.interval[1])],
                        "wins": evidence.wins, "losses": evidence.losses, "ties": evidence.ties,
                        "win_share": _rounded(evidence.wins / evidence.origins) if evidence.origins else None,
                        "p_value": _rounded(evidence.p_value), "wins_needed": evidence.wins_needed})
    return summary


def _rounded(value: float) -> float | None:
    return round(float(value), 4) if math.isfinite(value) else None
