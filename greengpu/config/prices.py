"""Cloud GPU prices from a CSV in the shape of SkyPilot's public catalog (docs/INVENTORY.md).

One row per instance type and availability zone: `InstanceType, AcceleratorName, AcceleratorCount, ...,
Price, SpotPrice, Region, AvailabilityZone`, extra columns ignored and in any order. `Price` is the
on-demand price of the whole instance per hour, `SpotPrice` the spot price in that zone (empty: no spot
quote). An inventory pool names an instance type, optionally a region and a zone; its price per
node-hour is the dearest quote among the rows that match, so a pool that may launch in any zone of a
region is never costed below what it may pay (name the zone for its exact price).

This module reads files, so it sits with the other readers in greengpu.config (which the inventory
uses); the spot decisions take the per-GPU-hour prices it gives and never read a file.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from greengpu.config.limits import OutOfRange, finite_number
from greengpu.config.series import config_csv
from greengpu.config.yamlsource import shown
from greengpu.errors import ConfigError

REQUIRED_COLUMNS = ("InstanceType", "AcceleratorCount", "Price", "SpotPrice", "Region")
"""What a price file must have; `AvailabilityZone` and `AcceleratorName` are read when present."""
MAX_ACCELERATORS = 1024.0
"""Most GPUs one instance may have (the largest cloud instances have 16)."""


@dataclass(frozen=True)
class PriceRow:
    """One catalog row: an instance type in one zone, prices per node-hour (None: no quote)."""

    line: int
    instance_type: str
    accelerator: str
    gpus: float | None
    on_demand_per_hour: float | None
    spot_per_hour: float | None
    region: str
    zone: str


@dataclass(frozen=True)
class PoolPrices:
    """The price of one pool's instance type (per node-hour and per GPU-hour), on demand and spot.

    Each price is the dearest quote of the matching rows; None when no matching row quotes it.
    `lines` are the rows that matched (for messages and `greengpu check`).
    """

    file: str
    instance_type: str
    region: str | None
    zone: str | None
    gpus_per_node: float
    on_demand_per_node_hour: float | None
    spot_per_node_hour: float | None
    lines: tuple[int, ...]

    @property
    def on_demand_per_gpu_hour(self) -> float | None:
        return None if self.on_demand_per_node_hour is None else self.on_demand_per_node_hour / self.gpus_per_node

    @property
    def spot_per_gpu_hour(self) -> float | None:
        return None if self.spot_per_node_hour is None else self.spot_per_node_hour / self.gpus_per_node

    def per_node_hour(self, spot: bool) -> float | None:
        """The price a spot (or on-demand) pool of this instance type pays per node-hour."""
        return self.spot_per_node_hour if spot else self.on_demand_per_node_hour


@dataclass(frozen=True)
class PriceTable:
    """Every row of one price file."""

    file: str
    rows: tuple[PriceRow, ...]

    def matching(self, instance_type: str, region: str | None = None, zone: str | None = None) -> list[PriceRow]:
        return [row for row in self.rows if row.instance_type == instance_type
                and (region is None or row.region == region) and (zone is None or row.zone == zone)]

    def pool_prices(self, instance_type: str, region: str | None = None, zone: str | None = None) -> PoolPrices:
        """The pool's prices; ValueError (a sentence for the inventory's error) when nothing matches or
        the matching rows disagree on the GPUs per instance."""
        rows = self.matching(instance_type, region, zone)
        if not rows:
            raise ValueError(self._no_match(instance_type, region, zone))
        counts = {row.gpus for row in rows}
        if None in counts:
            raise ValueError(f"{instance_type} has no AcceleratorCount in {self.file} (line {rows[0].line}): "
                             "not a GPU instance")
        if len(counts) > 1:
            raise ValueError(f"{instance_type} has different AcceleratorCount values in {self.file} "
                             f"(lines {rows[0].line} and {rows[-1].line})")
        gpus = rows[0].gpus
        assert gpus is not None
        on_demand = [row.on_demand_per_hour for row in rows if row.on_demand_per_hour is not None]
        spot = [row.spot_per_hour for row in rows if row.spot_per_hour is not None]
        return PoolPrices(file=self.file, instance_type=instance_type, region=region, zone=zone, gpus_per_node=gpus,
                          on_demand_per_node_hour=max(on_demand) if on_demand else None,
                          spot_per_node_hour=max(spot) if spot else None,
                          lines=tuple(row.line for row in rows))

    def _no_match(self, instance_type: str, region: str | None, zone: str | None) -> str:
        same_type = self.matching(instance_type)
        if not same_type:
            return f"instance type {instance_type!r} is not in {self.file}"
        where = " ".join(part for part in (region and f"region {region}", zone and f"zone {zone}") if part)
        regions = sorted({row.region for row in same_type})
        zones = sorted({row.zone for row in self.matching(instance_type, region) if row.zone})
        listed = f"zones there: {', '.join(zones)}" if region and zones else f"regions there: {', '.join(regions)}"
        return f"{instance_type} has no row for {where} in {self.file} ({listed})"


def read_price_csv(path: Path, shown_name: str) -> PriceTable:
    """Read a price file; one located ConfigError (file, line, column) for anything wrong in it."""
    with config_csv(path, shown_name) as handle:
        return PriceTable(file=shown_name, rows=tuple(_rows(handle, shown_name)))


def _rows(handle: TextIO, shown_name: str) -> list[PriceRow]:
    reader = csv.DictReader(handle)
    header = reader.fieldnames or []
    for column in REQUIRED_COLUMNS:
        if column not in header:
            raise ConfigError(shown_name, 1, column, f"missing column (header has: {', '.join(map(str, header))})")
    rows: list[PriceRow] = []
    for row in reader:
        line = reader.line_num
        if None in row:
            raise ConfigError(shown_name, line, "", f"{len(header) + len(row[None])} cells, the header has "
                                                    f"{len(header)}")
        missing = [column for column in REQUIRED_COLUMNS if row[column] is None]
        if missing:
            raise ConfigError(shown_name, line, missing[0], "missing cell (the row is shorter than the header)")
        instance_type = row["InstanceType"].strip()
        if not instance_type:
            raise ConfigError(shown_name, line, "InstanceType", "must not be empty")
        rows.append(PriceRow(
            line=line, instance_type=instance_type, accelerator=(row.get("AcceleratorName") or "").strip(),
            gpus=_number(row["AcceleratorCount"], shown_name, line, "AcceleratorCount", positive=True),
            on_demand_per_hour=_number(row["Price"], shown_name, line, "Price"),
            spot_per_hour=_number(row["SpotPrice"], shown_name, line, "SpotPrice"),
            region=row["Region"].strip(), zone=(row.get("AvailabilityZone") or "").strip()))
    if not rows:
        raise ConfigError(shown_name, None, "", "no data rows")
    return rows


def _number(raw: str, shown_name: str, line: int, column: str, *, positive: bool = False) -> float | None:
    """A cell's price or count: empty is None (no quote); otherwise finite, not negative (counts above 0)."""
    text = raw.strip()
    if not text:
        return None
    try:
        value = finite_number(float(text), maximum=MAX_ACCELERATORS if positive else 1e15)
    except OutOfRange as exc:
        raise ConfigError(shown_name, line, column, f"{exc}: {shown(raw)}") from None
    except ValueError:
        raise ConfigError(shown_name, line, column, f"not a number: {shown(raw)}") from None
    if value < 0 or (positive and value == 0):
        raise ConfigError(shown_name, line, column, f"must be {'above 0' if positive else 'at least 0'}, "
                                                    f"got {shown(raw)}")
    return value
