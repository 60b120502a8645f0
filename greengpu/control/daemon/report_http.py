"""`POST /v1/report` on the daemon's HTTP server: a node agent's report read within its bound, checked, stored.

The caller (greengpu.control.daemon.http_api) has checked the bearer token already. A body larger than
`MAX_REPORT_BYTES` is refused before it is read (413), a report that is not one is a 400 with the one
line naming the field, and nothing a client sends can raise past this.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from email.message import Message
from typing import TYPE_CHECKING, Protocol

from greengpu.control.daemon.agent_reports import MAX_REPORT_BYTES, ReportError, parse_report

if TYPE_CHECKING:
    from greengpu.control.daemon.service import Daemon

log = logging.getLogger("greengpu.daemon")


class Readable(Protocol):
    def read(self, size: int = -1, /) -> bytes: ...


def read_report(daemon: Daemon, headers: Message, body: Readable, client: str,
                allow: Callable[[str], bool]) -> tuple[int, dict[str, object]]:
    """(status, answer) of one report."""
    metrics = daemon.metrics.reports
    length_text = headers.get("Content-Length", "")
    if not length_text.isdigit():
        metrics.labels("refused").inc()
        return 411, {"error": "a report needs a Content-Length"}
    length = int(length_text)
    if length > MAX_REPORT_BYTES:
        metrics.labels("refused").inc()
        return 413, {"error": f"a report is at most {MAX_REPORT_BYTES} bytes"}
    if not allow(client):
        metrics.labels("refused").inc()
        return 429, {"error": "too many reports a minute from this address"}
    data = body.read(length)
    if len(data) != length:
        metrics.labels("refused").inc()
        return 400, {"error": "the report ended before its Content-Length"}
    gpus_of = {n.name: daemon.body.cluster.node_types[n.type_name].gpus for n in daemon.body.cluster.nodes}
    try:
        report = parse_report(data, gpus_of)
    except ReportError as error:
        metrics.labels("bad").inc()
        log.warning("bad agent report from %s: %s", client, error)
        return 400, {"error": str(error)}
    daemon.reports.reports.put(report, daemon.clock())
    metrics.labels("ok").inc()
    return 200, {"ok": True, "node": report.node}
