"""Capacity sizing: GPUs needed from a calibrated demand quantile, checked against an Erlang-C wait bound.

Erlang C (M/M/c) gives the probability that a job waits when `offered_load` GPUs' worth of work arrives
on `servers` GPUs. It shows the pooling economy the utilisation rule of thumb hides: for P(wait) <=
10%, 8 busy GPUs need 13 (62% utilisation), 100 need 115 (87%), 1,000 need 1,046 (96%).
"""

from __future__ import annotations

import math

RECURSION_MAX_SERVERS = 1_000
"""Up to this many GPUs Erlang B comes from its recursion (O(servers)); above, from the Poisson form."""


def erlang_b(servers: int, offered_load: float) -> float:
    """Blocking probability, by the numerically stable recursion B(k) = A B(k-1) / (k + A B(k-1)).

    Above `RECURSION_MAX_SERVERS` it is the same quantity in closed form, P(N = c) / P(N <= c) for a
    Poisson N of mean A: a plan for a million GPUs would otherwise walk a million steps per guess."""
    if servers > RECURSION_MAX_SERVERS and offered_load > 0:
        from scipy.special import gammaincc  # the planning extra's (statsmodels needs it too)

        log_pmf = -offered_load + servers * math.log(offered_load) - math.lgamma(servers + 1)
        cdf = float(gammaincc(servers + 1, offered_load))
        return min(1.0, math.exp(log_pmf) / cdf) if cdf > 0 else 1.0
    blocking = 1.0
    for k in range(1, servers + 1):
        blocking = offered_load * blocking / (k + offered_load * blocking)
    return blocking


def erlang_c(servers: int, offered_load: float) -> float:
    """Probability that an arriving job waits, with `servers` GPUs and `offered_load` Erlangs (busy GPUs)."""
    if servers <= 0 or offered_load >= servers:
        return 1.0
    if offered_load <= 0:
        return 0.0
    blocking = erlang_b(servers, offered_load)
    return servers * blocking / (servers - offered_load * (1.0 - blocking))


def servers_for_wait(offered_load: float, max_wait_probability: float) -> int:
    """The fewest GPUs for which P(wait) is at most `max_wait_probability`.

    P(wait) falls as GPUs are added, so the answer is found by doubling the step until the bound holds,
    then halving the interval: a few dozen Erlang C values, not one per GPU between the load and the
    answer (for a million Erlangs that was thousands of O(servers) recursions, minutes per plan day)."""
    low = max(1, math.floor(offered_load) + 1)
    if erlang_c(low, offered_load) <= max_wait_probability:
        return low
    step = 1
    while erlang_c(low + step, offered_load) > max_wait_probability:
        low += step  # P(wait) at `low` is still above the bound
        step *= 2
    high = low + step  # the bound holds here
    while high - low > 1:
        middle = (low + high) // 2
        if erlang_c(middle, offered_load) <= max_wait_probability:
            high = middle
        else:
            low = middle
    return high


def gpus_needed(peak_demand_gpus: float, target_utilisation: float, redundancy_gpus: int = 0) -> int:
    """ceil(peak / target utilisation) + redundancy (common targets: 0.80 dev, 0.65 production, 0.50 HA)."""
    if not 0 < target_utilisation <= 1:
        raise ValueError(f"target utilisation must be in (0, 1], got {target_utilisation}")
    return math.ceil(max(0.0, peak_demand_gpus) / target_utilisation - 1e-9) + redundancy_gpus
