"""Erlang B and C and the GPUs-needed rule, against values worked out by hand."""

from __future__ import annotations

import math
import time

import pytest

from greengpu.forecast.capacity import erlang_b, erlang_c, gpus_needed, servers_for_wait


def test_erlang_b_by_hand() -> None:
    assert erlang_b(0, 3.0) == 1.0  # no server: everything is blocked
    assert erlang_b(3, 0.0) == 0.0  # no load: nothing is blocked
    assert erlang_b(1, 1.0) == pytest.approx(0.5)  # A / (1 + A)
    assert erlang_b(2, 1.0) == pytest.approx(0.2)  # (A^2 / 2) / (1 + A + A^2 / 2)
    assert erlang_b(3, 2.0) == pytest.approx((8 / 6) / (1 + 2 + 2 + 8 / 6))


def test_erlang_c_edges() -> None:
    assert erlang_c(0, 0.5) == 1.0
    assert erlang_c(3, 3.0) == 1.0 and erlang_c(3, 3.5) == 1.0  # at or past saturation: everyone waits
    assert erlang_c(3, 0.0) == 0.0 and erlang_c(3, -1.0) == 0.0
    assert erlang_c(1, 0.5) == pytest.approx(0.5)  # M/M/1: P(wait) = utilisation


def test_servers_for_wait_is_the_smallest_count_that_meets_the_bound() -> None:
    assert servers_for_wait(0.0, 0.1) == 1
    # 2 Erlangs: C(3) = 4/9 = 0.44, C(4) = 0.17, C(5) = 0.06.
    assert servers_for_wait(2.0, 0.5) == 3
    assert servers_for_wait(2.0, 0.2) == 4
    assert servers_for_wait(2.0, 0.1) == 5
    assert erlang_c(4, 2.0) == pytest.approx(4 / 23)


def test_gpus_needed_rounds_up_and_adds_redundancy() -> None:
    assert gpus_needed(80.0, 0.8) == 100
    assert gpus_needed(80.1, 0.8) == 101
    assert gpus_needed(-5.0, 0.5, redundancy_gpus=2) == 2
    assert gpus_needed(10.0, 1.0, redundancy_gpus=3) == 13
    for bad in (0.0, 1.5, -0.1):
        with pytest.raises(ValueError, match=f"^target utilisation must be in \\(0, 1\\], got {bad}$"):
            gpus_needed(10.0, bad)


def test_the_wait_bound_is_inclusive_and_a_bound_of_one_needs_only_more_gpus_than_load() -> None:
    assert servers_for_wait(0.5, 0.5) == 1  # M/M/1 at 0.5: P(wait) = 0.5 meets a bound of 0.5
    assert servers_for_wait(5.0, 1.0) == 6  # any stable queue: one GPU more than the load
    assert servers_for_wait(5.5, 1.0) == 6


def _linear_servers_for_wait(offered_load: float, max_wait_probability: float) -> int:
    servers = max(1, math.floor(offered_load) + 1)
    while erlang_c(servers, offered_load) > max_wait_probability:
        servers += 1
    return servers


@pytest.mark.parametrize("load", [0.0, 0.4, 3.0, 8.0, 99.5, 999.0, 1000.5, 1800.0])
@pytest.mark.parametrize("bound", [0.001, 0.1, 0.5, 0.999])
def test_the_search_finds_what_adding_one_gpu_at_a_time_finds(load: float, bound: float) -> None:
    assert servers_for_wait(load, bound) == _linear_servers_for_wait(load, bound)


@pytest.mark.parametrize(("servers", "load"), [(1001, 950.0), (1500, 1400.0), (4000, 3990.0), (2000, 100.0)])
def test_erlang_b_closed_form_above_the_recursion_agrees_with_it(servers: int, load: float) -> None:
    recursion = 1.0
    for k in range(1, servers + 1):
        recursion = load * recursion / (k + load * recursion)
    assert erlang_b(servers, load) == pytest.approx(recursion, rel=1e-9, abs=1e-300)


def test_a_million_erlangs_are_sized_at_once() -> None:
    """A plan with a million-GPU project walked one O(servers) recursion per GPU added: minutes per day."""
    load = 999_999.5
    started = time.perf_counter()
    servers = servers_for_wait(load, 0.10)
    assert time.perf_counter() - started < 1.0
    assert erlang_c(servers, load) <= 0.10 < erlang_c(servers - 1, load)
    assert 1_000_000 < servers < 1_010_000  # the pooling economy: about 99.9% utilisation
