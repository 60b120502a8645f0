"""The inventory's `mig:` and `time_slicing:` blocks and the trace's `gpu_profile` column: what they read, and
bad values as one line naming file, line and key, exit 2 (docs/GPU-SHARING.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from greengpu.cli import main
from greengpu.config.inventory import load_cluster, load_cluster_text
from greengpu.model import MigConfig, TimeSlicing

BASE = """\
site: {pue: 1.3, price_per_kwh: 0.12, carbon_g_per_kwh: 380}
node_types:
  a100-4x:
    gpus: 4
    gpu_model: A100-SXM4-40GB
    gpu_idle_w: 52
    gpu_max_w: 400
    host_idle_w: 300
    mig:
      gpus: 2
      profiles: [1g.5gb, 3g.20gb]
      reconfigure_s: 90
    time_slicing:
      gpus: 1
      replicas: 4
      classes: [interactive, batch]
nodes:
  - {name: "n[1-2]", type: a100-4x}
tenants:
  lab: {quota_gpus: 4}
"""


def test_the_blocks_read_into_the_node_type() -> None:
    node_type = load_cluster_text(BASE, "lab.yaml").node_types["a100-4x"]
    assert node_type.mig == MigConfig(2, ("1g.5gb", "3g.20gb"), 90.0)
    assert node_type.time_slicing == TimeSlicing(1, 4, frozenset({"interactive", "batch"}))


def test_the_example_cluster(repo: Path) -> None:
    cluster = load_cluster(repo / "examples" / "a100-lab.cluster.yaml")
    assert cluster.total_gpus == 20 and len(cluster.nodes) == 5
    mig = [n for n in cluster.nodes if cluster.node_type(n).mig]
    sliced = [n for n in cluster.nodes if cluster.node_type(n).time_slicing]
    assert len(mig) == 2 and all(cluster.node_type(n).mig.gpus == 2 for n in mig)  # type: ignore[union-attr]
    assert len(sliced) == 1 and cluster.node_type(sliced[0]).time_slicing == TimeSlicing(
        2, 8, frozenset({"interactive", "batch"}))
    peak_w = sum(cluster.node_type(n).node_peak_w for n in cluster.nodes)
    assert 8_000 <= peak_w <= 10_000


@pytest.mark.parametrize(("old", "new", "line", "key", "words"), [
    ("profiles: [1g.5gb, 3g.20gb]", "profiles: [1g.5gb, 9g.99gb]", 11,
     "node_types.a100-4x.mig.profiles[1]", "unknown MIG profile '9g.99gb'"),
    ("profiles: [1g.5gb, 3g.20gb]", "profiles: [1g.5gb, 3g.40gb]", 11,
     "node_types.a100-4x.mig.profiles[1]", "3g.40gb is not a profile of A100-SXM4-40GB"),
    ("      gpus: 2\n", "      gpus: 5\n", 10, "node_types.a100-4x.mig.gpus",
     "5 MIG GPUs, more than the node type's 4"),
    ("    gpu_model: A100-SXM4-40GB", "    gpu_model: V100", 9, "node_types.a100-4x.mig",
     "gpu_model 'V100' does not support MIG"),
    ("      gpus: 1\n", "      gpus: 3\n", 14, "node_types.a100-4x.time_slicing.gpus",
     "3 time-sliced GPUs, more than the 2 left after 2 MIG GPUs"),
    ("classes: [interactive, batch]", "classes: [interactive, training]", 16,
     "node_types.a100-4x.time_slicing.classes[1]", "training jobs may not share a GPU by time-slicing"),
    ("      replicas: 4", "      replicas: 1", 15, "node_types.a100-4x.time_slicing.replicas", "at least 2"),
    ("      reconfigure_s: 90", "      reconfigure_s: -5", 12, "node_types.a100-4x.mig.reconfigure_s", "at least"),
    ("      reconfigure_s: 90", "      reconfigure: 90", 12, "node_types.a100-4x.mig.reconfigure", "unknown key"),
])
def test_bad_blocks_give_one_line_and_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str], old: str,
                                             new: str, line: int, key: str, words: str) -> None:
    assert old in BASE
    path = tmp_path / "lab.yaml"
    path.write_text(BASE.replace(old, new, 1), encoding="utf-8")
    code = main(["check", "--cluster", str(path), "--policy", "default"])
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1 and "Traceback" not in err
    assert f"{path}:{line}: {key}:" in err and words in err, err


TRACE_HEAD = "job_id,submit_time,duration_s,gpus,tenant,class,gpu_profile\n"


@pytest.mark.parametrize(("row", "words"), [
    ("j1,0,60,1,lab,batch,2g.99gb", "gpu_profile: unknown profile '2g.99gb'"),
    ("j1,0,60,2,lab,batch,1g.5gb", "gpus: a 1g.5gb job takes one instance: gpus must be 1, got 2"),
    ("j1,0,60,0.5,lab,batch,timeslice", "gpus: a timeslice job takes one instance: gpus must be 1, got 0.5"),
])
def test_bad_profiles_in_a_trace(tmp_path: Path, capsys: pytest.CaptureFixture[str], row: str, words: str) -> None:
    cluster = tmp_path / "lab.yaml"
    cluster.write_text(BASE, encoding="utf-8")
    trace = tmp_path / "t.csv"
    trace.write_text(TRACE_HEAD + row + "\n", encoding="utf-8")
    code = main(["simulate", "--cluster", str(cluster), "--trace", str(trace), "--policy", "always-on"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1, err
    assert f"{trace}:2" in err and words in err, err


def test_a_profile_no_gpu_offers_is_named_before_the_replay(tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    cluster = tmp_path / "lab.yaml"
    cluster.write_text(BASE, encoding="utf-8")
    trace = tmp_path / "t.csv"
    trace.write_text(TRACE_HEAD + "j1,0,60,1,lab,batch,2g.10gb\nj2,0,60,1,lab,training,timeslice\n",
                     encoding="utf-8")
    code = main(["simulate", "--cluster", str(cluster), "--trace", str(trace), "--policy", "always-on"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1, err
    assert "job j1 asks for a 2g.10gb MIG instance; no MIG GPU offers that profile" in err


def test_a_valid_profile_trace_reads(tmp_path: Path) -> None:
    from greengpu.sim.traces import read_trace

    trace = tmp_path / "t.csv"
    trace.write_text(TRACE_HEAD + "j1,0,60,1,lab,batch,1g.5gb\nj2,0,60,1,lab,interactive,timeslice\n"
                     "j3,0,60,0.5,lab,batch,\n", encoding="utf-8")
    jobs = read_trace(trace).jobs
    assert [(j.gpu_profile, j.gpus) for j in jobs] == [("1g.5gb", 1), ("timeslice", 1), ("", 0.5)]


def test_vectorised_and_exact_readers_agree_on_profiles(repo: Path) -> None:
    from greengpu.sim.fast_traces import fast_canonical
    from greengpu.sim.traces import read_trace

    path = repo / "examples" / "a100-lab.day.trace.csv"
    assert fast_canonical(path) is not None  # the vectorised path is really taken
    fast = read_trace(path, "csv").jobs
    assert fast == read_trace(path, "csv", vectorised=False).jobs
    assert sum(1 for j in fast if j.gpu_profile) == 28
