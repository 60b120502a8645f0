"""`greengpu sweep --frontier --mark --plot`, fuzzed through the command line's exit path: odd --mark and --plot
values, and a finished result store whose figures were tampered with (nan, inf, strings, nulls, a 400-digit
integer, negative numbers, objects where numbers belong). Every input gives exit 0 with JSON holding no NaN or
Infinity, or exactly one line on stderr and exit 2; never a traceback. The replays come from the store, so each
input takes milliseconds. CI (CI=true) tries a fixed set (derandomized)."""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import sqlite3
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from fleet_inputs import write_cluster, write_trace
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from greengpu.cli import main

IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
FUZZ = settings(max_examples=60, deadline=None, derandomize=IN_CI, database=None if IN_CI else
                settings.default.database, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                   HealthCheck.too_slow])
ODD_TEXT = st.one_of(st.sampled_from(["default", "always-on", "idle-timeout", "", " ", "-", "--json", "nan",
                                      "default.yaml", "\x00", "é", "../x.png", "/", "x.PNG", "x.png", "a/b.png",
                                      "/nonexistent/x.png", "x.svg", ".png"]), st.text(max_size=12))
ODD_FIGURES = st.one_of(st.sampled_from([float("nan"), float("inf"), -1.0, 0, 10**400, 1e308, "12", None, True,
                                         [], {}]), st.floats(), st.integers(-10**6, 10**6))


def run_cli(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["-q", *args])
    return code, out.getvalue(), err.getvalue()


def _refuse_constant(name: str) -> None:
    raise AssertionError(f"non-standard JSON number {name} in the output: an input was wrongly accepted")


def assert_clean(code: int, out: str, err: str) -> None:
    assert "Traceback" not in err, err
    assert code in (0, 2), f"exit {code}: {err}"
    if code == 0 and out.strip().startswith("{"):
        json.loads(out, parse_constant=_refuse_constant)
    if code == 2:
        assert err.count("\n") == 1 and err.endswith("\n") and err.startswith("greengpu"), repr(err)


@pytest.fixture(scope="module")
def finished() -> Iterator[tuple[Path, list[str]]]:
    """A folder with a finished sweep of three built-in policies, and the sweep's arguments."""
    import datetime as dt

    folder = Path(tempfile.mkdtemp(prefix="greengpu-frontier-fuzz-"))
    trace = write_trace(folder / "t.trace.csv", dt.datetime(2024, 3, 1, tzinfo=dt.UTC), jobs=30, seed=3)
    args = ["sweep", "--trace", str(trace), "--cluster", str(write_cluster(folder, "lab")), "--policy", "default",
            "--policy", "always-on", "--policy", "idle-timeout", "--workers", "1", "--store", str(folder / "s.db")]
    code, _, err = run_cli(*args)
    assert code == 0, err
    yield folder, args
    shutil.rmtree(folder, ignore_errors=True)


@FUZZ
@given(mark=st.none() | ODD_TEXT, plot=st.none() | ODD_TEXT, show=st.booleans(), as_json=st.booleans())
def test_odd_marks_and_chart_paths_are_one_line(finished: tuple[Path, list[str]], mark: str | None,
                                                plot: str | None, show: bool, as_json: bool) -> None:
    folder, args = finished
    extra = (["--frontier"] if show else []) + (["--json"] if as_json else [])
    extra += ["--mark", mark] if mark is not None else []
    extra += ["--plot", str(folder / "charts" / plot) if plot and not plot.startswith("/") else plot] \
        if plot is not None else []
    (folder / "charts").mkdir(exist_ok=True)
    code, out, err = run_cli(*args, *extra)
    assert_clean(code, out, err)
    if code == 0 and mark is not None:
        assert mark in ("default", "always-on", "idle-timeout")


@FUZZ
@given(row=st.integers(0, 2), key=st.sampled_from(["energy_kwh", "p95", "p99", "wait_s"]), value=ODD_FIGURES,
       as_json=st.booleans())
def test_tampered_figures_in_the_store_are_one_line(finished: tuple[Path, list[str]], row: int, key: str,
                                                    value: object, as_json: bool) -> None:
    folder, args = finished
    store = folder / "tampered.db"
    shutil.copyfile(folder / "s.db", store)
    with contextlib.closing(sqlite3.connect(store)) as db, db:
        spec_hash, text = db.execute("SELECT spec_hash, result FROM results ORDER BY spec_hash").fetchall()[row]
        result = json.loads(text)
        if key in ("p95", "p99"):
            result["wait_s"][key] = value
        else:
            result[key] = value
        db.execute("UPDATE results SET result = ? WHERE spec_hash = ?", (json.dumps(result), spec_hash))
    code, out, err = run_cli(*args[:-1], str(store), "--frontier", *(["--json"] if as_json else []))
    assert_clean(code, out, err)
    finite = isinstance(value, (int, float)) and not isinstance(value, bool) and abs(value) < 1e309
    if not finite or isinstance(value, (int, float)) and (value != value or value < 0):
        assert code == 2, f"{key}={value!r} was accepted"
