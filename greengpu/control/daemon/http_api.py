"""The daemon's HTTP face: `/metrics`, `/healthz`, `/v1/status`, and the few endpoints that change anything.

`GET /v1/waiting` is what the node agents ask each tick: the jobs that wait for capacity at the last
good tick, and when that was (`--waiting-from` on the agent).

`POST /v1/report` is where the node agents post their reports (greengpu.control.daemon.agent_reports), with the
same token as the changes below, a bounded body and a rate limit of its own.

`GET /v1/capacity/JOB` is what the spot webhook asks (`greengpu spot webhook --daemon`): the capacity lever's
decision for job JOB at the last good tick (`spot`, `on-demand` or `wait`, its pool and why); 404 when the
tick decided nothing for it. A pod's job is `NAMESPACE/NAME`. Read-only: no token.

`POST /v1/pause`, `/v1/resume` and `/v1/exempt?node=NAME[&exempt=false]` need `Authorization: Bearer
TOKEN`, the token read from `--token-file` (without one they answer 403: nothing changes over HTTP),
are rate-limited per client address, and are logged with the client and the change, never the token.
Refused ones are logged at most once a minute with a count (an unauthenticated client must not flood
the log). A GET on one of them answers 405, as a POST on a read-only path does. Loopback by default.

Served by `greengpu.control.daemon.http_serve` (a real backlog, read timeouts, a fixed pool of workers): a
scrape never waits on an idle or half-sent connection, and nothing an answer reads can hang it for
long (`/v1/status` waits at most half a second for a store another process holds).
"""

from __future__ import annotations

import hmac
import json
import logging
import threading
import time
from collections.abc import Callable
from urllib.parse import parse_qs, unquote, urlsplit

from prometheus_client import generate_latest

from greengpu.control.daemon.http_serve import BoundedHandler, BoundedHTTPServer, send_reply
from greengpu.control.daemon.report_http import read_report
from greengpu.control.daemon.service import Daemon
from greengpu.control.daemon.status import capacity_decision

log = logging.getLogger("greengpu.daemon")

CHANGES_PER_MINUTE = 10
"""Changing requests a client may make per minute (a script in a loop must not flap the cluster)."""
HTTP_WORKERS = 8
"""Threads that answer requests (the connections waiting for theirs cost no thread)."""
READ_TIMEOUT_S = 10.0
"""A client whose request has not come whole within this is dropped; also the bound on writing an answer."""
GET_PATHS = frozenset({"/metrics", "/healthz", "/v1/status", "/v1/waiting"})
POST_PATHS = frozenset({"/v1/pause", "/v1/resume", "/v1/exempt", "/v1/report"})
CAPACITY_PREFIX = "/v1/capacity/"
MAX_JOB_ID_CHARS = 256
REPORTS_PER_MINUTE = 120
"""Reports a client may post per minute (every node's agent reports each tick; several agents may share an
address behind a NAT)."""


class RefusalLog:
    """Refused changes logged at most once per `every_s`, the rest counted into the next line."""

    def __init__(self, every_s: float = 60.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.every_s = every_s
        self._clock = clock
        self._last_s: float | None = None
        self._unlogged = 0
        self._lock = threading.Lock()

    def refused(self, path: str, client: str, why: str) -> None:
        now = self._clock()
        with self._lock:
            if self._last_s is not None and now - self._last_s < self.every_s:
                self._unlogged += 1
                log.debug("HTTP POST %s from %s refused: %s", path, client, why)
                return
            more, self._unlogged, self._last_s = self._unlogged, 0, now
        log.warning("HTTP POST %s from %s refused: %s%s", path, client, why,
                    f" ({more} more refused since the last such line)" if more else "")


class RateLimit:
    """At most `per_minute` events per key in any sliding minute."""

    def __init__(self, per_minute: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.per_minute = per_minute
        self._clock = clock
        self._seen: dict[str, list[float]] = {}
        self._lock = threading.Lock()

    def allow(self, key: str) -> bool:
        now = self._clock()
        with self._lock:
            recent = [t for t in self._seen.get(key, []) if t > now - 60.0]
            if len(recent) >= self.per_minute:
                self._seen[key] = recent
                return False
            self._seen[key] = [*recent, now]
            return True


class DaemonServer:
    """The HTTP server in background threads; binds at once (an address in use raises OSError here)."""

    def __init__(self, daemon: Daemon, host: str, port: int, health: Callable[[], str | None],
                 token: str | None = None, limit: RateLimit | None = None, *, workers: int = HTTP_WORKERS,
                 read_timeout_s: float = READ_TIMEOUT_S, report_limit: RateLimit | None = None,
                 report_token: str | None = None) -> None:
        """`report_token`: a second token `POST /v1/report` takes (the agents' `--agent-token-file`)."""
        limiter = limit or RateLimit(CHANGES_PER_MINUTE)
        report_limiter = report_limit or RateLimit(REPORTS_PER_MINUTE)
        refusals = RefusalLog()
        self.refusals = refusals

        class Handler(BoundedHandler):
            def _answer(self, status: int, body: bytes, content_type: str = "application/json",
                        headers: dict[str, str] | None = None) -> None:
                send_reply(self, status, body, content_type, headers)

            def _json(self, status: int, value: object, headers: dict[str, str] | None = None) -> None:
                self._answer(status, (json.dumps(value, sort_keys=True) + "\n").encode(), headers=headers)

            def _guarded(self, answer: Callable[[], None]) -> None:
                """An answer that fails inside (the store locked past its wait) is a 503 with the reason."""
                try:
                    answer()
                except OSError:
                    raise  # the client hung up: the server says so at debug level
                except Exception as error:  # noqa: BLE001 - one line and a 503, never a traceback
                    log.error("HTTP %s %s failed: %s: %s", self.command, self.path[:80], type(error).__name__, error)
                    self._json(503, {"error": f"{type(error).__name__}: {error}"})

            def do_GET(self) -> None:  # noqa: N802 (the http.server API)
                self._guarded(self._get)

            def do_POST(self) -> None:  # noqa: N802
                self._guarded(self._post)

            def _get(self) -> None:
                path = urlsplit(self.path).path
                if path == "/metrics":
                    self._answer(200, generate_latest(daemon.metrics.registry), "text/plain; version=0.0.4")
                elif path == "/healthz":
                    problem = health()
                    self._answer(200 if problem is None else 503,
                                 b"ok\n" if problem is None else f"unhealthy: {problem}\n".encode(), "text/plain")
                elif path == "/v1/status":
                    self._json(200, daemon.status())
                elif path == "/v1/waiting":
                    self._json(200, daemon.waiting_signal())
                elif path.startswith(CAPACITY_PREFIX):
                    job_id = unquote(path[len(CAPACITY_PREFIX):])
                    found = capacity_decision(daemon, job_id) if 0 < len(job_id) <= MAX_JOB_ID_CHARS else None
                    if found is None:
                        self._json(404, {"error": "no capacity decision for this job at the last good tick"})
                    else:
                        self._json(200, found)
                elif path in POST_PATHS:
                    self._json(405, {"error": f"{path} changes the daemon: use POST"}, {"Allow": "POST"})
                else:
                    self._json(404, {"error": "not found"})

            def _post(self) -> None:
                parts = urlsplit(self.path)
                client = self.client_address[0]
                if parts.path in GET_PATHS or parts.path.startswith(CAPACITY_PREFIX):
                    self._json(405, {"error": f"{parts.path} is read-only: use GET"}, {"Allow": "GET"})
                    return
                # Reports take the agents' token too (`--agent-token-file`): a node need not hold the one that pauses.
                accepted = [t for t in ((token, report_token) if parts.path == "/v1/report" else (token,)) if t]
                if not accepted:
                    refusals.refused(parts.path, client, "changes over HTTP are off")
                    self._json(403, {"error": "changes over HTTP are off: start the daemon with --token-file"})
                    return
                given = self.headers.get("Authorization", "")
                if not given.startswith("Bearer ") or not given[len("Bearer "):].strip():
                    refusals.refused(parts.path, client, "no bearer token")
                    self._json(401, {"error": "a bearer token is required (Authorization: Bearer TOKEN)"},
                               {"WWW-Authenticate": "Bearer"})
                    return
                if not any([hmac.compare_digest(given.encode(), f"Bearer {t}".encode()) for t in accepted]):
                    refusals.refused(parts.path, client, "wrong bearer token")
                    self._json(401, {"error": "the bearer token is wrong (not the one in the daemon's --token-file)"},
                               {"WWW-Authenticate": 'Bearer error="invalid_token"'})
                    return
                if parts.path == "/v1/report":
                    self._json(*read_report(daemon, self.headers, self.rfile, client, report_limiter.allow))
                    return
                if not limiter.allow(client):
                    refusals.refused(parts.path, client, "rate limit")
                    self._json(429, {"error": f"at most {limiter.per_minute} changes a minute"})
                    return
                query = parse_qs(parts.query)
                now_s = daemon.clock()
                if parts.path == "/v1/pause":
                    daemon.store.set_paused(True)
                    change = "paused: GPUs back to their defaults, no node put to sleep"
                elif parts.path == "/v1/resume":
                    daemon.store.set_paused(False)
                    change = "resumed"
                elif parts.path == "/v1/exempt" and query.get("node"):
                    node = query["node"][0]
                    if node not in {n.name for n in daemon.body.cluster.nodes}:
                        self._json(400, {"error": f"unknown node {node!r}"})
                        return
                    exempt = query.get("exempt", ["true"])[0].lower() != "false"
                    daemon.store.set_exempt(node, exempt, now_s)
                    change = f"{node} {'exempt from' if exempt else 'managed by'} greengpu"
                elif parts.path == "/v1/exempt":
                    self._json(400, {"error": "expected ?node=NAME[&exempt=false]"})
                    return
                else:
                    self._json(404, {"error": "not found"})
                    return
                log.info("HTTP %s from %s: %s", parts.path, client, change)
                daemon.audit.write({"time_s": now_s, "kind": "http", "client": client, "change": change})
                self._json(200, {"ok": True, "change": change})

        self._server = BoundedHTTPServer(host, port, Handler, workers=workers, read_timeout_s=read_timeout_s,
                                         name="greengpu-daemon-http")

    @property
    def address(self) -> tuple[str, int]:
        host, port = self._server.server_address[:2]
        return str(host), int(port)

    @property
    def server(self) -> BoundedHTTPServer:
        return self._server

    def start(self) -> DaemonServer:
        self._server.start()
        return self

    def stop(self) -> None:
        self._server.stop()
