"""Report settings `chargeback:` (docs/REPORT.md): prices per GPU-hour by GPU model and per instance-hour by
MIG instance profile. Every error is one line naming the file, line and key."""

from __future__ import annotations

from greengpu.accounting.chargeback import ChargebackRates
from greengpu.config.fields import Fields

MAX_RATE = 1_000_000.0
"""A price per GPU-hour above this is a typo, not a price."""


def _rates(fields: Fields, key: str) -> dict[str, float]:
    sub = fields.sub(key)
    if sub is None:
        return {}
    out: dict[str, float] = {}
    for name in sub.data:
        if not isinstance(name, str) or not name.strip():
            raise sub.error(None, f"a name must be text, got {str(name)[:40]!r}")
        out[name] = sub.req_number(name, minimum=0.0, maximum=MAX_RATE)
    return out


def read_chargeback(root: Fields) -> ChargebackRates | None:
    """The `chargeback:` mapping of the settings (None: not given)."""
    fields = root.sub("chargeback")
    if fields is None:
        return None
    fields.reject_unknown(("per_gpu_hour", "per_instance"))
    per_gpu_hour = _rates(fields, "per_gpu_hour")
    per_instance = _rates(fields, "per_instance")
    if not per_gpu_hour and not per_instance:
        raise fields.error(None, "give per_gpu_hour (GPU model: price, and `default`) or per_instance (MIG "
                                 "profile: price)")
    return ChargebackRates(per_gpu_hour, per_instance)
