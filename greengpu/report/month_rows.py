"""The lines of a monthly report in the order every format shows them, shared by the text, CSV and HTML
renderers."""

from __future__ import annotations

import calendar
from typing import Any

from greengpu.accounting.bill import IDLE


def month_seconds(period: str) -> int:
    """Seconds in the UTC calendar month 'YYYY-MM'."""
    year, month = (int(part) for part in period.split("-"))
    return calendar.monthrange(year, month)[1] * 86_400


def all_rows(payload: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    """(kind, name, figures) of the rows, then idle (when any is left) and the total."""
    rows = [("row", r["name"], r) for r in payload["rows"]]
    idle = payload["idle"]
    if payload["share_idle"] == "none" and payload["aggregate"] != "node" or any(
            v for k, v in idle.items() if isinstance(v, float)):
        rows.append(("idle", IDLE, idle))
    return [*rows, ("total", "TOTAL", payload["totals"])]
