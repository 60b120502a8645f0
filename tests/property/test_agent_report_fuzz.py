"""Junk posted to the daemon's `POST /v1/report` over real loopback HTTP: every answer is 200 (a valid report,
stored) or 400/413 with one line naming what is wrong, never a 5xx, never a crash, and a report that is
refused is never stored. A report's fields mutated one at a time with odd values, and raw bytes."""

from __future__ import annotations

import json
import math
import shutil
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from inventories import SITE
from manual_clock import ManualClock
from test_input_fuzz import ODD_VALUES, assert_clean, fuzz, run_cli

from greengpu.config.inventory import load_cluster
from greengpu.config.policy import load_policy
from greengpu.control.daemon.audit import Alerts, AuditLog
from greengpu.control.daemon.http_api import DaemonServer, RateLimit
from greengpu.control.daemon.service import Daemon
from greengpu.control.daemon.store import DaemonStore
from greengpu.control.fakes.fake_cluster import FakeCluster

T0 = 1_700_000_000.0
NODE = ("{gpus: 2, gpu_model: A100, gpu_idle_w: 52, gpu_max_w: 400, gpu_min_limit_w: 100, host_idle_w: 300, "
        "host_sleep_w: 8, boot_s: 180, gpu_max_clock_mhz: 1410}")

TOKEN = "report-token-of-sixteen+"
GOOD: dict[str, Any] = {
    "node": "n1", "time_s": T0,
    "gpus": [{"index": 0, "utilization": 0.5, "health": "warning", "score": 0.4, "energy_mj": 5, "pids": [1],
              "jobs": ["j"]}],
    "jobs": {"j": {"tenant": "a", "last_checkpoint_s": T0 - 10, "checkpoint_duration_s": 3.0}}}
ODD: st.SearchStrategy[Any] = st.one_of(
    st.none(), st.booleans(), st.integers(-2**70, 2**70), st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12), st.lists(st.integers(-3, 3), max_size=3), st.dictionaries(st.text(max_size=4),
                                                                                     st.integers(), max_size=2))
PATHS = [("node",), ("time_s",), ("gpus",), ("jobs",), ("gpus", 0), ("gpus", 0, "index"), ("gpus", 0, "utilization"),
         ("gpus", 0, "health"), ("gpus", 0, "score"), ("gpus", 0, "energy_mj"), ("gpus", 0, "pids"),
         ("gpus", 0, "jobs"), ("gpus", 0, "extra"), ("jobs", "j"), ("jobs", "j", "tenant"),
         ("jobs", "j", "last_checkpoint_s"), ("jobs", "j", "checkpoint_duration_s"), ("extra",)]


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("report-flags")


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Daemon, str]]:
    root = tmp_path_factory.mktemp("report-fuzz")
    (root / "cluster.yaml").write_text(SITE + f"node_types:\n  g2: {NODE}\nnodes:\n  - {{name: \"n[1-2]\", "
                                       "type: g2}\ntenants:\n  a: {quota_gpus: 4}\n")
    state = root / "state"
    state.mkdir()
    audit = AuditLog(state / "audit.jsonl")
    daemon = Daemon(FakeCluster(load_cluster(root / "cluster.yaml"), [], state, start_s=T0), load_policy("default"),
                    DaemonStore(state), audit, Alerts(audit), clock=ManualClock(T0))
    # Every example posts: the reports' own rate limit must not answer for the checks.
    server = DaemonServer(daemon, "127.0.0.1", 0, lambda: None, TOKEN, report_limit=RateLimit(10**9)).start()
    yield daemon, "http://{}:{}".format(*server.address)
    server.stop()


def post(base: str, data: bytes) -> tuple[int, str]:
    request = urllib.request.Request(base + "/v1/report", data=data, method="POST",
                                     headers={"Authorization": f"Bearer {TOKEN}"})
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def mutate(path: tuple[Any, ...], value: Any) -> Any:
    report = json.loads(json.dumps(GOOD))
    target = report
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    return report


def check(daemon: Daemon, base: str, data: bytes) -> int:
    daemon.reports.reports._latest.clear()
    status, text = post(base, data)
    assert status in (200, 400, 413), (status, text)
    answer = json.loads(text)
    if status == 200:
        assert answer == {"node": "n1", "ok": True} and set(daemon.reports.reports.fresh(T0)) == {"n1"}
    else:
        assert "\n" not in answer["error"] and len(answer["error"]) < 300
        assert daemon.reports.reports.fresh(T0) == {}  # refused: never stored
    return status


@fuzz(40)
@given(path=st.sampled_from(PATHS), value=ODD)
def test_a_mutated_field_is_stored_only_when_valid(served: tuple[Daemon, str], path: tuple[Any, ...],
                                                   value: Any) -> None:
    daemon, base = served
    report = mutate(path, value)
    data = json.dumps(report, allow_nan=True).encode()
    status = check(daemon, base, data)
    if status == 200 and path == ("gpus", 0, "utilization"):
        assert isinstance(value, int | float) and not isinstance(value, bool) and 0 <= value <= 1
    if isinstance(value, float) and not math.isfinite(value) and path in (("time_s",), ("gpus", 0, "utilization")):
        assert status == 400


@fuzz(30)
@given(data=st.one_of(st.binary(max_size=200), st.text(max_size=200).map(str.encode)))
def test_raw_bytes_never_crash_the_endpoint(served: tuple[Daemon, str], data: bytes) -> None:
    daemon, base = served
    check(daemon, base, data)


@fuzz(15)
@given(flag=st.sampled_from(["--report-to", "--report-token-file", "--agent-token-file"]), value=ODD_VALUES)
def test_the_report_flags_through_the_command_line(root: Path, flag: str, value: str) -> None:
    """`--report-to` and `--report-token-file` (agent), `--agent-token-file` (daemon): exit 0, or one line and
    exit 2; never a URL that is not one, never a token under 16 characters."""
    token = root / "token"
    token.write_text(value if flag != "--report-to" else TOKEN, errors="surrogatepass")
    token.chmod(0o600)
    if flag == "--agent-token-file":
        (root / "cluster.yaml").write_text(SITE + f"node_types:\n  g2: {NODE}\nnodes:\n  - {{name: n1, type: g2}}\n")
        shutil.rmtree(root / "state", ignore_errors=True)
        code, _, err = run_cli("-q", "daemon", "--backend", "fake", "--cluster", str(root / "cluster.yaml"),
                               "--state", str(root / "state"), "--once", "--listen", "127.0.0.1:0", flag, str(token))
    else:
        url = value if flag == "--report-to" else "http://127.0.0.1:9"  # the discard port: refused at once
        (root / "journal.jsonl").unlink(missing_ok=True)
        code, _, err = run_cli("agent", "--backend", "fake", "--once", "--journal", str(root / "journal.jsonl"),
                               "--listen", "127.0.0.1:0", "--class-source", "local", "--report-to", url,
                               "--report-token-file", str(token))
    assert_clean(code, err, allowed=(0, 2))
    if flag == "--report-to":
        assert code == 2, f"--report-to {value!r} was accepted"
    elif code == 0:
        assert len(token.read_text(errors="replace").strip()) >= 16, "a short token was accepted"
