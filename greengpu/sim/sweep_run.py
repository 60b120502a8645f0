"""Running a sweep's replays: in this process (`workers=1`), on a local process pool (the default: every core),
or on a Ray cluster (`ray_address`, the `ray` extra). Results are kept in the store as each replay finishes
and returned in the grid's order, whatever order they finished in.
"""

from __future__ import annotations

import concurrent.futures
import logging
import multiprocessing
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from greengpu.errors import BadInput
from greengpu.sim.sweep import ReplaySpec, run_replay
from greengpu.sim.sweep_store import SweepStore

Progress = Callable[[str], None]


@dataclass
class SweepOutcome:
    """What a sweep did: results in grid order, how many came from the store, how long it took."""

    results: list[dict[str, Any]]
    from_store: int
    ran: int
    wall_s: float


def _serial(specs: list[ReplaySpec]) -> Iterator[tuple[ReplaySpec, dict[str, Any]]]:
    for spec in specs:
        yield spec, run_replay(spec)


def _pool(specs: list[ReplaySpec], workers: int) -> Iterator[tuple[ReplaySpec, dict[str, Any]]]:
    # fork: a worker starts with greengpu, the trace and the inventory already loaded (a spawned one spends
    # about a second importing). Only from a process without other threads: a lock another thread holds at the
    # fork would stay held in the child forever; then forkserver, slower to start but safe.
    context = multiprocessing.get_context("fork" if threading.active_count() == 1 else "forkserver")
    with concurrent.futures.ProcessPoolExecutor(max_workers=workers, mp_context=context) as pool:
        futures = {pool.submit(run_replay, spec): spec for spec in specs}
        try:
            for future in concurrent.futures.as_completed(futures):
                yield futures[future], future.result()
        except BaseException:
            for future in futures:
                future.cancel()
            raise


def check_ray_address(address: str, timeout_s: float = 5.0) -> None:
    """BadInput unless something answers on the address's TCP port: Ray's own client retries an address that
    is down for minutes, printing a warning every few seconds."""
    rest = address.split("://", 1)[-1]
    host, _, port = rest.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise BadInput(f"--ray: {address[:80]!r} is not HOST:PORT (or ray://HOST:PORT) of a Ray head")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s).close()
    except OSError as error:
        raise BadInput(f"--ray: nothing answers at {address[:80]} ({error.strerror or error})") from None


def _ray(specs: list[ReplaySpec], address: str) -> Iterator[tuple[ReplaySpec, dict[str, Any]]]:
    check_ray_address(address)
    import ray  # the 'ray' extra; missing, the command line names it

    try:
        ray.init(address=address, logging_level=logging.ERROR, log_to_driver=False, include_dashboard=False)
    except (ConnectionError, RuntimeError, ValueError) as error:
        raise BadInput(f"--ray: cannot join the Ray cluster at {address[:80]}: "
                       f"{' '.join(str(error).split())[:160]}") from None
    try:
        remote = ray.remote(num_cpus=1, max_retries=2)(run_replay)
        pending = {remote.remote(spec): spec for spec in specs}
        while pending:
            finished, _ = ray.wait(list(pending), num_returns=1)
            for ref in finished:
                spec = pending.pop(ref)
                try:
                    yield spec, ray.get(ref)
                except ray.exceptions.RayTaskError as error:
                    cause = error.cause if isinstance(error.cause, BadInput) else None
                    if cause is not None:
                        raise cause from None
                    raise
    finally:
        ray.shutdown()


def run_sweep(specs: list[ReplaySpec], store: SweepStore, workers: int, ray_address: str | None = None,
              progress: Progress = lambda line: None) -> SweepOutcome:
    """Run every replay of `specs` not already in `store`, keeping each result as it finishes."""
    started = time.perf_counter()
    done = store.done(specs)
    todo = [spec for spec in dict.fromkeys(specs) if spec.key() not in done]
    if done:
        progress(f"sweep: {len(specs) - len(todo)} of {len(specs)} replays already in {store.path}")
    where = f"the Ray cluster at {ray_address}" if ray_address else (
        "this process" if workers == 1 or len(todo) <= 1 else f"{min(workers, len(todo))} local processes")
    if todo:
        progress(f"sweep: running {len(todo)} replays on {where}")
    if not todo:
        runner: Iterator[tuple[ReplaySpec, dict[str, Any]]] = iter(())
    elif ray_address:
        runner = _ray(todo, ray_address)
    elif workers == 1 or len(todo) == 1:
        runner = _serial(todo)
    else:
        runner = _pool(todo, min(workers, len(todo)))
    for count, (spec, result) in enumerate(runner, start=1):
        store.put(spec, result)
        done[spec.key()] = result
        wall = result.get("sim_wall_s")
        took = f" ({wall:.1f} s)" if isinstance(wall, float) else ""
        progress(f"sweep: {count}/{len(todo)} done: {spec.label()}{took}")
    return SweepOutcome(results=[done[spec.key()] for spec in specs], from_store=len(specs) - len(todo),
                        ran=len(todo), wall_s=time.perf_counter() - started)
