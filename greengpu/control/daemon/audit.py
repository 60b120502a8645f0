"""Every action the daemon takes, and every alert, written where a person can trace it.

The audit log is JSON lines: time, action kind, node, GPU, job, tenant, the rule that chose it (the
tick's reason), the outcome, and for a preemption the victim's last checkpoint. A write that follows a
torn last line (a writer killed mid-line) starts on a fresh line, as the agent's journal does, so the
torn line cannot swallow the next record; reading skips torn lines.

Alerts go to the log and, when a webhook URL is given, are POSTed as JSON with retries and a doubling
backoff; a webhook that stays down costs log lines, never a tick: raising an alert never raises, and
the daemon delivers them from a thread of its own (`background=True`), so a slow webhook cannot hold a
tick or the GPU release that a failed tick does first.
"""

from __future__ import annotations

import json
import logging
import os
import queue
import threading
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import IO
from urllib.parse import urlsplit

from greengpu.errors import BadInput
from greengpu.json_types import JsonObject, JsonValue

log = logging.getLogger("greengpu.daemon")

WEBHOOK_TRIES = 4
WEBHOOK_FIRST_BACKOFF_S = 0.5
WEBHOOK_TIMEOUT_S = 5.0
WEBHOOK_QUEUE = 100
"""Alerts waiting for a background delivery; more are logged and counted as undelivered, not held."""


def check_webhook_url(url: str | None, flag: str, example: str = "https://alerts.example.org/greengpu") -> str | None:
    """`url` when it is an http(s) URL with a host (or None); BadInput naming `flag` otherwise. Checked at
    start, so that the first alert is not where a typo shows (it used to raise there, before the GPUs
    were released)."""
    if url is None:
        return None
    try:
        parts = urlsplit(url)
        host = parts.hostname
        parts.port  # noqa: B018 - raises ValueError on a port out of range
    except ValueError as error:
        raise BadInput(f"{flag} {url!r}: not a URL ({error})") from None
    if parts.scheme not in ("http", "https") or not host or any(c.isspace() for c in url):
        raise BadInput(f"{flag} {url!r}: expected an http:// or https:// URL with a host, for example {example}")
    return url


class AuditLog:
    """Append-only JSON lines at `path`."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.path.parent.mkdir(parents=True, exist_ok=True)

    def write(self, record: JsonObject) -> None:
        self.write_many([record])

    def write_many(self, records: list[JsonObject]) -> None:
        if not records:
            return
        text = "".join(json.dumps(record, sort_keys=True) + "\n" for record in records)
        with open(self.path, "a+b") as handle:
            handle.write((("\n" if torn_end(handle) else "") + text).encode("utf-8"))

    def records(self) -> list[JsonObject]:
        """Every whole record, in order; torn or damaged lines are skipped."""
        if not self.path.exists():
            return []
        found = []
        for line in self.path.read_text(encoding="utf-8", errors="replace").splitlines():
            try:
                record = json.loads(line) if line.strip() else None
            except ValueError:
                continue
            if isinstance(record, dict):
                found.append(record)
        return found


def torn_end(handle: IO[bytes]) -> bool:
    """Whether the file open in `handle` (binary, append) ends without a newline: a torn last line. Leaves
    the position at the end."""
    handle.seek(0, os.SEEK_END)
    if handle.tell() == 0:
        return False
    handle.seek(-1, os.SEEK_END)
    last: bytes = handle.read(1)
    handle.seek(0, os.SEEK_END)
    return last != b"\n"


class Alerts:
    """Alerts to the log, the audit log and an optional webhook."""

    def __init__(self, audit: AuditLog, webhook_url: str | None = None,
                 sleep: Callable[[float], None] = time.sleep, *, background: bool = False) -> None:
        """`background`: deliver to the webhook from a thread of its own (the daemon), not in the caller."""
        self.audit = audit
        self.webhook_url = webhook_url
        self._sleep = sleep
        self.sent = 0
        self.undelivered = 0
        self._queue: queue.Queue[JsonObject] | None = None
        if background and webhook_url:
            self._queue = queue.Queue(WEBHOOK_QUEUE)
            threading.Thread(target=self._deliver, name="greengpu-alert-webhook", daemon=True).start()

    def raise_alert(self, kind: str, message: str, now_s: float, **fields: JsonValue) -> None:
        """Log, audit and post one alert. Never raises: an alert is what a failure does, not a new one."""
        record = {"time_s": now_s, "alert": kind, "message": message, **fields}
        log.error("ALERT %s: %s", kind, message)
        try:
            self.audit.write(record)
        except OSError as error:  # a full disk: the log line above still says it
            log.error("alert not written to the audit log %s: %s", self.audit.path, error)
        if not self.webhook_url:
            return
        if self._queue is None:
            self._post(record)
            return
        try:
            self._queue.put_nowait(record)
        except queue.Full:
            self.undelivered += 1
            log.error("alert webhook: %d alerts already waiting; this one is not posted", WEBHOOK_QUEUE)

    def _deliver(self) -> None:
        assert self._queue is not None
        while True:
            self._post(self._queue.get())

    def _post(self, record: JsonObject) -> None:
        body = json.dumps(record).encode()
        backoff_s = WEBHOOK_FIRST_BACKOFF_S
        for attempt in range(1, WEBHOOK_TRIES + 1):
            request = urllib.request.Request(self.webhook_url or "", data=body, method="POST",
                                             headers={"Content-Type": "application/json"})
            try:
                with urllib.request.urlopen(request, timeout=WEBHOOK_TIMEOUT_S) as answer:
                    if 200 <= answer.status < 300:
                        self.sent += 1
                        return
            except Exception as error:  # noqa: BLE001 - any failure to deliver is a retry, never the caller's
                log.warning("alert webhook attempt %d failed: %s", attempt, error)
            if attempt < WEBHOOK_TRIES:
                self._sleep(backoff_s)
                backoff_s *= 2
        self.undelivered += 1
        log.error("alert webhook: gave up after %d attempts", WEBHOOK_TRIES)
