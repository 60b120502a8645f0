"""The agent's reading of the daemon's `GET /v1/waiting`, fuzzed over real HTTP on loopback: whatever the
per-job lists (`uncapped_job_ids`, `capped_job_ids`) hold, the agent never fails and never caps a job the
daemon did not clearly name as capped. A job in a well-formed uncapped list lifts; one in a well-formed capped
list (next to a well-formed uncapped one) stays capped; any other job (in neither, or a list absent, null,
not a list or holding a non-id) lifts while work waits: the fail-safe form, as with a daemon that predates
the lists."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from test_input_fuzz import fuzz

from greengpu.control.agent.jobclass import DaemonWaiting, LocalMap

NOW_S = 1_700_000_000.0
IDS = st.sampled_from(["a", "b", "c", "7"])
JSON_VALUES = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=5),
                           lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner,
                                                                                         max_size=3), max_leaves=6)
LISTS = (st.none() | st.lists(IDS, max_size=4) | st.lists(IDS | st.integers(0, 9) | st.booleans(), max_size=4)
         | JSON_VALUES)


class _Answer:
    body: bytes = b"{}"


@pytest.fixture(scope="module")
def daemon_url() -> Iterator[tuple[str, type[_Answer]]]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - the http.server API
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(_Answer.body)

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the http.server API
            return

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield "http://{}:{}".format(*server.server_address), _Answer
    finally:
        server.shutdown()
        server.server_close()


def _ids(value: object) -> frozenset[str] | None:
    if isinstance(value, list) and all(isinstance(v, str | int) and not isinstance(v, bool) for v in value):
        return frozenset(str(v) for v in value)
    return None


@fuzz(60)
@given(uncapped=LISTS, capped=LISTS, waiting=st.booleans(), no_slack=st.booleans(), omit=st.booleans())
def test_any_per_job_lists_give_the_named_lifts_or_the_fail_safe(
        daemon_url: tuple[str, type[_Answer]], uncapped: object, capped: object, waiting: bool, no_slack: bool,
        omit: bool) -> None:
    url, answer = daemon_url
    signal: dict[str, Any] = {"job_ids": ["w"] if waiting else [], "no_slack": no_slack, "tick_s": NOW_S,
                              "leading": True}
    if not omit:
        signal |= {"uncapped_job_ids": uncapped, "capped_job_ids": capped}
    answer.body = json.dumps(signal).encode()
    source = DaemonWaiting(LocalMap({0: "training"}), url, clock=lambda: NOW_S)
    source.jobs([])
    seen = source.work_waiting()
    assert source.problem is None
    named_up, named_down = (None, None) if omit else (_ids(uncapped), _ids(capped))
    for job in ("a", "b", "c", "7", "unknown"):
        lifted = seen.lifts_cap(job)
        if no_slack:
            assert lifted
        elif named_up is not None and job in named_up:
            assert lifted  # named uncapped: lifts even when no capacity wait is listed (a quota wait)
        elif named_up is not None and named_down is not None and job in named_down:
            assert not lifted
        else:
            assert lifted == waiting  # not clearly named: every cap lifts while work waits (fail safe)
