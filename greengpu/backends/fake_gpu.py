"""The fake NVML's simulated GPUs: fixed properties from vendor data sheets, the state the fake keeps
(limit, locked clock, load, counters, health signals), and the presets `--fake-gpus 4xA100` names.

`FakeGpu.name` is the name NVML reports; the fake's MIG (greengpu.backends.fake_nvml_mig) finds a
model's MIG geometry from it, so a preset with `A100`, `A30`, `H100` or `H200` in its name has MIG.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NotRequired, TypedDict

MIB = 1024 * 1024


@dataclass
class FakeGpu:
    """One simulated GPU: its fixed properties and its mutable state."""

    name: str
    min_limit_w: float
    max_limit_w: float
    default_limit_w: float
    idle_w: float
    draw_w: float
    """Power at full utilisation with no cap (a decode-bound LLM may draw far less than the limit)."""
    max_sm_clock_mhz: int
    min_sm_clock_mhz: int = 210
    memory_total_bytes: int = 80 * 1024 * MIB
    has_energy_counter: bool = True
    has_ecc: bool = True
    can_lock_clocks: bool = True
    memory_clock_mhz: int = 1593
    uuid: str = ""
    # state
    limit_w: float = 0.0
    locked_clock_mhz: int | None = None
    utilization: float = 0.0
    pids: list[int] = field(default_factory=list)
    energy_mj: float = 0.0
    ecc_uncorrected: int = 0
    ecc_corrected: int = 0
    updated_s: float | None = None
    # health signals (docs/HEALTH.md); None or False: the GPU does not report it
    page_retirement: bool = False
    """Pre-Ampere dynamic page retirement (nvmlDeviceGetRetiredPages)."""
    row_remapping: bool = True
    """Ampere and later row remapping (nvmlDeviceGetRemappedRows)."""
    retired_pages_sbe: list[int] = field(default_factory=list)
    retired_pages_dbe: list[int] = field(default_factory=list)
    remapped_rows_correctable: int = 0
    remapped_rows_uncorrectable: int = 0
    remap_pending: bool = False
    remap_failure: bool = False
    memory_temp_offset_c: float | None = 3.0
    """Memory (HBM) temperature above the die's; None: no memory sensor (GDDR cards)."""
    pcie_replays: int = 0
    hw_slowdown_reasons: int = 0
    """Hardware slowdown clock event reason bits forced on (thermal, power brake)."""
    xid_events: bool = True

    def power_w(self) -> float:
        return min(self._demand_w(), self.limit_w)

    def _demand_w(self) -> float:
        fraction = 1.0 if self.locked_clock_mhz is None else self.locked_clock_mhz / self.max_sm_clock_mhz
        return self.idle_w + (self.draw_w - self.idle_w) * self.utilization * fraction * fraction

    def cap_binds(self) -> bool:
        return self._demand_w() > self.limit_w


# Figures from vendor data sheets; draw_w at full load uncapped.
class Preset(TypedDict):
    """A model's data-sheet figures: FakeGpu's fields a preset sets."""

    name: str
    min_limit_w: float
    max_limit_w: float
    default_limit_w: float
    idle_w: float
    draw_w: float
    max_sm_clock_mhz: int
    memory_total_bytes: NotRequired[int]
    has_energy_counter: NotRequired[bool]
    has_ecc: NotRequired[bool]
    can_lock_clocks: NotRequired[bool]
    page_retirement: NotRequired[bool]
    row_remapping: NotRequired[bool]
    memory_temp_offset_c: NotRequired[float | None]
    xid_events: NotRequired[bool]


PRESETS: dict[str, Preset] = {
    "A100": Preset(name="NVIDIA A100-SXM4-80GB", min_limit_w=100, max_limit_w=400, default_limit_w=400, idle_w=52,
                   draw_w=400, max_sm_clock_mhz=1410),
    "A100-40": Preset(name="NVIDIA A100-SXM4-40GB", min_limit_w=100, max_limit_w=400, default_limit_w=400, idle_w=52,
                      draw_w=400, max_sm_clock_mhz=1410, memory_total_bytes=40 * 1024 * MIB),
    "A30": Preset(name="NVIDIA A30", min_limit_w=100, max_limit_w=165, default_limit_w=165, idle_w=30, draw_w=165,
                  max_sm_clock_mhz=1440, memory_total_bytes=24 * 1024 * MIB),
    "H100": Preset(name="NVIDIA H100 80GB HBM3", min_limit_w=200, max_limit_w=700, default_limit_w=700, idle_w=70,
                   draw_w=700, max_sm_clock_mhz=1980),
    "H200": Preset(name="NVIDIA H200", min_limit_w=200, max_limit_w=700, default_limit_w=700, idle_w=75,
                   draw_w=700, max_sm_clock_mhz=1980, memory_total_bytes=141 * 1024 * MIB),
    "V100": Preset(name="Tesla V100-SXM2-32GB", min_limit_w=100, max_limit_w=300, default_limit_w=300, idle_w=40,
                   draw_w=300, max_sm_clock_mhz=1530, memory_total_bytes=32 * 1024 * MIB, page_retirement=True,
                   row_remapping=False),
    # Pascal: no energy counter, no clock locking (both arrived with Volta).
    "P100": Preset(name="Tesla P100-PCIE-16GB", min_limit_w=125, max_limit_w=250, default_limit_w=250, idle_w=30,
                   draw_w=250, max_sm_clock_mhz=1328, memory_total_bytes=16 * 1024 * MIB, has_energy_counter=False,
                   can_lock_clocks=False, page_retirement=True, row_remapping=False, xid_events=False),
    # A consumer card: no ECC.
    "RTX6000": Preset(name="Quadro RTX 6000", min_limit_w=100, max_limit_w=260, default_limit_w=260, idle_w=20,
                      draw_w=260, max_sm_clock_mhz=2100, memory_total_bytes=24 * 1024 * MIB, has_ecc=False,
                      row_remapping=False, memory_temp_offset_c=None),
}


def make_gpus(spec: str) -> list[FakeGpu]:
    """GPUs from a spec such as `4xA100` or `2xH200,1xP100`. Raises ValueError naming the bad part."""
    gpus: list[FakeGpu] = []
    for part in spec.split(","):
        count_text, _, model = part.strip().partition("x")
        if not count_text.isdigit() or model not in PRESETS:
            raise ValueError(f"{part.strip()!r}: expected COUNTxMODEL with MODEL one of {', '.join(PRESETS)}")
        for _ in range(int(count_text)):
            gpus.append(FakeGpu(**PRESETS[model]))
    return gpus
