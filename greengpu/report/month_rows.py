"""The lines of a monthly report in the order every format shows them, shared by the text, CSV and HTML
renderers."""

from __future__ import annotations

import calendar

from greengpu.accounting.bill import IDLE
from greengpu.report.month_types import Figures, MonthReport


def month_seconds(period: str) -> int:
    """Seconds in the UTC calendar month 'YYYY-MM'."""
    year, month = (int(part) for part in period.split("-"))
    return calendar.monthrange(year, month)[1] * 86_400


def all_rows(payload: MonthReport) -> list[tuple[str, str, Figures]]:
    """(kind, name, figures) of the rows, then idle (when any is left) and the total."""
    rows = [("row", str(r["name"]), r) for r in payload["rows"]]
    idle = payload["idle"]
    if payload["share_idle"] == "none" and payload["aggregate"] != "node" or any(
            v for k, v in idle.items() if isinstance(v, float)):
        rows.append(("idle", IDLE, idle))
    return [*rows, ("total", "TOTAL", payload["totals"])]
