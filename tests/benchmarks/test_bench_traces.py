"""Trace-reading benchmark: 100,000 rows of each format (goal: under 2 s each on a 2-core machine).

Run on demand:  python3 -m pytest tests/benchmarks/test_bench_traces.py -s
"""

from __future__ import annotations

import random
import time
from pathlib import Path

import pytest

from greengpu.sim.traces import read_trace

ROWS = 100_000


def _canonical(path: Path, rng: random.Random) -> None:
    lines = ["job_id,submit_time,duration_s,gpus,tenant,priority,class,checkpoint_interval_s"]
    for i in range(ROWS):
        lines.append(f"j{i},2024-01-{1 + i % 28:02d}T{i % 24:02d}:{i % 60:02d}:00Z,{rng.randint(60, 90000)},"
                     f"{rng.choice([1, 1, 2, 4, 8, 0.5])},vc{i % 15},{i % 3},training,{rng.choice(['', '900'])}")
    path.write_text("\n".join(lines) + "\n")


def _philly(path: Path, rng: random.Random) -> None:
    lines = ["timestamp,duration,num_gpus,gpu_time,cluster"]
    for i in range(ROWS):
        gpus = rng.choice([1, 1, 1, 2, 4, 8])
        duration = float(rng.randint(1, 90000))
        lines.append(f"2017-10-{1 + i % 28:02d} {i % 24:02d}:{i % 60:02d}:{i % 59:02d},{duration},{gpus},"
                     f"{duration * gpus},vc{i % 15}")
    path.write_text("\n".join(lines) + "\n")


def _sacct(path: Path, rng: random.Random) -> None:
    lines = ["JobID|Submit|Start|End|Elapsed|AllocTRES|Account|QOS|Partition|State"]
    for i in range(ROWS):
        lines.append(f"{i}|2024-03-{1 + i % 28:02d}T{i % 24:02d}:00:00|Unknown|Unknown|"
                     f"{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}:{rng.randint(1, 59):02d}|"
                     f"billing=8,cpu=8,gres/gpu={rng.choice([1, 2, 4, 8])},mem=64G,node=1|"
                     f"acct{i % 20}|normal|gpu|COMPLETED")
    path.write_text("\n".join(lines) + "\n")


@pytest.mark.parametrize(("fmt", "writer"), [("csv", _canonical), ("philly", _philly), ("sacct", _sacct)])
def test_read_100k_rows(tmp_path: Path, fmt: str, writer) -> None:  # noqa: ANN001
    path = tmp_path / f"trace.{fmt}"
    writer(path, random.Random(3))
    start = time.perf_counter()
    result = read_trace(path, fmt)
    elapsed = time.perf_counter() - start
    print(f"\n[traces] {fmt:6s}: {ROWS:,} rows in {elapsed:.2f} s ({ROWS / elapsed:,.0f} rows/s)")
    assert len(result.jobs) == ROWS
    assert elapsed < 2.0
