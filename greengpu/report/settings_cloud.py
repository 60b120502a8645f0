"""Report settings `carbon: cloud:` (docs/REPORT.md): the grid intensity of the cloud pools' regions, so that
the cloud's CO2 is charged at its own region's intensity instead of the site's (the replay's fallback for a
region with no series, docs/LEDGER.md). Every error is one line naming the file, line and key."""

from __future__ import annotations

from dataclasses import dataclass

from greengpu.config.fields import Fields

MAX_G_PER_KWH = 5000.0
"""No grid emits more than this per kWh (coal is about 1000): a larger figure is a typo."""


@dataclass(frozen=True)
class CloudCarbon:
    g_per_kwh_by_region: dict[str, float]
    source: str


def read_cloud_carbon(carbon: Fields) -> CloudCarbon | None:
    """`carbon: cloud: {regions: {REGION: g_per_kwh}, source: ...}` (None: not given)."""
    fields = carbon.sub("cloud")
    if fields is None:
        return None
    fields.reject_unknown(("regions", "source"))
    regions = fields.sub("regions", required=True)
    assert regions is not None
    out: dict[str, float] = {}
    for name in regions.data:
        if not isinstance(name, str) or not name.strip():
            raise regions.error(None, f"a region must be named by text, got {str(name)[:40]!r}")
        out[name] = regions.req_number(name, minimum=0.0, maximum=MAX_G_PER_KWH)
    if not out:
        raise fields.error("regions", "name at least one region and its g_per_kwh")
    source = fields.string("source", required=True)
    assert source is not None
    return CloudCarbon(out, source)
