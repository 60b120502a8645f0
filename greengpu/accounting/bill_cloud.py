"""The cloud's spend and the chargeback in a month's bill (greengpu.accounting.bill): figures added to the
totals and to the rows, so that idle (the totals less the rows) takes the rest and everything adds up.

By tenant, a tenant's row carries its jobs' share of the cloud nodes (greengpu.accounting.cloud_rows); the
paid node time no job used stays in idle. By node, class or job the ledger keeps no such split of the cloud:
all of it stays in idle (docs/REPORT.md). Chargeback is billed on allocated GPU-hours only: idle's is 0.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from greengpu.accounting.cloud_rows import CloudHour

CLOUD_KEYS = ("cloud_node_hours", "cloud_cost", "cloud_co2_kg")


def add_cloud(totals: dict[str, float], rows: dict[str, dict[str, float]], cloud: Sequence[CloudHour],
              aggregate: str) -> list[str]:
    """Add the cloud's figures in place; the keys added (always all three: 0 where a month had none)."""
    totals["cloud_node_hours"] = math.fsum(c.node_hours for c in cloud)
    totals["cloud_cost"] = math.fsum(c.cost for c in cloud)
    totals["cloud_co2_kg"] = math.fsum(c.co2_kg for c in cloud)
    if aggregate == "tenant":
        for hour in cloud:
            if not hour.tenant:
                continue
            row = rows.setdefault(hour.tenant, {})
            row["cloud_node_hours"] = row.get("cloud_node_hours", 0.0) + hour.node_hours
            row["cloud_cost"] = row.get("cloud_cost", 0.0) + hour.cost
            row["cloud_co2_kg"] = row.get("cloud_co2_kg", 0.0) + hour.co2_kg
    return list(CLOUD_KEYS)


def add_chargeback(totals: dict[str, float], rows: dict[str, dict[str, float]],
                   chargeback: dict[str, float] | None) -> list[str]:
    """Add each row's chargeback in place (rows it names that the bill lacks are added); the key added."""
    if chargeback is None:
        return []
    for name, amount in chargeback.items():
        rows.setdefault(name, {})["chargeback"] = amount
    totals["chargeback"] = math.fsum(chargeback.values())
    return ["chargeback"]
