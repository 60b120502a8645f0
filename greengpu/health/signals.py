"""Per-GPU health samples and the short history a risk score is computed from.

A `GpuHealthSample` is what one read of a GPU says about its health, in greengpu's units; `None`
means the GPU does not report that signal (NVML NotSupported), which is never read as "no errors".
Counters are NVML's cumulative counters; the score looks at how much they grew inside the window,
not at their totals, so a GPU that had errors long ago and is steady now is not penalised.

Critical events (an uncorrectable memory error, a critical Xid, a failed row remap) are latched:
they stay on the history after they leave the window, until `clear_critical` (the GPU was repaired
or replaced). A GPU that has shown one has shown what it is.
"""

from __future__ import annotations

from dataclasses import dataclass

SLOWDOWN_REASON_BITS = 0x8 | 0x40 | 0x80
"""NVML clock event reasons HwSlowdown (0x8), HwThermalSlowdown (0x40) and HwPowerBrakeSlowdown (0x80):
the hardware itself pulled the clocks down (overheating, a failing power supply or an external power
brake), as opposed to greengpu's own cap (SwPowerCap) or idling."""

CRITICAL_XIDS = frozenset({48, 63, 64, 74, 79, 92, 94, 95, 119, 120, 123, 140})
"""Xids that mean the GPU, not the application, is at fault (NVIDIA's Xid catalogue): 48 double-bit ECC
error, 63/64 row-remapping or page-retirement event/failure, 74 NVLink error, 79 GPU fallen off the bus,
92 high single-bit ECC rate, 94/95 contained/uncontained ECC error, 119/120 GSP errors, 123 SPI PMU
RPC failure, 140 unrecovered ECC error. Application faults (13, 31, 43, 45) are not health signals."""


@dataclass(frozen=True)
class GpuHealthSample:
    """One health read of one GPU at `time_s`."""

    time_s: float
    ecc_corrected_total: int | None = None
    """Single-bit (corrected) ECC errors, aggregate counter (survives driver reloads)."""
    ecc_uncorrected_total: int | None = None
    """Double-bit (uncorrected) ECC errors, aggregate counter."""
    retired_pages_sbe: int | None = None
    """Pages retired after repeated single-bit errors (pre-Ampere page retirement)."""
    retired_pages_dbe: int | None = None
    """Pages retired after a double-bit error."""
    remapped_rows_correctable: int | None = None
    """Rows remapped after correctable errors (Ampere and later row remapping)."""
    remapped_rows_uncorrectable: int | None = None
    remap_pending: bool | None = None
    """A remap waits for a GPU reset to take effect."""
    remap_failure: bool | None = None
    """A row could not be remapped: the memory has run out of spare rows."""
    temperatures_c: tuple[float, ...] = ()
    """The GPU's temperature sensors (die and memory) read at this time."""
    pcie_replays_total: int | None = None
    clock_event_reasons: int | None = None
    xids: tuple[int, ...] = ()
    """Xid events reported since the previous sample."""


@dataclass(frozen=True)
class CriticalEvent:
    """An event that alone makes a GPU `failing`."""

    time_s: float
    signal: str
    detail: str


def counter_increase(values: list[tuple[float, int | None]]) -> int | None:
    """How much a cumulative counter grew over time-ordered readings; None when never reported.

    A drop is a reset (a driver reload clears volatile counters, a GPU swap starts again at zero):
    the value after it is all new growth.
    """
    present = [v for _, v in values if v is not None]
    if not present:
        return None
    growth = 0
    for before, after in zip(present, present[1:], strict=False):
        growth += after - before if after >= before else after
    return growth


class SignalHistory:
    """The samples of one GPU inside a sliding window, and its latched critical events."""

    def __init__(self, window_s: float) -> None:
        if not window_s > 0:
            raise ValueError(f"window_s must be positive, got {window_s!r}")
        self.window_s = window_s
        self._samples: list[GpuHealthSample] = []
        self._critical: list[CriticalEvent] = []

    @property
    def samples(self) -> tuple[GpuHealthSample, ...]:
        return tuple(self._samples)

    @property
    def critical(self) -> tuple[CriticalEvent, ...]:
        return tuple(self._critical)

    def add(self, sample: GpuHealthSample) -> None:
        """Add a sample (at or after the last one), latch its critical events and trim the window.

        One sample before the window is kept as the baseline its first counter increase is taken from.
        """
        if self._samples and sample.time_s < self._samples[-1].time_s:
            raise ValueError(f"sample at {sample.time_s} s is older than the last one at "
                             f"{self._samples[-1].time_s} s")
        previous = self._samples[-1] if self._samples else None
        self._latch(previous, sample)
        self._samples.append(sample)
        start_s = sample.time_s - self.window_s
        first_inside = next(i for i, s in enumerate(self._samples) if s.time_s >= start_s)
        del self._samples[: max(0, first_inside - 1)]

    def clear_critical(self) -> None:
        """Forget the latched critical events (the GPU was repaired or replaced)."""
        self._critical.clear()

    def _latch(self, previous: GpuHealthSample | None, sample: GpuHealthSample) -> None:
        now = sample.time_s
        for xid in sample.xids:
            if xid in CRITICAL_XIDS:
                self._critical.append(CriticalEvent(now, "xid_critical", f"Xid {xid}"))
        if sample.remap_failure and not any(e.signal == "row_remap_failure" for e in self._critical):
            self._critical.append(CriticalEvent(now, "row_remap_failure", "row remapping failed: no spare rows"))
        if previous is None:
            return
        for name, before, after in (
            ("uncorrectable ECC errors", previous.ecc_uncorrected_total, sample.ecc_uncorrected_total),
            ("pages retired for double-bit errors", previous.retired_pages_dbe, sample.retired_pages_dbe),
            ("rows remapped for uncorrectable errors", previous.remapped_rows_uncorrectable,
             sample.remapped_rows_uncorrectable),
        ):
            if before is not None and after is not None:
                grew = after - before if after >= before else after
                if grew > 0:
                    self._critical.append(CriticalEvent(now, "uncorrectable_ecc", f"{grew} new {name}"))
