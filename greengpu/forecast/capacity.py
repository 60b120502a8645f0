"""Capacity sizing: GPUs needed from a calibrated demand quantile, checked against an Erlang-C wait bound.

Erlang C (M/M/c) gives the probability that a job waits when `offered_load` GPUs' worth of work arrives
on `servers` GPUs. It shows the pooling economy the utilisation rule of thumb hides: for P(wait) <=
10%, 8 busy GPUs need 13 (62% utilisation), 100 need 115 (87%), 1,000 need 1,046 (96%).
"""

from __future__ import annotations

import math


def erlang_b(servers: int, offered_load: float) -> float:
    """Blocking probability, by the numerically stable recursion B(k) = A B(k-1) / (k + A B(k-1))."""
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
    """The fewest GPUs for which P(wait) is at most `max_wait_probability`."""
    servers = max(1, math.floor(offered_load) + 1)
    while erlang_c(servers, offered_load) > max_wait_probability:
        servers += 1
    return servers


def gpus_needed(peak_demand_gpus: float, target_utilisation: float, redundancy_gpus: int = 0) -> int:
    """ceil(peak / target utilisation) + redundancy (common targets: 0.80 dev, 0.65 production, 0.50 HA)."""
    if not 0 < target_utilisation <= 1:
        raise ValueError(f"target utilisation must be in (0, 1], got {target_utilisation}")
    return math.ceil(max(0.0, peak_demand_gpus) / target_utilisation - 1e-9) + redundancy_gpus
