"""Trace readers on real-shaped files, including bad rows."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import public_data

from greengpu.errors import BadInput
from greengpu.sim.traces import parse_elapsed_s, read_trace

SACCT = """\
JobID|Submit|Start|End|Elapsed|AllocTRES|Account|QOS|Partition|State
1001|2024-03-01T09:00:00|2024-03-01T09:00:05|2024-03-01T10:00:05|01:00:00|billing=8,cpu=8,gres/gpu=2,mem=64G,node=1|vision|normal|gpu|COMPLETED
1001.batch|2024-03-01T09:00:05|2024-03-01T09:00:05|2024-03-01T10:00:05|01:00:00|cpu=8,mem=64G,node=1|vision|||COMPLETED
1001.extern|2024-03-01T09:00:05|2024-03-01T09:00:05|2024-03-01T10:00:05|01:00:00|billing=8,cpu=8,gres/gpu=2,mem=64G,node=1|vision|||COMPLETED
1002|2024-03-01T09:05:00|Unknown|Unknown|00:00:00||nlp|high|gpu|CANCELLED by 1000
1003|2024-03-01T08:00:00|2024-03-01T08:10:00|2024-03-02T10:13:04|1-02:03:04|billing=64,cpu=64,gres/gpu:a100=8,mem=512G,node=1|nlp|high|gpu|TIMEOUT
1004|2024-03-01T09:30:00|2024-03-01T09:30:01|2024-03-01T09:40:01|00:10:00|billing=4,cpu=4,mem=16G,node=1|vision|normal|cpu|COMPLETED
1005_3|2024-03-01T11:00:00|2024-03-01T11:00:00|2024-03-01T11:00:30|00:30|cpu=2,gres/gpu=1,node=1|infra|scavenger|gpu|FAILED
"""

PHILLY = """\
timestamp,duration,num_gpus,gpu_time,cluster
2017-10-09 07:01:55,66.0,1,66.0,11cb48
2017-10-09 06:13:03,2951.0,1,2951.0,6214e9
2017-09-29 07:58:32,860662.0,8,6885296.0,6c71a0
"""

CANONICAL = """\
job_id,submit_time,duration_s,gpus,tenant,priority,class,interruptible,checkpoint_interval_s,gpu_type
a,2024-01-01T00:00:00Z,3600,8,vision,1,training,,900,A100|H100
b,2024-01-01T00:10:00Z,60,0.25,nlp,0,inference,,,
c,600,120,2,nlp,,batch,false,,
"""


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_sacct_reader_takes_allocations_with_gpus_only(tmp_path: Path) -> None:
    result = read_trace(write(tmp_path, "sacct.txt", SACCT), "sacct")
    ids = [j.job_id for j in result.jobs]
    assert ids == ["slurm-1003", "slurm-1001", "slurm-1005_3"]
    by_id = {j.job_id: j for j in result.jobs}
    assert by_id["slurm-1001"].gpus == 2 and by_id["slurm-1001"].tenant == "vision"
    assert by_id["slurm-1001"].duration_s == 3600
    assert by_id["slurm-1003"].gpus == 8 and by_id["slurm-1003"].duration_s == 26 * 3600 + 3 * 60 + 4
    assert by_id["slurm-1003"].priority == 10  # QOS high
    assert by_id["slurm-1005_3"].priority == -20 and by_id["slurm-1005_3"].duration_s == 30
    assert result.ignored == 4  # two steps, one never-ran, one CPU-only


def test_sacct_bad_elapsed_names_file_line_and_column(tmp_path: Path) -> None:
    bad = SACCT.replace("|01:00:00|billing=8,cpu=8,gres/gpu=2", "|an hour|billing=8,cpu=8,gres/gpu=2", 1)
    path = write(tmp_path, "sacct.txt", bad)
    with pytest.raises(BadInput, match=r"sacct.txt:2: Elapsed: expected \[D-\]\[HH:\]MM:SS, got 'an hour'"):
        read_trace(path, "sacct")
    assert read_trace(path, "sacct", skip_bad_rows=True).skipped == 1


def test_philly_reader(tmp_path: Path) -> None:
    result = read_trace(write(tmp_path, "philly.csv", PHILLY), "philly")
    assert [j.tenant for j in result.jobs] == ["6c71a0", "6214e9", "11cb48"]  # sorted by submit time
    first = result.jobs[0]
    assert first.gpus == 8 and first.duration_s == 860662.0 and first.job_id == "philly-4"
    assert first.submit_time_s == pytest.approx(1506671912.0)  # 2017-09-29 07:58:32 UTC


@pytest.mark.parametrize(("row", "message"), [
    ("2017-10-09 07:01:55,-5,1,66.0,11cb48", "3: duration: must be positive, got -5"),
    ("2017-13-09 07:01:55,66.0,1,66.0,11cb48", "3: timestamp: not a timestamp"),
    ("2017-10-09 07:01:55,66.0,1.5,66.0,11cb48", "3: num_gpus: must be a whole number"),
    ("2017-10-09 07:01:55,66.0,1,66.0,", "3: cluster: empty"),
    ("2017-10-09 07:01:55,66.0,1,66.0,11cb48,extra", "3: row: 6 fields, header has 5"),
    ("2017-10-09 07:01:55,nan,1,66.0,11cb48", "3: duration: not a finite number"),
])
def test_philly_bad_rows(tmp_path: Path, row: str, message: str) -> None:
    lines = PHILLY.splitlines()
    lines.insert(2, row)
    path = write(tmp_path, "philly.csv", "\n".join(lines) + "\n")
    with pytest.raises(BadInput) as error:
        read_trace(path, "philly")
    assert str(error.value).startswith(f"{path}:{message}")
    skipped = read_trace(path, "philly", skip_bad_rows=True)
    assert skipped.skipped == 1 and len(skipped.jobs) == 3


def test_canonical_reader_defaults_and_constraints(tmp_path: Path) -> None:
    result = read_trace(write(tmp_path, "jobs.csv", CANONICAL), "csv")
    by_id = {j.job_id: j for j in result.jobs}
    assert [j.job_id for j in result.jobs] == ["c", "a", "b"]  # seconds 600 sorts before 2024
    assert by_id["a"].gpu_types == frozenset({"A100", "H100"}) and by_id["a"].checkpoint_interval_s == 900
    assert by_id["a"].interruptible and by_id["a"].priority == 1
    assert by_id["b"].gpus == 0.25 and not by_id["b"].interruptible  # inference defaults to not interruptible
    assert by_id["c"].job_class == "batch" and not by_id["c"].interruptible


@pytest.mark.parametrize(("edit", "message"), [
    (("a,2024", "a,soon"), "2: submit_time: not a timestamp or seconds: 'soon-01-01T00:00:00Z'"),
    ((",3600,8,", ",3600,0,"), "2: gpus: must be a whole number >= 1 or a fraction in (0, 1), got '0'"),
    (("training", "gaming"), "2: class: must be one of training, inference, interactive, batch"),
    ((",false,", ",maybe,"), "4: interruptible: expected true or false, got 'maybe'"),
    (("c,600", "a,600"), "4: job_id: duplicate job id 'a'"),
    (("vision,1,", "vision,high,"), "2: priority: not a whole number: 'high'"),
])
def test_canonical_bad_rows(tmp_path: Path, edit: tuple[str, str], message: str) -> None:
    path = write(tmp_path, "jobs.csv", CANONICAL.replace(*edit, 1))
    with pytest.raises(BadInput) as error:
        read_trace(path, "csv")
    assert str(error.value).startswith(f"{path}:{message}")


def test_wrong_format_is_named(tmp_path: Path) -> None:
    with pytest.raises(BadInput, match="missing column.*different --trace-format"):
        read_trace(write(tmp_path, "philly.csv", PHILLY), "csv")
    with pytest.raises(BadInput, match="unknown format 'parquet'"):
        read_trace(write(tmp_path, "x.csv", PHILLY), "parquet")
    with pytest.raises(BadInput, match="no such trace file"):
        read_trace(tmp_path / "missing.csv", "csv")


def test_elapsed_forms() -> None:
    assert parse_elapsed_s("00:30") == 30
    assert parse_elapsed_s("01:02:03") == 3723
    assert parse_elapsed_s("2-00:00:01") == 172801
    with pytest.raises(ValueError):
        parse_elapsed_s("1:2:3:4")


def test_public_philly_trace_reads_whole() -> None:
    path = public_data("philly-2017/philly.csv")
    result = read_trace(path, "philly")
    assert len(result.jobs) == 64_483 and result.skipped == 0
    assert len({j.tenant for j in result.jobs}) >= 11


def test_vectorised_and_exact_readers_agree_on_public_philly() -> None:
    path = public_data("philly-2017/philly.csv")
    fast = read_trace(path, "philly")
    exact = read_trace(path, "philly", vectorised=False)
    assert fast.jobs == exact.jobs


def test_vectorised_and_exact_readers_agree_on_canonical(tmp_path: Path) -> None:
    from greengpu.sim.fast_traces import fast_canonical

    text = (CANONICAL.replace(",training,,900,A100|H100", ",training,,900,").replace(",batch,false,,", ",batch,,,")
            .replace("c,600,", "c,2023-12-31T23:50:00+00:00,"))
    path = write(tmp_path, "jobs.csv", text)
    assert fast_canonical(path) is not None  # the vectorised path is really taken
    assert read_trace(path, "csv").jobs == read_trace(path, "csv", vectorised=False).jobs


def test_vectorised_and_exact_readers_agree_on_clean_sacct(tmp_path: Path) -> None:
    from greengpu.sim.fast_traces import fast_sacct

    clean = "\n".join(line for line in SACCT.splitlines()
                      if not any(mark in line for mark in ("1001.", "|1002|", "1002|", "1004|"))) + "\n"
    path = write(tmp_path, "sacct.txt", clean)
    assert fast_sacct(path) is not None  # the vectorised path is really taken
    fast = read_trace(path, "sacct")
    assert fast.jobs == read_trace(path, "sacct", vectorised=False).jobs
    assert [j.job_id for j in fast.jobs] == ["slurm-1003", "slurm-1001", "slurm-1005_3"]
