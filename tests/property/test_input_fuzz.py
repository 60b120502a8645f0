"""Every reader, fuzzed through the command line's exit path: any input gives exit 0, or exactly one line
on stderr and exit 2, within a time bound, never a traceback (and `report` never writes to its ledger).

Readers: cluster inventory, policy, the three trace formats (csv, philly, sacct), the tariff and carbon
series an inventory names, plan history, plan settings, the SQLite ledger and the agent's journal. Each
starts from a valid input and mutates it (cells, lines, bytes, structure) with the values that broke
greengpu before: nan, inf, 1e300, a 400-digit integer, 2024-02-30, the year 9999, YAML aliases, non-UTF-8
bytes. The number of inputs tried is in docs/INPUTS.md; CI (CI=true) tries a fixed set (derandomized).
"""

from __future__ import annotations

import contextlib
import copy
import io
import json
import os
import shutil
import signal
import sqlite3
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from documents import key_paths
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st
from hypothesis.control import currently_in_test_context

from greengpu.cli import main

IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
TIME_BOUND_S = 10.0
"""Longest one input may take (a reader's work on these small inputs takes milliseconds)."""
HANG_S = 30
"""After this long an input counts as a hang: the alarm turns it into a failure instead of a stuck suite."""


SCALE = int(os.environ.get("GREENGPU_FUZZ_SCALE", "1"))
"""Multiply every test's inputs (GREENGPU_FUZZ_SCALE=20 for a long search before a release)."""


def fuzz(examples: int) -> Callable[[Any], Any]:
    """Hypothesis settings of these tests: bounded examples, no deadline (the time bound is asserted
    per input), and in CI a fixed, derandomized set of inputs with no example database."""
    return settings(max_examples=examples * SCALE, deadline=None, derandomize=IN_CI, database=None if IN_CI else
                    settings.default.database, suppress_health_check=[HealthCheck.too_slow,
                                                                      HealthCheck.function_scoped_fixture])


@contextlib.contextmanager
def _alarm(seconds: int) -> Iterator[None]:
    def hang(signum: int, frame: Any) -> None:
        raise TimeoutError(f"no answer within {seconds} s: a hang")

    previous = signal.signal(signal.SIGALRM, hang)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def run_cli(*args: str) -> tuple[int, str, str]:
    """`greengpu ARGS` in this process, as the console script runs it: (exit code, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    started = time.perf_counter()
    with _alarm(HANG_S), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(args))
    elapsed = time.perf_counter() - started
    assert elapsed < TIME_BOUND_S, f"greengpu {' '.join(args)} took {elapsed:.1f} s"
    return code, out.getvalue(), err.getvalue()


def _refuse_constant(name: str) -> None:
    raise AssertionError(f"non-standard JSON number {name} in the output: an input was wrongly accepted")


def assert_clean(code: int, err: str, *, allowed: tuple[int, ...] = (0, 2), out: str = "") -> None:
    """Exit 0, or exit 2 with exactly one line on stderr; never a traceback. A JSON answer holds no
    NaN or Infinity (a non-finite input that got through would show there)."""
    if code == 0 and out.strip():
        json.loads(out, parse_constant=_refuse_constant)
    if currently_in_test_context():
        event(f"exit {code}")  # --hypothesis-show-statistics shows how many inputs passed and were refused
    assert "Traceback" not in err, err
    assert code in allowed, f"exit {code}: {err}"
    if code == 2:
        assert err.count("\n") == 1 and err.endswith("\n"), f"expected one line, got {err!r}"
        assert err.startswith("greengpu"), err


@pytest.fixture(scope="module")
def workdir() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="greengpu-fuzz-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


# ------------------------------------------------------------------ values and mutations

ODD_TOKENS = [
    "nan", "NaN", "inf", "-inf", "Infinity", "1e300", "-1e300", "1e30", "1" + "0" * 400, "-1", "0", "0.0", "-0",
    "2024-02-30", "2024-13-01", "9999-12-31T23:59:59Z", "0001-01-01", "1677-09-21", "2262-04-12", "24:61",
    "99999999999999999999-00:00:00", "1-99:99:99", "gres/gpu=99999999999999999999", "",
    " ", "\t", '"', "'", ",", "|", ";", "\\", "\x00", "\ufeff", "é", "\u202e", "-oProxyCommand=x", "*a", "&a",
    "<<", "!!python/object:os.system", "[", "]", "{", "}", "?", "- ", ": ", "#", "%", "@", "`", "~", "null",
    "true", "yes", "off", "0x1F", "0o17", "1_000", ".5", "5.", "+1", "1e", "e1", "99999999d", "12w", "-15%",
]
ODD_VALUES = st.one_of(st.sampled_from(ODD_TOKENS), st.text(max_size=10), st.integers(-10**20, 10**20).map(str),
                       st.floats(allow_nan=True, allow_infinity=True).map(repr))


def _text_edits() -> st.SearchStrategy[list[tuple[int, int, str]]]:
    return st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 12), ODD_VALUES), min_size=1, max_size=3)


def edit_text(text: str, edits: list[tuple[int, int, str]]) -> str:
    """Replace `cut` characters at each position with a token (positions wrap around the text)."""
    for position, cut, token in edits:
        at = position % (len(text) + 1)
        text = text[:at] + token + text[at + cut:]
    return text


def _csv_ops(width: int) -> st.SearchStrategy[list[tuple[str, int, int, str]]]:
    op = st.tuples(st.sampled_from(["cell", "cell", "cell", "header", "drop-column", "drop-row", "copy-row",
                                    "short-row", "long-row", "blank-line"]),
                   st.integers(0, 50), st.integers(0, width - 1), ODD_VALUES)
    return st.lists(op, min_size=1, max_size=3)


def mutate_csv(text: str, delimiter: str, ops: list[tuple[str, int, int, str]]) -> str:
    """Cell, header, row and column changes of a delimited file (no quoting: junk goes in as written)."""
    rows = [line.split(delimiter) for line in text.strip("\n").split("\n")]
    for kind, row_pick, column, value in ops:
        data_row = 1 + row_pick % max(1, len(rows) - 1) if len(rows) > 1 else 0
        if kind == "cell" and rows and column < len(rows[data_row]):
            rows[data_row][column] = value
        elif kind == "header" and rows and column < len(rows[0]):
            rows[0][column] = value
        elif kind == "drop-column":
            rows = [[c for i, c in enumerate(r) if i != column] for r in rows]
        elif kind == "drop-row" and len(rows) > 1:
            del rows[data_row]
        elif kind == "copy-row" and len(rows) > 1:
            rows.append(list(rows[data_row]))
        elif kind == "short-row" and len(rows) > 1:
            rows[data_row] = rows[data_row][: column]
        elif kind == "long-row" and len(rows) > 1:
            rows[data_row] = [*rows[data_row], value]
        elif kind == "blank-line":
            rows.insert(data_row, [])
    return "\n".join(delimiter.join(r) for r in rows) + "\n"


def write_bytes_mutated(path: Path, text: str, junk: bytes, position: int) -> None:
    """`text` as UTF-8 with `junk` bytes (possibly not UTF-8) spliced in."""
    data = text.encode("utf-8")
    at = position % (len(data) + 1)
    path.write_bytes(data[:at] + junk + data[at:])


def write_mutated(path: Path, text: str, data: st.DataObject) -> None:
    """`text` as it is, or (half the time) with a few junk bytes spliced in somewhere."""
    if data.draw(st.booleans(), label="bytes"):
        write_bytes_mutated(path, text, data.draw(st.binary(min_size=1, max_size=4), label="junk"),
                            data.draw(st.integers(0, 10**6), label="position"))
    else:
        path.write_text(text, encoding="utf-8")


# ------------------------------------------------------------------ valid bases

CLUSTER = """\
site:
  pue: 1.3
  price_per_kwh: 0.12
  carbon_g_per_kwh: 380
node_types:
  a100x4: {gpus: 4, gpu_model: A100, gpu_idle_w: 55, gpu_max_w: 400, gpu_min_limit_w: 100,
           host_idle_w: 450, host_sleep_w: 8, boot_s: 180, gpu_memory_gb: 40}
  v100x2: &small {gpus: 2, gpu_model: V100, gpu_idle_w: 40, gpu_max_w: 300, gpu_min_limit_w: 150,
                  host_idle_w: 300, host_sleep_w: 5, boot_s: 120}
nodes:
  - {name: "gpu[01-03]", type: a100x4, domain: rack1, mac: "aa:bb:cc:00:00:01", wol_host: 10.0.0.255}
  - {name: old1, type: v100x2, domain: rack2, ipmi_host: bmc-old1.example}
tenants:
  vision: {quota_gpus: 8, weight: 2}
  nlp: {quota_gpus_by_model: {A100: 4, V100: 2}, weight: 1, borrow_limit_gpus: 4}
pools:
  spot: {type: a100x4, spot: true, price_per_hour: 9.5, interruptions_per_hour: 0.1, max_nodes: 2}
"""

POLICY = """\
name: fuzzed
interval_s: 60
scheduler:
  fair_share: {usage_half_life_h: 24, usage_weight: 1.0}
  preemption: {enabled: true, grace_s: 120, min_runtime_s: 300, victim_order: least-lost-work}
  backfill: {enabled: true, reservations: 2}
capping:
  classes:
    batch: {mode: efficiency, max_slowdown: 0.1}
    inference: {mode: "off"}
sleep:
  idle_timeout_s: 900
  windows:
    - {days: [mon-fri], start: "19:00", end: "07:00"}
  warm_reserve_gpus: 2
  wake_timeout_s: 600
  wake_retries: 3
spot:
  classes: [batch, training]
"""

TRACES = {
    "csv": ("""\
job_id,submit_time,duration_s,gpus,tenant,priority,class,checkpoint_interval_s
a,2024-01-01T00:00:00Z,3600,4,vision,1,training,900
b,2024-01-01T00:10:00Z,60,0.25,nlp,0,inference,
c,2024-01-01T00:20:00Z,120,2,nlp,,batch,
d,2024-01-01T01:00:00Z,7200,1,vision,0,training,
""", ","),
    "philly": ("""\
timestamp,duration,num_gpus,gpu_time,cluster
2017-10-09 07:01:55,66.0,1,66.0,11cb48
2017-10-09 06:13:03,2951.0,1,2951.0,6214e9
2017-10-09 07:58:32,8606.0,4,34424.0,6c71a0
""", ","),
    "sacct": ("""\
JobID|Submit|Start|End|Elapsed|AllocTRES|Account|QOS|Partition|State
1001|2024-03-01T09:00:00|2024-03-01T09:00:05|2024-03-01T10:00:05|01:00:00|cpu=8,gres/gpu=2,node=1|vision|normal|gpu|COMPLETED
1001.batch|2024-03-01T09:00:05|2024-03-01T09:00:05|2024-03-01T10:00:05|01:00:00|cpu=8,node=1|vision|||COMPLETED
1003|2024-03-01T08:00:00|2024-03-01T08:10:00|2024-03-02T10:13:04|1-02:03:04|cpu=64,gres/gpu:a100=4,node=1|nlp|high|gpu|TIMEOUT
1005_3|2024-03-01T11:00:00|2024-03-01T11:00:00|2024-03-01T11:00:30|00:30|cpu=2,gres/gpu=1,node=1|infra|scavenger|gpu|FAILED
""", "|"),
}


def _history(days: int) -> str:
    rows = ["time,gpus_busy,gpus_pending"]
    for hour in range(days * 24):
        rows.append(f"2024-01-{1 + hour // 24:02d}T{hour % 24:02d}:00:00Z,{3 + hour % 5 + hour // 24},{hour % 3}")
    return "\n".join(rows) + "\n"


HISTORY = _history(10)
"""Ten days: the reader and the demand series run in full, then plan refuses it (the backtest needs 15),
so each input costs milliseconds, not a backtest."""

SETTINGS = """\
history: history.csv
cluster: cluster.yaml
horizon: 90d
lead_time: 12w
target_utilisation: 0.65
redundancy_gpus: 2
max_wait_probability: 0.10
growth_window: 4w
buffer_factor: 1.1
projects:
  - {name: launch, gpus: 8, start: 2024-02-01, end: 2024-03-01}
efficiency:
  - {name: mixed precision, change: -10%, start: 2024-02-15}
"""

SERIES = {
    "tariff_csv": ("price_per_kwh", "time,price_per_kwh\n2024-01-01T00:00:00Z,0.10\n2024-01-01T01:00:00Z,-0.02\n"
                                    "2024-01-01T02:00:00Z,0.31\n"),
    "carbon_csv": ("g_per_kwh", "time,g_per_kwh\n2024-01-01T00:00:00Z,380\n2024-01-01T02:00:00+01:00,120\n"
                                "1704074400,90\n"),
}


# ------------------------------------------------------------------ the bases are valid

def test_every_base_input_is_valid(workdir: Path) -> None:
    """The fuzz starts from valid inputs, so a refusal is the mutation's doing."""
    from greengpu.commands.plan_main import read_history_frame
    from greengpu.config.plan_settings import load_plan_file

    cluster = workdir / "cluster.yaml"
    cluster.write_text(CLUSTER, encoding="utf-8")
    (workdir / "policy.yaml").write_text(POLICY, encoding="utf-8")
    code, _, err = run_cli("check", "--cluster", str(cluster), "--policy", str(workdir / "policy.yaml"), "--json")
    assert code == 0, err
    for trace_format, (text, _) in TRACES.items():
        (workdir / "trace").write_text(text, encoding="utf-8")
        code, out, err = run_cli("simulate", "--trace", str(workdir / "trace"), "--trace-format", trace_format,
                                 "--cluster", str(cluster), "--policy", "default", "--json")
        assert code == 0 and json.loads(out)["results"][0]["jobs_completed"] >= 3, err
    for key, (_, text) in SERIES.items():
        (workdir / "series.csv").write_text(text, encoding="utf-8")
        flat = "price_per_kwh: 0.12" if key == "tariff_csv" else "carbon_g_per_kwh: 380"
        (workdir / "with-series.yaml").write_text(CLUSTER.replace(flat, f"{key}: series.csv"), encoding="utf-8")
        code, _, err = run_cli("check", "--cluster", str(workdir / "with-series.yaml"), "--json")
        assert code == 0, err
    (workdir / "history.csv").write_text(HISTORY, encoding="utf-8")
    assert len(read_history_frame(str(workdir / "history.csv"))) == 240
    (workdir / "plan.yaml").write_text(SETTINGS, encoding="utf-8")
    assert load_plan_file(workdir / "plan.yaml").inputs.buffer_factor == 1.1


# ------------------------------------------------------------------ YAML readers: inventory, policy, settings

@fuzz(120)
@given(edits=_text_edits())
def test_inventory_text_mutations(workdir: Path, edits: list[tuple[int, int, str]]) -> None:
    path = workdir / "cluster.yaml"
    path.write_text(edit_text(CLUSTER, edits), encoding="utf-8")
    code, out, err = run_cli("check", "--cluster", str(path), "--json")
    assert_clean(code, err, out=out)


@fuzz(80)
@given(edits=_text_edits())
def test_policy_text_mutations(workdir: Path, edits: list[tuple[int, int, str]]) -> None:
    (workdir / "cluster.yaml").write_text(CLUSTER, encoding="utf-8")
    path = workdir / "policy.yaml"
    path.write_text(edit_text(POLICY, edits), encoding="utf-8")
    code, out, err = run_cli("check", "--cluster", str(workdir / "cluster.yaml"), "--policy", str(path), "--json")
    assert_clean(code, err, out=out)


@fuzz(60)
@given(edits=_text_edits())
def test_plan_settings_mutations(workdir: Path, edits: list[tuple[int, int, str]]) -> None:
    (workdir / "cluster.yaml").write_text(CLUSTER, encoding="utf-8")
    (workdir / "history.csv").write_text(HISTORY, encoding="utf-8")
    path = workdir / "plan.yaml"
    path.write_text(edit_text(SETTINGS, edits), encoding="utf-8")
    code, _, err = run_cli("plan", "--settings", str(path), "--models", "baselines", "--json")
    assert_clean(code, err, allowed=(2,))  # ten days of history: never enough to plan, always a clean refusal


def _replace(document: Any, path: tuple[Any, ...], value: Any) -> Any:
    document = copy.deepcopy(document)
    parent = document
    for part in path[:-1]:
        parent = parent[part]
    parent[path[-1]] = value
    return document


YAML_SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-10**30, 10**30), st.integers(10**399, 10**400),
                         st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=8),
                         st.sampled_from([1e300, -1e300, 1e15, 0, -1, 0.5, "19:00", "25:00", "mon-sun", "off",
                                          "2024-02-29", "99999999d", "-95%", "+1001%"]),
                         st.lists(st.integers(-3, 3), max_size=2))


@pytest.mark.parametrize("which", ["policy", "settings"])
@fuzz(60)
@given(data=st.data())
def test_yaml_values_replaced_keep_their_structure(workdir: Path, which: str, data: st.DataObject) -> None:
    """Structure intact, one value odd: reaches the range checks, not only the parser."""
    import yaml

    base = yaml.safe_load(POLICY if which == "policy" else SETTINGS)
    path = data.draw(st.sampled_from(key_paths(base)), label="path")
    document = _replace(base, path, data.draw(YAML_SCALARS, label="value"))
    (workdir / "cluster.yaml").write_text(CLUSTER, encoding="utf-8")
    (workdir / "history.csv").write_text(HISTORY, encoding="utf-8")
    target = workdir / f"{which}.yaml"
    target.write_text(yaml.safe_dump(document, sort_keys=False, allow_unicode=True), encoding="utf-8")
    if which == "policy":
        code, out, err = run_cli("check", "--cluster", str(workdir / "cluster.yaml"), "--policy", str(target),
                                 "--json")
        assert_clean(code, err, out=out)
    else:
        code, out, err = run_cli("plan", "--settings", str(target), "--models", "baselines", "--json")
        assert_clean(code, err, out=out, allowed=(2,))


@fuzz(12)
@given(data=st.data())
def test_plan_settings_values_through_a_whole_plan(workdir: Path, data: st.DataObject) -> None:
    """Sixteen days of history: a settings value that passes its checks goes through the whole plan."""
    import yaml

    base = yaml.safe_load(SETTINGS)
    path = data.draw(st.sampled_from([p for p in key_paths(base) if p[0] not in ("history", "cluster")]), label="path")
    document = _replace(base, path, data.draw(YAML_SCALARS, label="value"))
    (workdir / "cluster.yaml").write_text(CLUSTER, encoding="utf-8")
    (workdir / "history.csv").write_text(_history(16), encoding="utf-8")
    target = workdir / "whole-plan.yaml"
    target.write_text(yaml.safe_dump(document, sort_keys=False, allow_unicode=True), encoding="utf-8")
    code, out, err = run_cli("plan", "--settings", str(target), "--models", "baselines", "--json")
    assert_clean(code, err, out=out)


@fuzz(40)
@given(junk=st.binary(min_size=1, max_size=6), position=st.integers(0, 10**6),
       which=st.sampled_from(["inventory", "policy"]))
def test_yaml_bytes_that_are_not_utf8(workdir: Path, junk: bytes, position: int, which: str) -> None:
    cluster = workdir / "cluster.yaml"
    if which == "inventory":
        write_bytes_mutated(cluster, CLUSTER, junk, position)
        args = ["check", "--cluster", str(cluster)]
    else:
        cluster.write_text(CLUSTER, encoding="utf-8")
        write_bytes_mutated(workdir / "policy.yaml", POLICY, junk, position)
        args = ["check", "--cluster", str(cluster), "--policy", str(workdir / "policy.yaml")]
    code, out, err = run_cli(*args, "--json")
    assert_clean(code, err, out=out)


# ------------------------------------------------------------------ traces

@pytest.mark.parametrize("trace_format", list(TRACES))
@fuzz(70)
@given(data=st.data())
def test_trace_mutations(workdir: Path, trace_format: str, data: st.DataObject) -> None:
    text, delimiter = TRACES[trace_format]
    width = len(text.split("\n")[0].split(delimiter))
    mutated = mutate_csv(text, delimiter, data.draw(_csv_ops(width), label="ops"))
    (workdir / "cluster.yaml").write_text(CLUSTER, encoding="utf-8")
    path = workdir / f"trace.{trace_format}"
    write_mutated(path, mutated, data)
    # --until bounds the virtual clock: the fuzz is about the reader, not a year-long replay.
    code, out, err = run_cli("simulate", "--trace", str(path), "--trace-format", trace_format, "--cluster",
                             str(workdir / "cluster.yaml"), "--policy", "default", "--until", "86400", "--json")
    assert_clean(code, err, out=out)


@pytest.mark.parametrize(("trace_format", "read_as"), [(a, b) for a in TRACES for b in TRACES])
def test_a_trace_read_in_any_format(workdir: Path, trace_format: str, read_as: str) -> None:
    """The wrong --trace-format is one line naming the missing columns (the fast path read them first)."""
    (workdir / "cluster.yaml").write_text(CLUSTER, encoding="utf-8")
    path = workdir / "trace.any"
    path.write_text(TRACES[trace_format][0], encoding="utf-8")
    code, out, err = run_cli("simulate", "--trace", str(path), "--trace-format", read_as, "--cluster",
                             str(workdir / "cluster.yaml"), "--policy", "always-on", "--until", "86400", "--json")
    assert_clean(code, err, out=out)
    assert (code == 0) == (trace_format == read_as), err


@fuzz(40)
@example(value="²")  # a digit to str.isdigit that int() refuses: once the test's own oracle was wrong there
@given(value=st.one_of(st.integers(-3, 4).map(str), st.sampled_from(["100", "101", "1e3", "2.5", "", "five"]),
                       st.text(max_size=6)))
def test_replicas_flag(workdir: Path, value: str) -> None:
    """--replicas takes 1-100 replays; anything else is one line and exit 2, before any replay."""
    (workdir / "cluster.yaml").write_text(CLUSTER, encoding="utf-8")
    (workdir / "trace.csv").write_text(TRACES["csv"][0], encoding="utf-8")
    code, out, err = run_cli("simulate", "--trace", str(workdir / "trace.csv"), "--cluster",
                             str(workdir / "cluster.yaml"), "--policy", "always-on", "--until", "86400",
                             "--replicas", value, "--json")
    assert_clean(code, err, out=out)
    try:
        number: int | None = int(value)  # what click's INT reads ("²" is a digit to str.isdigit, not to int)
    except ValueError:
        number = None
    valid = number is not None and 1 <= number <= 100
    assert (code == 0) == valid, (value, err)
    if valid:
        spread = json.loads(out)["results"][0].get("replicas")
        assert (spread is None) == (number == 1)
        if spread is not None:
            assert spread["count"] == number


# ------------------------------------------------------------------ series an inventory names

@fuzz(60)
@given(key=st.sampled_from(list(SERIES)), data=st.data())
def test_tariff_and_carbon_series_mutations(workdir: Path, key: str, data: st.DataObject) -> None:
    column, text = SERIES[key]
    mutated = mutate_csv(text, ",", data.draw(_csv_ops(2), label="ops"))
    series = workdir / "series.csv"
    write_mutated(series, mutated, data)
    flat = "price_per_kwh: 0.12" if key == "tariff_csv" else "carbon_g_per_kwh: 380"
    cluster = workdir / "cluster.yaml"
    cluster.write_text(CLUSTER.replace(flat, f"{key}: series.csv"), encoding="utf-8")
    code, out, err = run_cli("check", "--cluster", str(cluster), "--json")
    assert_clean(code, err, out=out)


# ------------------------------------------------------------------ plan history

@fuzz(60)
@given(data=st.data())
def test_plan_history_mutations(workdir: Path, data: st.DataObject) -> None:
    mutated = mutate_csv(HISTORY, ",", data.draw(_csv_ops(3), label="ops"))
    path = workdir / "history.csv"
    write_mutated(path, mutated, data)
    code, _, err = run_cli("plan", "--history", str(path), "--models", "baselines", "--json")
    assert_clean(code, err, allowed=(2,))


# ------------------------------------------------------------------ the ledger

@pytest.fixture(scope="module")
def made_ledger(workdir: Path) -> Path:
    """A real ledger, written by `greengpu simulate --ledger` on a small trace."""
    (workdir / "cluster.yaml").write_text(CLUSTER, encoding="utf-8")
    (workdir / "trace.csv").write_text(TRACES["csv"][0], encoding="utf-8")
    ledger = workdir / "made.db"
    code, _, err = run_cli("-q", "simulate", "--trace", str(workdir / "trace.csv"), "--cluster",
                           str(workdir / "cluster.yaml"), "--policy", "default", "--ledger", str(ledger), "--json")
    assert code == 0, err
    return ledger


LEDGER_CHANGES = [
    "DROP TABLE meta", "DROP TABLE runs", "DROP TABLE node_hours", "ALTER TABLE runs RENAME COLUMN policy TO p",
    "ALTER TABLE tenant_hours ADD COLUMN extra TEXT", "DELETE FROM meta", "DELETE FROM runs",
    "UPDATE meta SET value = {v} WHERE key = 'schema_version'", "UPDATE runs SET currency = {v}",
    "UPDATE runs SET run_id = {v}", "UPDATE tenant_hours SET cost = {v}", "UPDATE node_hours SET energy_kwh = {v}",
    "UPDATE node_hours SET asleep_h = {v}", "UPDATE tenant_hours SET hour_start_s = {v}",
    "UPDATE tenant_hours SET tenant = {v}", "INSERT INTO runs VALUES ({v}, 'simulate', 'x', 'y', 'z', 'EUR', 1.2)",
    "CREATE TABLE other (a)", "UPDATE runs SET policy = {v}",
]
SQL_VALUES = st.one_of(st.sampled_from(["NULL", "'x'", "''", "9e999", "-9e999", "1e308", "0", "-1", "2", "'1'",
                                        "'1.0'", "X'00FF'", "99999999999999999999"]),
                       st.integers(-10**18, 10**18).map(str), st.text(max_size=8).map(lambda t: "'" +
                                                                                       t.replace("'", "''") + "'"))


@fuzz(60)
@given(data=st.data())
def test_ledger_mutations_and_report_never_writes(workdir: Path, made_ledger: Path, data: st.DataObject) -> None:
    ledger_bytes = made_ledger.read_bytes()
    ledger = workdir / "fuzzed.db"
    ledger.unlink(missing_ok=True)
    how = data.draw(st.sampled_from(["sql", "sql", "bytes", "truncate", "foreign", "empty"]), label="how")
    if how == "sql":
        ledger.write_bytes(ledger_bytes)
        with contextlib.closing(sqlite3.connect(ledger)) as connection:
            for change in data.draw(st.lists(st.sampled_from(LEDGER_CHANGES), min_size=1, max_size=3), label="sql"):
                with contextlib.suppress(sqlite3.Error):  # a change the previous one made impossible
                    connection.execute(change.format(v=data.draw(SQL_VALUES, label="value")))
            connection.commit()
    elif how == "bytes":
        raw = bytearray(ledger_bytes)
        for position, value in data.draw(st.lists(st.tuples(st.integers(0, len(raw) - 1), st.integers(0, 255)),
                                                  min_size=1, max_size=8), label="flips"):
            raw[position] = value
        ledger.write_bytes(bytes(raw))
    elif how == "truncate":
        ledger.write_bytes(ledger_bytes[: data.draw(st.integers(0, len(ledger_bytes) - 1), label="length")])
    elif how == "foreign":
        with contextlib.closing(sqlite3.connect(ledger)) as connection:
            connection.execute("CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT)")
            connection.commit()
    else:
        ledger.write_bytes(b"")
    before = ledger.read_bytes()
    month = data.draw(st.sampled_from(["2024-01", "2024-03", "9999-12", "0001-01", "2024-13", "1900-01", "2199-12",
                                       "24-01", "2024-1"]), label="month")
    code, out, err = run_cli("report", "--ledger", str(ledger), "--month", month, "--run", "1", "--json")
    assert_clean(code, err, out=out)
    assert ledger.read_bytes() == before, "report wrote to its input"
    assert sorted(p.name for p in workdir.glob("fuzzed.db*")) == ["fuzzed.db"], "report left a journal file"


# ------------------------------------------------------------------ the agent's journal

JOURNAL_LINES = st.one_of(
    st.sampled_from(['null', '[]', '{}', '"x"', '1', '{"event": null}', '{"event": "stop"}',
                     '{"event": "start", "gpus": 2}', '{"event": "set_limit", "gpu": 0, "uuid": "GPU-fake-0000", '
                     '"limit_w": 150, "previous_w": 400}',
                     '{"event": "lock_clocks", "gpu": 1, "uuid": "GPU-fake-0001"}',
                     '{"event": "set_limit", "gpu": "0", "uuid": "GPU-fake-0000", "previous_w": 400}',
                     '{"event": "set_limit", "gpu": 0, "uuid": 7}', '{"event": "set_limit", "gpu": 0, '
                     '"uuid": "GPU-fake-0000", "previous_w": NaN}', '{"event": "set_limit", "gpu": -1, "uuid": "x"}',
                     '{"event": "set_limit", "gpu": 0, "uuid": "GPU-fake-0000", "previous_w": 1e999}',
                     '{"event": "set_limit", "gpu": 0, "uuid": "GPU-fake-0000", "previous_w": "400"}',
                     '{"event": "reset_clocks", "gpu": 99, "uuid": "GPU-other"}', '{"event": "start", "gpus"',
                     "[" * 5000, '{"event": "x", "n": ' + "9" * 5000 + "}"]),
    st.text(max_size=30),
)


@fuzz(12)
@given(lines=st.lists(JOURNAL_LINES, max_size=6), torn=st.booleans(), junk=st.binary(max_size=3))
def test_agent_starts_whatever_its_journal_holds(workdir: Path, lines: list[str], torn: bool, junk: bytes) -> None:
    journal = workdir / "journal.jsonl"
    body = "\n".join(lines) + ("" if torn else "\n")
    journal.write_bytes(body.encode("utf-8", errors="surrogatepass") + junk)
    code, _, err = run_cli("agent", "--backend", "fake", "--fake-gpus", "2xA100", "--once", "--journal",
                           str(journal), "--listen", "127.0.0.1:0", "--interval-s", "0.05")
    assert "Traceback" not in err, err
    assert code == 0, err  # a damaged journal is reported and skipped, never a reason to stop


def test_fuzz_inputs_tried_add_up_to_what_the_docs_say(repo: Path) -> None:
    """docs/INPUTS.md states how many inputs these tests try; keep the two in step."""
    text = (repo / "docs" / "INPUTS.md").read_text(encoding="utf-8")
    source = Path(__file__).read_text(encoding="utf-8")
    import re

    counts = [int(n) for n in re.findall(r"^@fuzz\((\d+)\)", source, flags=re.M)]
    per_format = 70 * (len(TRACES) - 1)  # test_trace_mutations runs once per trace format
    per_file = 60  # test_yaml_values_replaced_keep_their_structure runs for policies and settings
    total = sum(counts) + per_format + per_file
    assert f"{total:,} inputs" in text, f"docs/INPUTS.md should say {total:,} inputs"
