"""Replays spread over two forked worker processes, for the on-demand benchmarks (stress, Pareto).

Forked, so that a worker starts with the inputs the parent loaded before the pool (a trace and its cluster):
the caller loads them first. Two workers: the machines the benchmarks are measured on have two cores.
"""

from __future__ import annotations

import concurrent.futures
import multiprocessing
import os
from collections.abc import Callable, Iterable
from typing import TypeVar

Result = TypeVar("Result")


def forked_map(work: Callable[..., Result], *arguments: Iterable[object]) -> list[Result]:
    """`work` over the zipped `arguments`, in their order, on up to two forked workers."""
    workers = min(2, os.cpu_count() or 1)
    with concurrent.futures.ProcessPoolExecutor(max_workers=workers,
                                                mp_context=multiprocessing.get_context("fork")) as pool:
        return list(pool.map(work, *arguments))
