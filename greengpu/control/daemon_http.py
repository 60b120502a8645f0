"""The daemon's HTTP face: `/metrics`, `/healthz`, `/v1/status`, and the few endpoints that change anything.

`GET /v1/waiting` is what the node agents ask each tick: the jobs that wait for capacity at the last
good tick, and when that was (`--waiting-from` on the agent).

`POST /v1/pause`, `/v1/resume` and `/v1/exempt?node=NAME[&exempt=false]` need `Authorization: Bearer
TOKEN`, the token read from `--token-file` (without one they answer 403: nothing changes over HTTP),
are rate-limited per client address, and are logged with the client and the change, never the token.
Loopback by default.
"""

from __future__ import annotations

import hmac
import json
import logging
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from prometheus_client import generate_latest

from greengpu.control.daemon import Daemon

log = logging.getLogger("greengpu.daemon")

CHANGES_PER_MINUTE = 10
"""Changing requests a client may make per minute (a script in a loop must not flap the cluster)."""


def read_token(path: str | Path) -> str:
    """The bearer token in `path` (surrounding whitespace dropped); ValueError when it is empty."""
    token = Path(path).read_text(encoding="utf-8").strip()
    if len(token) < 16:
        raise ValueError(f"{path}: the token must be at least 16 characters")
    return token


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
    """The HTTP server in a background thread; binds at once (an address in use raises OSError here)."""

    def __init__(self, daemon: Daemon, host: str, port: int, health: Callable[[], str | None],
                 token: str | None = None, limit: RateLimit | None = None) -> None:
        limiter = limit or RateLimit(CHANGES_PER_MINUTE)

        class Handler(BaseHTTPRequestHandler):
            def _answer(self, status: int, body: bytes, content_type: str = "application/json") -> None:
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def _json(self, status: int, value: Any) -> None:
                self._answer(status, (json.dumps(value, sort_keys=True) + "\n").encode())

            def do_GET(self) -> None:  # noqa: N802 (the http.server API)
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
                else:
                    self._json(404, {"error": "not found"})

            def do_POST(self) -> None:  # noqa: N802
                parts = urlsplit(self.path)
                client = self.client_address[0]
                if token is None:
                    self._json(403, {"error": "changes over HTTP are off: start the daemon with --token-file"})
                    return
                given = self.headers.get("Authorization", "")
                if not hmac.compare_digest(given.encode(), f"Bearer {token}".encode()):
                    log.warning("HTTP %s %s from %s refused: bad or missing bearer token", "POST", parts.path, client)
                    self._json(401, {"error": "a bearer token is required"})
                    return
                if not limiter.allow(client):
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
                else:
                    self._json(404, {"error": "not found"})
                    return
                log.info("HTTP %s from %s: %s", parts.path, client, change)
                daemon.audit.write({"time_s": now_s, "kind": "http", "client": client, "change": change})
                self._json(200, {"ok": True, "change": change})

            def log_message(self, format: str, *args: object) -> None:  # requests are logged where they matter
                return

        self._server = ThreadingHTTPServer((host, port), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="greengpu-daemon-http", daemon=True)

    @property
    def address(self) -> tuple[str, int]:
        host, port = self._server.server_address[:2]
        return str(host), int(port)

    def start(self) -> DaemonServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
