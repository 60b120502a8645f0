"""Each bad input that once gave a traceback, a hang or a wrong acceptance: now one line and exit 2 (or a
clean run), through the command line. One test per case found when greengpu was tried as an attacker would."""

from __future__ import annotations

import json
import math
import os
import re
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from greengpu.cli import main

REPO = Path(__file__).resolve().parents[3]
CLUSTER = (REPO / "examples" / "lab-a100.cluster.yaml").read_text(encoding="utf-8")
TRACE = REPO / "examples" / "lab-a100.week.trace.csv"
FAST_S = 5.0
"""What 'quickly' means for a refusal (they take milliseconds; the margin is for a loaded machine)."""


def cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def refused(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    """Run greengpu; assert exit 2 with exactly one line on stderr and no traceback; that line."""
    code, _, err = cli(capsys, *args)
    assert code == 2, err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    return err.strip()


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def cluster_file(tmp_path: Path, text: str = CLUSTER) -> str:
    return str(write(tmp_path, "cluster.yaml", text))


# ------------------------------------------------------------------ YAML: aliases, dates, numbers

def billion_laughs(levels: int = 9) -> str:
    lines = ['a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, levels + 1)]
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("reader", ["inventory", "policy", "settings", "agent classes"])
def test_billion_laughs_is_refused_quickly_by_every_yaml_reader(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], reader: str) -> None:
    bomb = str(write(tmp_path, "bomb.yaml", billion_laughs()))
    args = {"inventory": ["check", "--cluster", bomb],
            "policy": ["check", "--cluster", cluster_file(tmp_path), "--policy", bomb],
            "settings": ["plan", "--settings", bomb],
            "agent classes": ["agent", "--backend", "fake", "--once", "--classes", bomb, "--journal",
                              str(tmp_path / "j.jsonl"), "--listen", "127.0.0.1:0"]}[reader]
    started = time.perf_counter()
    line = refused(capsys, *args)
    assert time.perf_counter() - started < FAST_S
    assert "bomb.yaml:" in line and "expands to more than 500,000 values" in line


def test_anchors_and_merge_keys_within_the_limits_still_work(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = re.sub(r"(?m)^  a100x4: .*$", "  a100x4: &big", CLUSTER)
    text = re.sub(r"(?m)^  a100x2: .*$", "  a100x2:\n    <<: *big", text)
    assert "<<: *big" in text
    code, out, err = cli(capsys, "check", "--cluster", cluster_file(tmp_path, text), "--json")
    assert code == 0, err
    assert json.loads(out)["gpus"] == 10  # the merged mapping's own keys (gpus: 2) win over the merged ones


def test_a_recursive_alias_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    line = refused(capsys, "check", "--cluster", cluster_file(tmp_path, "site: &s [*s]\n"))
    assert "nested more than 64 levels deep" in line


@pytest.mark.parametrize("reader", ["inventory", "policy", "settings"])
def test_an_unquoted_invalid_date_anywhere_is_located(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], reader: str) -> None:
    if reader == "inventory":
        path = cluster_file(tmp_path, CLUSTER.replace("  currency: EUR", "  currency: EUR\n  name: 2024-02-30"))
        args, key = ["check", "--cluster", path], "cluster.yaml:7: site.name:"
    elif reader == "policy":
        policy = write(tmp_path, "p.yaml", "name: p\ndescription: 2024-02-30\n")
        args, key = ["check", "--cluster", cluster_file(tmp_path), "--policy", str(policy)], "p.yaml:2: description:"
    else:
        settings = write(tmp_path, "s.yaml", "history: h.csv\nprojects:\n  - {name: x, gpus: 1, start: 2024-02-30}\n")
        args, key = ["plan", "--settings", str(settings)], "s.yaml:3: projects[0].start:"
    line = refused(capsys, *args)
    assert key in line and "not a valid date: '2024-02-30'" in line


@pytest.mark.parametrize(("key", "value", "words"), [
    ("gpus", "1" + "0" * 400, "must be at most 64, got 1000"),
    ("gpus", ".inf", "expected a whole number, got a number inf"),
    ("gpu_max_w", ".inf", "not a finite number: inf"),
    ("gpu_max_w", ".nan", "not a finite number: nan"),
    ("gpu_max_w", "1" + "0" * 400, "out of range (at most 1e+15 in magnitude): 1000"),
    ("gpus", "1" + "0" * 5000, "not a valid value: '1000"),
])
def test_huge_and_non_finite_numbers_in_an_inventory(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], key: str, value: str, words: str) -> None:
    text = re.sub(rf"(?m)^(    {key}:) \d+", lambda match: f"{match.group(1)} {value}", CLUSTER, count=1)
    line = refused(capsys, "check", "--cluster", cluster_file(tmp_path, text))
    assert f"node_types.a100x4.{key}:" in line and words in line
    assert len(line) < 300  # the value is cut short, never printed in full


@pytest.mark.parametrize(("setting", "words"), [
    ("wake_retries: 1e30", "sleep.wake_retries: must be at most 1000000000"),
    ("wake_retries: 1.0e+30", "sleep.wake_retries: must be at most 1000000000"),
    ("wake_timeout_s: 1e300", "sleep.wake_timeout_s: out of range"),
    ("idle_timeout_s: 1.0e+12", "sleep.idle_timeout_s: must be at most 3.16224e+08"),
    ("min_asleep_s: " + "9" * 400, "sleep.min_asleep_s: out of range"),
])
def test_policy_numbers_out_of_range_are_refused(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], setting: str, words: str) -> None:
    policy = write(tmp_path, "p.yaml", f"sleep:\n  {setting}\n")
    line = refused(capsys, "check", "--cluster", cluster_file(tmp_path), "--policy", str(policy))
    assert "p.yaml:2:" in line and words in line


# ------------------------------------------------------------------ inventory checks

def test_a_mac_range_that_runs_into_multicast_addresses(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = CLUSTER.replace('mac: "3c:ec:ef:10:20:01"', 'mac: "3c:ff:ff:ff:ff:ff"')
    line = refused(capsys, "check", "--cluster", cluster_file(tmp_path, text))
    assert "nodes[0].mac: MAC range from 3c:ff:ff:ff:ff:ff for 2 nodes runs into multicast addresses" in line


@pytest.mark.parametrize("name", ["-oProxyCommand", "-x[1-2]", ".hidden"])
def test_node_names_must_start_with_a_letter_or_digit(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str) -> None:
    text = CLUSTER.replace("name: lab-ws1", f"name: '{name}'")
    line = refused(capsys, "check", "--cluster", cluster_file(tmp_path, text))
    assert "nodes[1].name: invalid node name" in line and "starting with a letter or digit" in line


@pytest.mark.parametrize("host", ["a b;reboot", "-H", "bmc_1", "x" * 70])
def test_ipmi_host_is_checked(tmp_path: Path, capsys: pytest.CaptureFixture[str], host: str) -> None:
    text = CLUSTER.replace('    mac: "3c:ec:ef:10:20:10"', f'    mac: "3c:ec:ef:10:20:10"\n    ipmi_host: "{host}"')
    line = refused(capsys, "check", "--cluster", cluster_file(tmp_path, text))
    assert "nodes[1].ipmi_host: not an IP address or host name" in line


@pytest.mark.parametrize("host", ["10.0.0.5", "bmc-ws1.lab.example", "fe80::1"])
def test_good_ipmi_hosts_pass(tmp_path: Path, capsys: pytest.CaptureFixture[str], host: str) -> None:
    text = CLUSTER.replace('    mac: "3c:ec:ef:10:20:10"', f'    mac: "3c:ec:ef:10:20:10"\n    ipmi_host: "{host}"')
    code, _, err = cli(capsys, "check", "--cluster", cluster_file(tmp_path, text), "--json")
    assert code == 0, err


# ------------------------------------------------------------------ tariff and carbon series

@pytest.mark.parametrize(("content", "words"), [
    (b"time,price_per_kwh\n\xff\xfe,0.1\n", "tariff.csv: not UTF-8 text"),
    (b"time,price_per_kwh\nnan,0.1\n", "tariff.csv:2: time: not a finite number: 'nan'"),
    (b"time,price_per_kwh\n2024-01-01T00:00:00Z,0.1\ninf,0.2\n", "tariff.csv:3: time: not a finite number: 'inf'"),
    (b"time,price_per_kwh\n2024-01-01T00:00:00Z,1e300\n", "tariff.csv:2: price_per_kwh: out of range"),
    (b"time,price_per_kwh\n9999-01-01T00:00:00Z,0.1\n", "tariff.csv:2: time: outside the supported time range"),
    (b"time,price_per_kwh\n2024-01-01T00:00:00Z,0.1\x00\n", "tariff.csv"),
])
def test_bad_tariff_series(tmp_path: Path, capsys: pytest.CaptureFixture[str], content: bytes, words: str) -> None:
    (tmp_path / "tariff.csv").write_bytes(content)
    text = CLUSTER.replace("price_per_kwh: 0.21", "tariff_csv: tariff.csv")
    line = refused(capsys, "check", "--cluster", cluster_file(tmp_path, text))
    assert words in line


def test_a_series_path_naming_a_directory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "carbon").mkdir()
    text = CLUSTER.replace("carbon_g_per_kwh: 380", "carbon_csv: carbon")
    assert "carbon: is a directory" in refused(capsys, "check", "--cluster", cluster_file(tmp_path, text))


# ------------------------------------------------------------------ traces

HEADERS = {"csv": "job_id,submit_time,duration_s,gpus,tenant",
           "philly": "timestamp,duration,num_gpus,gpu_time,cluster",
           "sacct": "JobID|Submit|Start|End|Elapsed|AllocTRES|Account|QOS|Partition|State"}


@pytest.mark.parametrize("trace_format", list(HEADERS))
def test_a_missing_column_is_one_line_in_every_format(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], trace_format: str) -> None:
    delimiter = "|" if trace_format == "sacct" else ","
    columns = HEADERS[trace_format].split(delimiter)
    row = {"csv": "j1,0,100,1,t", "philly": "2017-10-09 07:01:55,66.0,1,66.0,c1",
           "sacct": "1|2024-03-01T09:00:00|||01:00:00|gres/gpu=1|a|normal|gpu|COMPLETED"}[trace_format]
    cells = row.split(delimiter)
    dropped = 1 if trace_format != "sacct" else 4  # a required column (submit time, duration, Elapsed)
    header = delimiter.join(c for i, c in enumerate(columns) if i != dropped)
    data = delimiter.join(c for i, c in enumerate(cells) if i != dropped)
    trace = write(tmp_path, "t.txt", f"{header}\n{data}\n")
    line = refused(capsys, "simulate", "--trace", str(trace), "--trace-format", trace_format, "--cluster",
                   cluster_file(tmp_path), "--policy", "default", "--json")
    assert f"t.txt:1: missing column(s) {columns[dropped]}" in line


@pytest.mark.parametrize("read_as", ["philly", "sacct"])
def test_the_wrong_trace_format(tmp_path: Path, capsys: pytest.CaptureFixture[str], read_as: str) -> None:
    line = refused(capsys, "simulate", "--trace", str(TRACE), "--trace-format", read_as, "--cluster",
                   cluster_file(tmp_path), "--policy", "default")
    assert "missing column(s)" in line and "is this a different --trace-format?" in line


@pytest.mark.parametrize(("row", "words"), [
    ("j1,nan,100,1,t", "t.csv:2: submit_time: not a finite number: 'nan'"),
    ("j1,inf,100,1,t", "t.csv:2: submit_time: not a finite number: 'inf'"),
    ("j1,1e300,100,1,t", "t.csv:2: submit_time: out of range"),
    ("j1,9999-12-31T00:00:00Z,100,1,t", "t.csv:2: submit_time: outside the supported time range"),
    ("j1,0,1e300,1,t", "t.csv:2: duration_s: must be at most 3.16224e+08 s (ten years)"),
    ("j1,0,inf,1,t", "t.csv:2: duration_s: not a finite number"),
    ("j1,0,100,1" + "0" * 400 + ",t", "t.csv:2: gpus: more than 1,000,000 GPUs"),
    ("j1,0,100,1,t,9" + "9" * 400, "t.csv:2: priority: must be within"),
])
def test_non_finite_and_huge_trace_values(tmp_path: Path, capsys: pytest.CaptureFixture[str], row: str,
                                          words: str) -> None:
    header = "job_id,submit_time,duration_s,gpus,tenant" + (",priority" if row.count(",") == 5 else "")
    trace = write(tmp_path, "t.csv", f"{header}\n{row}\n")
    started = time.perf_counter()
    line = refused(capsys, "simulate", "--trace", str(trace), "--cluster", cluster_file(tmp_path), "--policy",
                   "default", "--json")
    assert time.perf_counter() - started < FAST_S
    assert words in line and len(line) < 300


def test_sacct_elapsed_of_twenty_digits(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = write(tmp_path, "s.txt", HEADERS["sacct"] + "\n1|2024-03-01T09:00:00|||99999999999999999999-00:00:00|"
                  "gres/gpu=1|a|normal|gpu|COMPLETED\n")
    line = refused(capsys, "simulate", "--trace", str(trace), "--trace-format", "sacct", "--cluster",
                   cluster_file(tmp_path), "--policy", "default")
    assert "s.txt:2: Elapsed: longer than 3.16224e+08 s (ten years)" in line


def test_a_trace_spanning_centuries_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = write(tmp_path, "t.csv", "job_id,submit_time,duration_s,gpus,tenant\na,0,60,1,t\n"
                  "b,2024-01-01T00:00:00Z,60,1,t\n")
    assert "submit times span 54 years" in refused(capsys, "simulate", "--trace", str(trace), "--cluster",
                                                   cluster_file(tmp_path), "--policy", "default")


# ------------------------------------------------------------------ jobs that can never run

def never_fitting_trace(tmp_path: Path) -> Path:
    return write(tmp_path, "t.csv", "job_id,submit_time,duration_s,gpus,tenant\nhuge,0,100,64,t\nsmall,60,100,1,t\n")


def test_a_job_larger_than_the_cluster_is_refused_up_front(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    started = time.perf_counter()
    line = refused(capsys, "simulate", "--trace", str(never_fitting_trace(tmp_path)), "--cluster",
                   cluster_file(tmp_path), "--policy", "default", "--json")
    assert time.perf_counter() - started < FAST_S
    assert "t.csv: job huge asks for 64 GPUs, more than the cluster's 10 A100 GPUs" in line
    assert "--skip-bad-rows leaves such jobs out" in line


def test_skip_bad_rows_leaves_a_never_fitting_job_out(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = cli(capsys, "simulate", "--trace", str(never_fitting_trace(tmp_path)), "--cluster",
                         cluster_file(tmp_path), "--policy", "default", "--skip-bad-rows", "--json")
    assert code == 0, err
    [result] = json.loads(out)["results"]
    assert (result["jobs"], result["jobs_completed"], result["skipped_rows"]) == (1, 1, 1)
    assert "left out 1 job(s) that can never start" in err


def test_the_simulator_stops_when_only_unplaceable_work_is_left() -> None:
    """The safety net behind the up-front check: a job no placement exists for never hangs a replay."""
    from greengpu.config.inventory import load_cluster_text
    from greengpu.config.policy import load_policy
    from greengpu.model import Job
    from greengpu.sim.engine import Simulation

    cluster = load_cluster_text(CLUSTER)
    jobs = [Job("small", "t", 1, 100.0, 0.0), Job("huge", "t", 64, 100.0, 10.0), Job("late", "t", 2, 50.0, 20.0)]
    started = time.perf_counter()
    result = Simulation(cluster, load_policy("default"), jobs).run().to_json()
    assert time.perf_counter() - started < FAST_S
    assert (result["jobs_completed"], result["jobs_not_started"], result["unplaceable_jobs"]) == (2, 1, ["huge"])


def test_a_nan_submit_time_never_reaches_the_event_heap() -> None:
    from greengpu.config.inventory import load_cluster_text
    from greengpu.config.policy import load_policy
    from greengpu.errors import BadInput
    from greengpu.model import Job
    from greengpu.sim.engine import Simulation

    with pytest.raises(BadInput, match="job j: submit time and duration must be finite"):
        Simulation(load_cluster_text(CLUSTER), load_policy("default"), [Job("j", "t", 1, 100.0, math.nan)])


def test_plan_refuses_a_trace_the_cluster_can_never_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rows = "".join(f"j{day},{day * 86_400},3600,1,t\n" for day in range(20))
    trace = write(tmp_path, "t.csv", "job_id,submit_time,duration_s,gpus,tenant\nhuge,0,100,64,t\n" + rows)
    line = refused(capsys, "plan", "--trace", str(trace), "--cluster", cluster_file(tmp_path))
    assert "job huge asks for 64 GPUs" in line


# ------------------------------------------------------------------ plan inputs

def history(tmp_path: Path, value: str = "3", days: int = 16) -> Path:
    rows = ["time,gpus_busy"] + [f"2024-01-{1 + h // 24:02d}T{h % 24:02d}:00:00Z,{value if h == 5 else 3 + h % 4}"
                                 for h in range(days * 24)]
    return write(tmp_path, "h.csv", "\n".join(rows) + "\n")


@pytest.mark.parametrize(("value", "words"), [
    ("inf", "h.csv:7: gpus_busy: expected a finite number of GPUs up to 1,000,000, got 'inf'"),
    ("1e300", "h.csv:7: gpus_busy: expected a finite number of GPUs up to 1,000,000, got '1e300'"),
    ("nan", "h.csv:7: gpus_busy: expected a number of GPUs >= 0, got 'nan'"),
])
def test_non_finite_plan_history(tmp_path: Path, capsys: pytest.CaptureFixture[str], value: str, words: str) -> None:
    assert words in refused(capsys, "plan", "--history", str(history(tmp_path, value)), "--models", "baselines")


def test_plan_history_naming_a_directory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    line = refused(capsys, "plan", "--history", str(tmp_path), "--models", "baselines")
    assert line == f"greengpu: {tmp_path}: is a directory, expected a usage history CSV file"


def test_plan_history_in_the_year_9999(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, "h.csv", "time,gpus_busy\n2024-01-01T00:00:00Z,1\n9999-01-01T00:00:00Z,1\n")
    assert "h.csv:3: time: not a date and time in 1900 to 2199" in refused(capsys, "plan", "--history", str(path))


def test_a_history_spanning_centuries_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, "h.csv", "time,gpus_busy\n1900-01-01T00:00:00Z,1\n2199-01-01T00:00:00Z,1\n")
    started = time.perf_counter()
    assert "h.csv: the history spans 299 years" in refused(capsys, "plan", "--history", str(path))
    assert time.perf_counter() - started < FAST_S


def test_a_huge_horizon_is_refused_before_any_work(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    started = time.perf_counter()
    line = refused(capsys, "plan", "--history", str(history(tmp_path)), "--horizon", "99999999d", "--models",
                   "baselines")
    assert time.perf_counter() - started < FAST_S
    assert line == "greengpu: --horizon '99999999d': at most 1830 days (five years), got 99,999,999"


@pytest.mark.parametrize("key", ["horizon", "lead_time", "growth_window"])
def test_a_settings_duration_error_names_the_settings_file_not_a_flag(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], key: str) -> None:
    settings = write(tmp_path, "plan.yaml", f"history: {history(tmp_path)}\n{key}: 99999999d\n")
    line = refused(capsys, "plan", "--settings", str(settings), "--models", "baselines")
    assert f"plan.yaml:2: {key}: at most 1830 days (five years)" in line and "--" not in line


# ------------------------------------------------------------------ the ledger and greengpu report

@pytest.fixture
def ledger(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    path = tmp_path / "ledger.db"
    code, _, err = cli(capsys, "simulate", "--trace", str(TRACE), "--cluster", cluster_file(tmp_path), "--policy",
                       "default", "--policy", "always-on", "--ledger", str(path), "--json")
    assert code == 0, err
    assert f"wrote runs 1 (default), 2 (always-on) to {path}" in err  # simulate --ledger says which runs
    return path


def test_report_of_the_year_9999(ledger: Path, capsys: pytest.CaptureFixture[str]) -> None:
    line = refused(capsys, "report", "--ledger", str(ledger), "--month", "9999-12", "--run", "1")
    assert line == "greengpu: --month: '9999-12' is outside the supported years 1900 to 2199"


@pytest.mark.parametrize(("change", "words"), [
    ("UPDATE meta SET value = 'one' WHERE key = 'schema_version'", "ledger schema version 'one'"),
    ("UPDATE meta SET value = '1.5' WHERE key = 'schema_version'", "ledger schema version '1.5'"),
    ("ALTER TABLE runs RENAME COLUMN currency TO money", "not a greengpu ledger of schema 3 (table runs has columns"),
    ("ALTER TABLE node_hours ADD COLUMN extra REAL", "(table node_hours has columns"),
    ("DROP TABLE job_runs", "not a greengpu ledger (no table job_runs)"),
    ("UPDATE tenant_hours SET cost = 9e999", "run 1: not a finite number in the ledger"),
])
def test_a_ledger_with_odd_columns_or_version(ledger: Path, capsys: pytest.CaptureFixture[str], change: str,
                                              words: str) -> None:
    with sqlite3.connect(ledger) as connection:
        connection.execute(change)
    before = ledger.read_bytes()
    line = refused(capsys, "report", "--ledger", str(ledger), "--month", "2024-01", "--run", "1")
    assert words in line
    assert ledger.read_bytes() == before


def test_report_never_writes_to_a_foreign_database(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    other = tmp_path / "app.db"
    with sqlite3.connect(other) as connection:
        connection.execute("CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT)")
        connection.execute("INSERT INTO users (name) VALUES ('ada')")
    before = other.read_bytes()
    line = refused(capsys, "report", "--ledger", str(other), "--month", "2024-01")
    assert line == f"greengpu: {other}: not a greengpu ledger (no table meta)"
    assert other.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["app.db"]  # no -journal or -wal left beside it


def test_report_refuses_an_empty_file_and_leaves_it_empty(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    empty = tmp_path / "empty.db"
    empty.write_bytes(b"")
    assert refused(capsys, "report", "--ledger", str(empty), "--month", "2024-01").endswith(
        "empty file, not a greengpu ledger")
    assert empty.read_bytes() == b""


def test_report_reads_a_read_only_ledger(ledger: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ledger.chmod(0o444)
    try:
        code, out, err = cli(capsys, "report", "--ledger", str(ledger), "--month", "2024-01", "--run", "2", "--json")
    finally:
        ledger.chmod(0o644)
    assert code == 0, err
    assert json.loads(out)["policy"] == "always-on"


def test_simulate_refuses_to_add_a_run_to_a_foreign_database(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    other = tmp_path / "app.db"
    with sqlite3.connect(other) as connection:
        connection.execute("CREATE TABLE users (id INTEGER PRIMARY KEY)")
    before = other.read_bytes()
    line = refused(capsys, "simulate", "--trace", str(TRACE), "--cluster", cluster_file(tmp_path), "--policy",
                   "default", "--ledger", str(other))
    assert "not a greengpu ledger (no table meta)" in line
    assert other.read_bytes() == before


# ------------------------------------------------------------------ the agent's journal

def test_damaged_journal_lines_are_skipped_and_reported(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    from greengpu.control.agent.journal import Journal

    path = tmp_path / "j.jsonl"
    path.write_text('null\n[]\n{"x": 1}\n{"event": "start", "gpus": 2}\n'
                    '{"event": "set_limit", "gpu": 0, "uuid": "GPU-a", "limit_w": 150, "previous_w": 300}\n'
                    '{"event": "set_limit", "gpu": "one", "uuid": "GPU-b", "previous_w": 300}\n')
    journal = Journal(path)
    with caplog.at_level("WARNING", logger="greengpu.journal"):
        [touched] = journal.left_changed()
    assert (touched.index, touched.uuid, touched.original_limit_w) == (0, "GPU-a", 300)
    assert journal.damaged == ["line 1: not an object: null", "line 2: not an object: []", "line 3: no event",
                               "line 6: no GPU index"]
    assert "skipped line 1: not an object: null" in caplog.text


def test_a_torn_last_line_does_not_swallow_the_next_entry(tmp_path: Path) -> None:
    from greengpu.control.agent.journal import Journal

    journal = Journal(tmp_path / "j.jsonl")
    journal.append("start", gpus=1)
    with journal.path.open("a", encoding="utf-8") as out:
        out.write('{"event": "set_limit", "gpu": 0, "uu')  # the agent died mid-write
    journal.append("set_limit", gpu=0, uuid="GPU-a", limit_w=200.0, previous_w=300.0)
    [touched] = journal.left_changed()
    assert (touched.uuid, touched.original_limit_w) == ("GPU-a", 300.0)
    assert journal.damaged == ["line 2: not JSON (a torn write?)"]


def test_an_entry_appended_to_a_torn_line_by_an_older_agent_is_recovered(tmp_path: Path) -> None:
    from greengpu.control.agent.journal import Journal

    path = tmp_path / "j.jsonl"
    path.write_text('{"event": "start", "gpus": 1}\n{"event": "set_li'
                    '{"event": "set_limit", "gpu": 0, "uuid": "GPU-a", "previous_w": 250}\n')
    journal = Journal(path)
    [touched] = journal.left_changed()
    assert touched.original_limit_w == 250
    assert journal.damaged == ["line 2: torn entry before a whole one (the whole one kept)"]


def test_the_agent_restores_despite_a_damaged_journal(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    journal = tmp_path / "j.jsonl"
    journal.write_text('null\n[]\n{"no": "event"}\n{"event": "start", "gpus": 2}\n'
                       '{"event": "set_limit", "gpu": 0, "uuid": "GPU-fake-0000", "limit_w": 150, "previous_w": 400}\n'
                       '{"event": "set_li')
    code, _, err = cli(capsys, "agent", "--backend", "fake", "--fake-gpus", "2xA100", "--once", "--journal",
                       str(journal), "--listen", "127.0.0.1:0", "--dry-run")
    assert code == 0, err
    assert "skipped line 1: not an object: null" in err
    assert "GPU 0: would restore 400 W after an unclean exit" in err  # the restore ran despite the damage


def test_a_journal_path_naming_a_directory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    line = refused(capsys, "agent", "--backend", "fake", "--once", "--journal", str(tmp_path), "--listen",
                   "127.0.0.1:0")
    assert line == f"greengpu: --journal: {tmp_path} is a directory, expected the agent's journal file"


@pytest.mark.parametrize("reader", ["inventory", "policy", "settings", "history", "trace", "ledger", "journal"])
def test_a_device_that_never_ends_is_refused_quickly(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], reader: str) -> None:
    """/dev/zero reports no size and never ends: no reader may read it forever."""
    zero = "/dev/zero"
    args = {"inventory": ["check", "--cluster", zero],
            "policy": ["check", "--cluster", cluster_file(tmp_path), "--policy", zero],
            "settings": ["plan", "--settings", zero],
            "history": ["plan", "--history", zero],
            "trace": ["simulate", "--trace", zero, "--cluster", cluster_file(tmp_path), "--policy", "default"],
            "ledger": ["report", "--ledger", zero, "--month", "2024-01"],
            "journal": ["agent", "--backend", "fake", "--once", "--journal", zero, "--listen", "127.0.0.1:0"]}[reader]
    started = time.perf_counter()
    line = refused(capsys, *args)
    assert time.perf_counter() - started < FAST_S
    assert zero in line


def test_an_overlong_journal_line_is_skipped_without_holding_it(tmp_path: Path) -> None:
    from greengpu.control.agent.journal import Journal

    path = tmp_path / "j.jsonl"
    path.write_text('{"event": "start"}\n' + "x" * 300_000 + '\n{"event": "set_limit", "gpu": 0, "uuid": "GPU-a", '
                    '"previous_w": 300}\n')
    journal = Journal(path)
    [touched] = journal.left_changed()
    assert touched.original_limit_w == 300
    assert journal.damaged == ["line 2: longer than 65,536 bytes"]


# ------------------------------------------------------------------ the command line

def test_environment_variables_named_in_help_are_read(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GREENGPU_CHECK_CLUSTER", cluster_file(tmp_path))
    monkeypatch.setenv("GREENGPU_CHECK_JSON", "1")
    code, out, err = cli(capsys, "check")
    assert code == 0, err
    assert json.loads(out)["gpus"] == 10
    code, out, _ = cli(capsys, "check", "--help")
    assert "GREENGPU_CHECK_CLUSTER" in out and "GREENGPU_CHECK_POLICY" in out


def test_every_option_names_its_variable() -> None:
    import click

    from greengpu.cli import cli as root

    def walk(command: click.Command, path: str) -> list[tuple[str, str | None]]:
        found = [(f"{path} {max(p.opts, key=len)}", p.envvar) for p in command.params
                 if isinstance(p, click.Option) and p.expose_value]
        if isinstance(command, click.Group):
            for name, sub in command.commands.items():
                found += walk(sub, f"{path} {name}")
        return found

    options = walk(root, "greengpu")
    assert len(options) > 60
    for option, variable in options:
        expected = "GREENGPU_" + "_".join(option.split()[1:]).replace("--", "").replace("-", "_").upper()
        assert variable == expected, option


@pytest.mark.parametrize("group", ["slurm", "kube"])
def test_group_subcommand_help_needs_no_config_file(tmp_path: Path, group: str) -> None:
    missing = tmp_path / "nowhere.yaml"
    env = {**os.environ, "PYTHONPATH": str(REPO), f"GREENGPU_{group.upper()}_CLUSTER": str(missing)}
    out = subprocess.run([sys.executable, "-m", "greengpu.cli", group, "verify", "--help"], capture_output=True,
                         text=True, env=env, timeout=60, check=False)
    assert out.returncode == 0, out.stderr
    assert f"Usage: greengpu {group} verify" in out.stdout


def test_quiet_silences_notes_and_verbose_logs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = never_fitting_trace(tmp_path)
    args = ["simulate", "--trace", str(trace), "--cluster", cluster_file(tmp_path), "--policy", "default",
            "--skip-bad-rows", "--json"]
    code, out, err = cli(capsys, "-q", *args)
    assert code == 0 and err == ""
    json.loads(out)
    code, _, err = cli(capsys, *args)
    assert "left out 1 job(s)" in err


def test_verbose_and_quiet_set_the_log_level_of_that_invocation_only(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import logging

    journal = tmp_path / "j.jsonl"
    journal.write_text("null\n")
    agent = ["agent", "--backend", "fake", "--fake-gpus", "1xA100", "--once", "--journal", str(journal),
             "--listen", "127.0.0.1:0", "--dry-run"]
    ours = logging.getLogger("greengpu")
    before = ours.level
    code, _, err = cli(capsys, "-q", *agent)
    assert code == 0 and "skipped line 1" not in err  # a warning: -q leaves only errors
    assert ours.level == before  # put back when the invocation ended
    code, _, err = cli(capsys, *agent)
    assert code == 0 and "skipped line 1" in err  # the next invocation is not quiet

    class LevelWhenLogged(logging.Handler):
        """greengpu's level as each record of the invocation is logged."""
        def __init__(self) -> None:
            super().__init__()
            self.levels: set[int] = set()

        def emit(self, record: logging.LogRecord) -> None:
            self.levels.add(ours.level)

    seen = LevelWhenLogged()
    logging.getLogger().addHandler(seen)
    try:
        assert cli(capsys, "-vv", *agent)[0] == 0
    finally:
        logging.getLogger().removeHandler(seen)
    assert seen.levels == {logging.DEBUG} and ours.level == before
    missing = ["report", "--ledger", str(tmp_path / "none.db"), "--month", "2024-01"]
    assert cli(capsys, "-vv", *missing)[0] == 2
    assert cli(capsys, *missing)[0] == 2
    assert ours.level == before


def test_report_out_never_overwrites_the_ledger(ledger: Path, capsys: pytest.CaptureFixture[str]) -> None:
    before = ledger.read_bytes()
    line = refused(capsys, "report", "--ledger", str(ledger), "--month", "2024-01", "--run", "1", "--out",
                   str(ledger.parent / "." / ledger.name))
    assert "is the ledger itself; a report never writes to its input" in line
    assert ledger.read_bytes() == before


def test_report_json_flag(ledger: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = cli(capsys, "report", "--ledger", str(ledger), "--month", "2024-01", "--run", "1", "--json")
    assert code == 0, err
    assert json.loads(out)["run_id"] == 1
    assert "contradict" in refused(capsys, "report", "--ledger", str(ledger), "--month", "2024-01", "--run", "1",
                                   "--json", "--format", "csv")


@pytest.mark.parametrize("command", ["simulate", "plan"])
def test_progress_goes_to_a_terminal_stderr_never_into_json_stdout(tmp_path: Path, command: str) -> None:
    """stderr is a pseudo-terminal, stdout a pipe: the display shows on the terminal, stdout stays JSON."""
    import pty

    if command == "simulate":
        args = ["simulate", "--trace", str(TRACE), "--cluster", cluster_file(tmp_path), "--policy", "default",
                "--json"]
    else:
        args = ["plan", "--history", str(history(tmp_path)), "--models", "baselines", "--json"]
    leader, follower = pty.openpty()
    process = subprocess.Popen([sys.executable, "-m", "greengpu.cli", *args], stdout=subprocess.PIPE,
                               stderr=follower, env={**os.environ, "PYTHONPATH": str(REPO), "TERM": "xterm"})
    os.close(follower)
    terminal = b""
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # the child closed the terminal
            break
        if not chunk:
            break
        terminal += chunk
    stdout, _ = process.communicate(timeout=120)
    os.close(leader)
    assert process.returncode == 0, terminal.decode(errors="replace")
    json.loads(stdout)  # nothing but the JSON object on stdout
    assert b"\x1b[" in terminal  # the display drew on the terminal


def _numeric_options() -> list[tuple[str, str, str]]:
    import click

    from greengpu.cli import cli as root

    found = []
    for name, command in root.commands.items():
        if isinstance(command, click.Group):
            continue  # a group's subcommands parse their options after the group's setup
        for param in command.params:
            if isinstance(param, click.Option) and isinstance(param.type, (click.types.FloatParamType,
                                                                            click.types.IntParamType)):
                kind = "float" if isinstance(param.type, click.types.FloatParamType) else "int"
                found.append((name, max(param.opts, key=len), kind))
    return found


@pytest.mark.parametrize(("command", "option", "kind"), _numeric_options())
def test_numeric_flags_refuse_nan_inf_and_huge_values(
        capsys: pytest.CaptureFixture[str], command: str, option: str, kind: str) -> None:
    """click's FloatRange let nan through (every comparison with nan is false): `--target-utilisation nan`."""
    values = ["nan", "inf", "-inf", "1e300"] if kind == "float" else ["9" * 40]
    for value in values:
        line = refused(capsys, command, option, value)
        assert f"Invalid value for '{option}'" in line, line
        assert "not a finite number" in line or "out of range" in line or "not in the range" in line, line
