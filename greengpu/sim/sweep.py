"""A sweep: the replays of a grid (policies x months x seeds) of one trace on one cluster, each a pure function
of its spec, so it gives the same figures wherever it runs (serially, in a process pool, on a Ray cluster) and
a finished one never needs to run again (docs/FLEET.md).

A spec names its inputs by path and by the SHA-256 of their bytes: a worker refuses a file that changed (or
that another machine of a Ray cluster holds in another version), and the result store is keyed by the spec's
hash, so a rerun after an interruption skips every replay already stored.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from greengpu import __version__
from greengpu.errors import BadInput

UNTIMED = ("sim_wall_s",)
"""Result keys that are not a function of the spec (the wall time a replay took): left out of comparisons."""


@dataclass(frozen=True)
class ReplaySpec:
    """One replay of a sweep. `month` ('' for the whole trace) keeps the jobs submitted in that UTC month."""

    trace: str
    trace_format: str
    trace_sha256: str
    cluster: str
    cluster_sha256: str
    policy: str
    policy_sha256: str  # '' for a built-in policy (its text ships with this version)
    month: str = ""
    seed: int = 0
    until_s: float | None = None
    skip_bad_rows: bool = False
    version: str = __version__

    def key(self) -> str:
        """The hash that names this replay in the result store."""
        text = json.dumps(asdict(self), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()

    def label(self) -> str:
        """How progress lines name it."""
        month = f" {self.month}" if self.month else ""
        return f"{Path(self.policy).stem if self.policy_sha256 else self.policy}{month} seed {self.seed}"


def file_sha256(path: str, flag: str) -> str:
    """The SHA-256 of a file's bytes; a one-line BadInput when it cannot be read."""
    digest = hashlib.sha256()
    try:
        with Path(path).open("rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
    except OSError as error:
        raise BadInput(f"{flag}: cannot read {path}: {error.strerror or error}") from None
    return digest.hexdigest()


def grid(trace: str, trace_format: str, cluster: str, policies: tuple[str, ...], months: tuple[str, ...],
         seeds: tuple[int, ...], until_s: float | None, skip_bad_rows: bool) -> list[ReplaySpec]:
    """Every replay of the sweep, in a fixed order (policy, then month, then seed): the output's order."""
    from greengpu.config.policy import BUILTIN_POLICIES

    trace_sha = file_sha256(trace, "--trace")
    cluster_sha = file_sha256(cluster, "--cluster")
    specs = []
    for policy in dict.fromkeys(policies):
        policy_sha = "" if policy in BUILTIN_POLICIES else file_sha256(policy, "--policy")
        for month in dict.fromkeys(months or ("",)):
            for seed in dict.fromkeys(seeds or (0,)):
                specs.append(ReplaySpec(trace=str(Path(trace).resolve()), trace_format=trace_format,
                                        trace_sha256=trace_sha, cluster=str(Path(cluster).resolve()),
                                        cluster_sha256=cluster_sha,
                                        policy=policy if not policy_sha else str(Path(policy).resolve()),
                                        policy_sha256=policy_sha, month=month, seed=seed, until_s=until_s,
                                        skip_bad_rows=skip_bad_rows))
    return specs


def _checked(path: str, sha256: str, what: str) -> None:
    if file_sha256(path, what) != sha256:
        raise BadInput(f"{what}: {path} is not the file the sweep was planned with (it changed, or this machine "
                       "holds another version of it)")


@lru_cache(maxsize=8)
def _inputs(trace: str, trace_format: str, trace_sha: str, cluster: str, cluster_sha: str,
            skip_bad_rows: bool) -> tuple[Any, tuple[Any, ...]]:
    """The cluster and the jobs that can run on it, read once per worker process (many replays share them)."""
    from greengpu.config.inventory import load_cluster
    from greengpu.sim.feasibility import split_never_fitting
    from greengpu.sim.traces import REPLAY_SPAN_S, read_trace

    _checked(trace, trace_sha, "--trace")
    _checked(cluster, cluster_sha, "--cluster")
    loaded = load_cluster(cluster)
    read = read_trace(trace, trace_format, skip_bad_rows=skip_bad_rows, max_span_s=REPLAY_SPAN_S)
    jobs, never = split_never_fitting(read.jobs, loaded)
    if never and not skip_bad_rows:
        more = f" (and {len(never) - 1} more such jobs)" if len(never) > 1 else ""
        raise BadInput(f"{trace}: {never[0]} ({cluster}){more}; --skip-bad-rows leaves such jobs out")
    return loaded, tuple(jobs)


def load_inputs(spec: ReplaySpec) -> int:
    """Read (and keep, for this process and the workers it forks) the spec's cluster and jobs: a bad trace is
    one line before any worker starts. The number of jobs that can run."""
    _, jobs = _inputs(spec.trace, spec.trace_format, spec.trace_sha256, spec.cluster, spec.cluster_sha256,
                      spec.skip_bad_rows)
    return len(jobs)


def run_replay(spec: ReplaySpec) -> dict[str, Any]:
    """The `greengpu simulate --json` result of one replay (plus its month and seed): pure in its spec."""
    from greengpu.accounting.ledger import month_bounds_s
    from greengpu.config.policy import load_policy
    from greengpu.sim.engine import Simulation

    cluster, jobs = _inputs(spec.trace, spec.trace_format, spec.trace_sha256, spec.cluster, spec.cluster_sha256,
                            spec.skip_bad_rows)
    if spec.policy_sha256:
        _checked(spec.policy, spec.policy_sha256, "--policy")
    policy = load_policy(spec.policy)
    chosen = list(jobs)
    if spec.month:
        start_s, end_s = month_bounds_s(spec.month)
        chosen = [job for job in jobs if start_s <= job.submit_time_s < end_s]
    if not chosen:
        result: dict[str, Any] = {"policy": policy.name, "jobs": 0, "empty": True}
    else:
        result = Simulation(cluster, policy, chosen, until_s=spec.until_s, seed=spec.seed).run().to_json()
    result["month"] = spec.month or None
    result["seed"] = spec.seed
    return result


def timed_free(result: dict[str, Any]) -> dict[str, Any]:
    """A result without its wall time: what must be identical wherever the replay ran."""
    return {k: v for k, v in result.items() if k not in UNTIMED}
