"""What the NVML adapter's modules share: the one-line message for a signal a GPU does not support, what
greengpu does instead of each, and how NVML's field-value union is read."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pynvml

NOT_SUPPORTED_MESSAGE = "GPU {index}: NVML does not support '{what}' on this GPU (NotSupported): {fallback}"

_FALLBACKS = {
    "energy counter": "energy is integrated from power samples instead",
    "clock event reasons": "a binding cap is detected from power reaching the limit instead",
    "ECC counts": "ECC errors are not reported",
    "corrected ECC count": "single-bit ECC trends are not part of its health score",
    "uncorrected ECC count": "uncorrectable ECC errors are not part of its health score",
    "retired pages": "page retirement is not part of its health score (Ampere and later remap rows instead)",
    "remapped rows": "row remapping is not part of its health score (before Ampere pages are retired instead)",
    "PCIe replay counter": "PCIe replays are not part of its health score",
    "memory temperature": "the temperature spread is not part of its health score",
    "Xid events": "Xid events are not part of its health score",
    "lock the SM clocks": "clock locking is off for this GPU; power limits still apply",
    "reset the SM clocks": "clock locking is off for this GPU",
}


_FIELD_MEMBERS = {
    pynvml.NVML_VALUE_TYPE_DOUBLE: "dVal",
    pynvml.NVML_VALUE_TYPE_UNSIGNED_INT: "uiVal",
    pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG: "ulVal",
    pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG: "ullVal",
    pynvml.NVML_VALUE_TYPE_SIGNED_LONG_LONG: "sllVal",
    pynvml.NVML_VALUE_TYPE_SIGNED_INT: "siVal",
    pynvml.NVML_VALUE_TYPE_UNSIGNED_SHORT: "usVal",
}
"""Which member of NVML's value union a field value's `valueType` names."""


def _returns_true(fn: Callable[..., Any]) -> Callable[..., bool]:
    def call(*args: Any) -> bool:
        fn(*args)
        return True
    return call
