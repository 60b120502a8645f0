"""The year-long example trace (examples/a100-lab.year.trace.csv) is what its seeded generator makes, reads
as a canonical trace, and has the shapes docs/EXAMPLE-A100-LAB.md promises: a working week with quiet
nights and weekends, 1-8 GPU training with 2-node gangs, MIG inference and time-sliced notebooks."""

from __future__ import annotations

import csv
import importlib.util
import sys
from collections import Counter
from datetime import datetime
from pathlib import Path

import pytest

from greengpu.sim.traces import read_trace

ROOT = Path(__file__).resolve().parents[3]
TRACE = ROOT / "examples/a100-lab.year.trace.csv"


def _generator():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("make_a100_lab_year_trace",
                                                  ROOT / "scripts/make_a100_lab_year_trace.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _rows() -> list[dict[str, str]]:
    with TRACE.open() as handle:
        return list(csv.DictReader(handle))


def test_the_shipped_trace_is_what_the_seeded_generator_makes(tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    gen = _generator()
    out = tmp_path / "year.csv"
    monkeypatch.setattr(sys, "argv", ["make", "--out", str(out)])
    gen.main()
    assert out.read_bytes() == TRACE.read_bytes()
    monkeypatch.setattr(sys, "argv", ["make", "--out", str(tmp_path / "other.csv"), "--seed", "7"])
    gen.main()
    assert (tmp_path / "other.csv").read_bytes() != TRACE.read_bytes()  # the seed matters


def test_it_reads_as_a_canonical_trace_of_the_right_size() -> None:
    read = read_trace(TRACE)
    assert 10_000 <= len(read.jobs) <= 25_000 and read.skipped == 0
    rows = _rows()
    assert list(rows[0]) == ["job_id", "submit_time", "duration_s", "gpus", "tenant", "priority", "class",
                             "checkpoint_interval_s", "gpu_profile"]
    assert "gpu_util" not in rows[0]


def test_its_shapes() -> None:
    rows = _rows()
    moments = [datetime.fromisoformat(r["submit_time"].replace("Z", "+00:00")) for r in rows]
    assert moments[0].year == 2025 and moments[-1].year == 2025 and moments == sorted(moments)
    night = sum(2 <= m.hour < 6 for m in moments) / len(rows)
    weekend = sum(m.weekday() >= 5 for m in moments) / len(rows)
    working = sum(m.weekday() < 5 and 9 <= m.hour < 18 for m in moments) / len(rows)
    assert night < 0.03 and weekend < 0.10 and working > 0.6
    profiles = Counter(r["gpu_profile"] for r in rows)
    assert set(profiles) == {"", "timeslice", "1g.5gb", "2g.10gb", "3g.20gb"}
    for row in rows:
        if row["gpu_profile"]:
            assert row["gpus"] == "1"  # one MIG instance or one time-slice replica
        if row["gpu_profile"] == "timeslice":
            assert row["class"] == "interactive"
        elif row["gpu_profile"]:
            assert (row["class"], row["tenant"]) == ("inference", "inference")
    training = [r for r in rows if r["class"] == "training"]
    assert {r["gpus"] for r in training} == {"1", "2", "4", "8"}  # 8: a gang of two 4-GPU nodes
    assert all(r["checkpoint_interval_s"] for r in training if int(r["duration_s"]) > 2 * 3600)
    assert max(int(r["duration_s"]) for r in training) <= 7 * 86400
