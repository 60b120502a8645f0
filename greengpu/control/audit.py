"""Every action the daemon takes, and every alert, written where a person can trace it.

The audit log is JSON lines: time, action kind, node, GPU, job, tenant, the rule that chose it (the
tick's reason), the outcome, and for a preemption the victim's last checkpoint. Alerts go to the log
and, when a webhook URL is given, are POSTed as JSON with retries and a doubling backoff; a webhook
that stays down costs log lines, never a tick.
"""

from __future__ import annotations

import json
import logging
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

log = logging.getLogger("greengpu.daemon")

WEBHOOK_TRIES = 4
WEBHOOK_FIRST_BACKOFF_S = 0.5
WEBHOOK_TIMEOUT_S = 5.0


class AuditLog:
    """Append-only JSON lines at `path`."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.path.parent.mkdir(parents=True, exist_ok=True)

    def write(self, record: dict[str, Any]) -> None:
        with open(self.path, "a", encoding="utf-8") as handle:
            handle.write(json.dumps(record, sort_keys=True) + "\n")

    def records(self) -> list[dict[str, Any]]:
        if not self.path.exists():
            return []
        return [json.loads(line) for line in self.path.read_text(encoding="utf-8").splitlines() if line.strip()]


class Alerts:
    """Alerts to the log, the audit log and an optional webhook."""

    def __init__(self, audit: AuditLog, webhook_url: str | None = None,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.audit = audit
        self.webhook_url = webhook_url
        self._sleep = sleep
        self.sent = 0
        self.undelivered = 0

    def raise_alert(self, kind: str, message: str, now_s: float, **fields: Any) -> None:
        record = {"time_s": now_s, "alert": kind, "message": message, **fields}
        log.error("ALERT %s: %s", kind, message)
        self.audit.write(record)
        if self.webhook_url:
            self._post(record)

    def _post(self, record: dict[str, Any]) -> None:
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
            except (urllib.error.URLError, OSError) as error:
                log.warning("alert webhook attempt %d failed: %s", attempt, error)
            if attempt < WEBHOOK_TRIES:
                self._sleep(backoff_s)
                backoff_s *= 2
        self.undelivered += 1
        log.error("alert webhook: gave up after %d attempts", WEBHOOK_TRIES)
