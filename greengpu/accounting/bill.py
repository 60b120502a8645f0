"""A month's bill from a ledger's hourly figures: rows by tenant, node, job class or job, the idle that no
job is charged for (kept apart or shared), priced at the report's tariff and carbon intensity.

Pure: the ledger's rows come in (greengpu.accounting.ledger reads them), a Bill goes out. The rules
(also in docs/REPORT.md):
- facility energy is the ledger's IT energy times the report's PUE (the run's PUE when none is given);
- every row-hour is priced at the price and intensity of its UTC hour (or keeps the ledger's own cost
  and CO2 when the report gives no tariff or carbon source);
- idle is the site total less the rows; `share_idle` hands it to the rows in proportion to their
  allocated GPU-hours (`proportional`) or in equal parts (`even`), or keeps it as its own row (`none`);
- every conserved figure is rounded so that the rows plus idle add up to the rounded total exactly
  (greengpu.accounting.rounding): a cent, a gram, a thousandth of a kWh and of a GPU-hour.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from greengpu.accounting.bill_cloud import add_chargeback, add_cloud
from greengpu.accounting.carbon import Embodied, IntensitySource, MarketInstruments, market_co2_kg
from greengpu.accounting.cloud_rows import CloudHour
from greengpu.accounting.rounding import as_decimal, conserving_units
from greengpu.accounting.tariffs import PriceSource

HOUR_S = 3600.0
DAY_S = 86_400.0
AGGREGATES = ("tenant", "node", "class", "job")
SHARE_RULES = ("none", "proportional", "even")
IDLE = "(idle)"

UNITS = {"cloud_node_hours": 0.001, "cloud_cost": 0.01, "cloud_co2_kg": 0.001, "chargeback": 0.01, "total_cost": 0.01,
         "gpu_hours": 0.001, "gpu_hours_allocated": 0.001, "gpu_energy_kwh": 0.001, "energy_kwh": 0.001,
         "idle_energy_kwh": 0.001, "cost": 0.01, "co2_kg": 0.001, "co2_market_kg": 0.001, "embodied_kg": 0.001}
"""The figures that rows plus idle conserve, and the unit each is rounded to (a cent; a gram of CO2)."""


@dataclass(frozen=True)
class HourFigures:
    """One ledger row of an hour: a tenant's, a node's, or the whole site's (key '')."""

    hour_start_s: float
    key: str
    gpu_hours: float
    gpu_energy_kwh: float
    energy_kwh: float  # facility, at the run's PUE
    cost: float
    co2_kg: float


@dataclass(frozen=True)
class JobSegment:
    """One run segment of a job (ledger table job_runs)."""

    job_id: str
    tenant: str
    job_class: str
    start_s: float
    end_s: float
    gpus: float
    nodes: tuple[str, ...]
    gpu_energy_kwh: float
    energy_kwh: float
    cost: float
    co2_kg: float


@dataclass(frozen=True)
class Pricing:
    """How the report prices energy. None for price or carbon: keep the ledger's own figures."""

    run_pue: float
    price: PriceSource | None = None
    carbon: IntensitySource | None = None
    pue: float | None = None
    market: MarketInstruments | None = None
    embodied: Embodied | None = None

    @property
    def pue_factor(self) -> float:
        """Facility energy of the report over the ledger's (same IT energy, another PUE)."""
        return 1.0 if self.pue is None else self.pue / self.run_pue


@dataclass
class MonthInput:
    """What the ledger holds for one run and one month."""

    start_s: float
    end_s: float
    site_hours: list[HourFigures]
    tenant_hours: list[HourFigures]
    node_hours: list[HourFigures]
    segments: list[JobSegment]
    cloud_hours: list[CloudHour] = field(default_factory=list)
    """The cloud's rows of the month (schema 3)."""
    chargeback: dict[str, float] | None = None
    """Per row, its chargeback (None: no chargeback rates in the report settings)."""


@dataclass
class Row:
    name: str
    figures: dict[str, float]
    jobs: dict[str, int] = field(default_factory=dict)

    @property
    def efficiency(self) -> float | None:
        billed = self.figures["gpu_hours"]
        return None if billed <= 0 else round(self.figures["gpu_hours_allocated"] / billed, 4)

    @property
    def idle_share(self) -> float | None:
        energy = self.figures["energy_kwh"]
        return None if energy <= 0 else round(self.figures["idle_energy_kwh"] / energy, 4)


@dataclass
class Bill:
    aggregate: str
    share_idle: str
    rows: list[Row]
    idle: dict[str, float]
    totals: dict[str, float]
    days: list[dict[str, float]]
    market_factor_g_per_kwh: float | None
    keys: tuple[str, ...]


def _priced(hour: HourFigures, pricing: Pricing, effective: dict[float, tuple[float, float]] | None = None
            ) -> dict[str, float]:
    """The figures of one row-hour at the report's PUE, price and intensity."""
    energy = hour.energy_kwh * pricing.pue_factor
    if pricing.price is not None:
        cost = energy * pricing.price.price_per_kwh(hour.hour_start_s)
    elif effective is not None and hour.hour_start_s in effective:
        cost = energy * effective[hour.hour_start_s][0]
    else:
        cost = hour.cost * pricing.pue_factor
    if pricing.carbon is not None:
        co2 = energy * pricing.carbon.g_per_kwh(hour.hour_start_s) / 1000.0
    elif effective is not None and hour.hour_start_s in effective:
        co2 = energy * effective[hour.hour_start_s][1] / 1000.0
    else:
        co2 = hour.co2_kg * pricing.pue_factor
    figures = {"gpu_hours": hour.gpu_hours, "gpu_hours_allocated": hour.gpu_hours,
               "gpu_energy_kwh": hour.gpu_energy_kwh, "energy_kwh": energy, "idle_energy_kwh": 0.0,
               "cost": cost, "co2_kg": co2}
    if pricing.embodied is not None:
        figures["embodied_kg"] = hour.gpu_hours * pricing.embodied.kg_per_gpu_hour
    return figures


def _effective_rates(site_hours: Iterable[HourFigures]) -> dict[float, tuple[float, float]]:
    """Per hour, the ledger's own average price and intensity over the whole site (cost / kWh, g / kWh):
    what a job's share of an hour is priced at when the report keeps the ledger's figures."""
    totals: dict[float, list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0])
    for hour in site_hours:
        entry = totals[hour.hour_start_s]
        entry[0] += hour.energy_kwh
        entry[1] += hour.cost
        entry[2] += hour.co2_kg * 1000.0
    return {h: (c / e, g / e) for h, (e, c, g) in totals.items() if e > 0}


def segment_hours(segment: JobSegment, start_s: float, end_s: float, key: str) -> list[HourFigures]:
    """A job segment's figures cut at UTC hours inside [start_s, end_s): its draw is constant while it
    runs, so each hour gets the segment's energy in proportion to the time it ran in that hour."""
    duration = segment.end_s - segment.start_s
    if duration <= 0:
        return []
    out = []
    t = max(segment.start_s, start_s)
    stop = min(segment.end_s, end_s)
    while t < stop:
        hour = math.floor(t / HOUR_S) * HOUR_S
        piece_end = min(stop, hour + HOUR_S)
        share = (piece_end - t) / duration
        out.append(HourFigures(hour, key, segment.gpus * (piece_end - t) / HOUR_S, segment.gpu_energy_kwh * share,
                               segment.energy_kwh * share, segment.cost * share, segment.co2_kg * share))
        t = piece_end
    return out


def _key_of(segment: JobSegment, aggregate: str) -> str:
    return {"tenant": segment.tenant, "class": segment.job_class, "job": segment.job_id}[aggregate]


def _job_states(segments: Sequence[JobSegment], month: MonthInput, key: str) -> dict[str, dict[str, int]]:
    """Per row, its jobs in the month by how they stand: `ran` (a segment in the month), `ended` (last
    segment ended in the month: completed, killed or cut at the end of a replay), `preempted` (a segment
    ended in the month and a later one exists) and `running` (still running at the month's end)."""
    # A job's segments also split where its pace changed (a power cap set or lifted): a segment that the next
    # one continues at the same instant is not a stop.
    last_end: dict[str, float] = {}
    starts: set[tuple[str, float]] = set()
    for segment in segments:
        last_end[segment.job_id] = max(last_end.get(segment.job_id, -math.inf), segment.end_s)
        starts.add((segment.job_id, segment.start_s))
    states: dict[str, dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))
    for segment in segments:
        if segment.end_s <= month.start_s or segment.start_s >= month.end_s:
            continue
        names = segment.nodes if key == "node" else (_key_of(segment, key),)
        for name in names:
            row = states[name]
            row["ran"].add(segment.job_id)
            if segment.end_s >= month.end_s:
                row["running"].add(segment.job_id)
            elif segment.end_s >= last_end[segment.job_id]:
                row["ended"].add(segment.job_id)
            elif (segment.job_id, segment.end_s) not in starts:
                row["preempted"].add(segment.job_id)
    return {name: {state: len(row[state]) for state in ("ran", "ended", "preempted", "running")}
            for name, row in states.items()}


def _add(target: dict[str, float], figures: dict[str, float]) -> None:
    for key, value in figures.items():
        target[key] = target.get(key, 0.0) + value


def _own_rows(month: MonthInput, pricing: Pricing, aggregate: str,
              effective: dict[float, tuple[float, float]]) -> tuple[dict[str, dict[str, float]],
                                                                   dict[float, float]]:
    """Unrounded figures per row before any idle is shared, and per day the energy charged to rows."""
    rows: dict[str, dict[str, float]] = {}
    charged_by_day: dict[float, float] = defaultdict(float)
    if aggregate == "node":
        for hour in month.node_hours:
            _add(rows.setdefault(hour.key, {}), _priced(hour, pricing))
        allocated: dict[str, dict[str, float]] = defaultdict(lambda: {"gpus": 0.0, "energy": 0.0})
        for segment in month.segments:
            for piece in segment_hours(segment, month.start_s, month.end_s, ""):
                priced = _priced(piece, pricing, effective)
                charged_by_day[math.floor(piece.hour_start_s / DAY_S) * DAY_S] += priced["energy_kwh"]
                for node in segment.nodes:  # a job over several nodes: split evenly (the ledger keeps no split)
                    allocated[node]["gpus"] += piece.gpu_hours / len(segment.nodes)
                    allocated[node]["energy"] += priced["energy_kwh"] / len(segment.nodes)
        for name, figures in rows.items():
            figures["gpu_hours_allocated"] = allocated[name]["gpus"] if name in allocated else 0.0
            figures["idle_energy_kwh"] = figures["energy_kwh"] - (allocated[name]["energy"] if name in allocated
                                                                  else 0.0)
        return rows, charged_by_day
    if aggregate == "tenant":
        hours = month.tenant_hours
        for hour in hours:
            priced = _priced(hour, pricing)
            _add(rows.setdefault(hour.key, {}), priced)
            charged_by_day[math.floor(hour.hour_start_s / DAY_S) * DAY_S] += priced["energy_kwh"]
        return rows, charged_by_day
    for segment in month.segments:
        for piece in segment_hours(segment, month.start_s, month.end_s, _key_of(segment, aggregate)):
            priced = _priced(piece, pricing, effective)
            _add(rows.setdefault(piece.key, {}), priced)
            charged_by_day[math.floor(piece.hour_start_s / DAY_S) * DAY_S] += priced["energy_kwh"]
    return rows, charged_by_day


def _share(rows: dict[str, dict[str, float]], idle: dict[str, float], rule: str) -> None:
    """Hand `idle` to the rows by `rule`, in place; `idle` is left at zero (nothing to hand it to: kept)."""
    if rule == "none" or not rows:
        return
    names = sorted(rows)
    weights = {name: rows[name]["gpu_hours_allocated"] for name in names}
    if rule == "even" or sum(weights.values()) <= 0:
        weights = dict.fromkeys(names, 1.0)
    total_weight = math.fsum(weights.values())
    for key in list(idle):
        if key == "gpu_hours_allocated":
            continue
        amount = idle[key]
        for name in names:
            rows[name][key] = rows[name].get(key, 0.0) + amount * weights[name] / total_weight
        idle[key] = 0.0


def make_bill(month: MonthInput, pricing: Pricing, aggregate: str, share_idle: str) -> Bill:
    """The month's bill: rows, idle and totals conserved at their units, and the site by day."""
    effective = _effective_rates(month.site_hours)
    totals: dict[str, float] = {}
    days: dict[float, dict[str, float]] = {}
    for hour in month.site_hours:
        # The site's own hours carry no allocation or idle figures: the totals' are the rows' (set below).
        priced = _priced(hour, pricing)
        _add(totals, priced)
        _add(days.setdefault(math.floor(hour.hour_start_s / DAY_S) * DAY_S, {}), priced)
    rows, charged_by_day = _own_rows(month, pricing, aggregate, effective)
    keys = ["gpu_hours", "gpu_hours_allocated", "gpu_energy_kwh", "energy_kwh", "idle_energy_kwh", "cost", "co2_kg"]
    if pricing.embodied is not None:
        keys.append("embodied_kg")
    market_factor = None
    if pricing.market is not None:
        energy = totals.get("energy_kwh", 0.0)
        market_factor = market_co2_kg(energy, pricing.market) * 1000.0 / energy if energy > 0 else \
            pricing.market.residual_g_per_kwh
        keys.append("co2_market_kg")
        for figures in (totals, *rows.values(), *days.values()):
            figures["co2_market_kg"] = figures.get("energy_kwh", 0.0) * market_factor / 1000.0
    keys += add_cloud(totals, rows, month.cloud_hours, aggregate)
    keys += add_chargeback(totals, rows, month.chargeback)
    for figures in (totals, *rows.values()):
        for key in keys:
            figures.setdefault(key, 0.0)
    totals["gpu_hours_allocated"] = math.fsum(r["gpu_hours_allocated"] for r in rows.values())
    if aggregate == "node":  # each node's row carries its own idle energy
        totals["idle_energy_kwh"] = math.fsum(r["idle_energy_kwh"] for r in rows.values())
    idle = {key: totals[key] - math.fsum(r[key] for r in rows.values()) for key in keys}
    if aggregate != "node":  # the energy no row was charged is the idle energy, shared by the rule
        idle["idle_energy_kwh"] = idle["energy_kwh"]
        _share(rows, idle, share_idle)
    names = sorted(rows)
    rounded_rows: dict[str, dict[str, float]] = {name: {} for name in names}
    rounded_idle: dict[str, float] = {}
    rounded_totals: dict[str, float] = {}
    for key in keys:
        unit = UNITS[key]
        parts, total_units = conserving_units([*(rows[n][key] for n in names), idle[key]], unit)
        for name, units in zip(names, parts, strict=False):
            rounded_rows[name][key] = as_decimal(units, unit)
        rounded_idle[key] = as_decimal(parts[-1], unit)
        rounded_totals[key] = as_decimal(total_units, unit)
    states = _job_states(month.segments, month, aggregate)
    empty = {"ran": 0, "ended": 0, "preempted": 0, "running": 0}
    day_rows = []
    for day in sorted(days):
        figures = days[day]
        idle_kwh = figures["energy_kwh"] - charged_by_day.get(day, 0.0)
        day_rows.append({"day_start_s": day, "energy_kwh": round(figures["energy_kwh"], 3),
                         "cost": round(figures["cost"], 2), "co2_kg": round(figures["co2_kg"], 3),
                         "idle_share": round(idle_kwh / figures["energy_kwh"], 4) if figures["energy_kwh"] > 0
                         else 0.0})
    return Bill(aggregate=aggregate, share_idle=share_idle if aggregate != "node" else "none",
                rows=[Row(name, rounded_rows[name], states.get(name, dict(empty))) for name in names],
                idle=rounded_idle, totals=rounded_totals, days=day_rows,
                market_factor_g_per_kwh=None if market_factor is None else round(market_factor, 3),
                keys=tuple(keys))


def month_site_totals(site_hours: Iterable[HourFigures], pricing: Pricing, months: Sequence[tuple[str, float, float]]
                      ) -> list[dict[str, object]]:
    """Energy, cost and CO2 of the site per month (label, start, end), for trends across months."""
    sums: dict[str, dict[str, float]] = {label: {} for label, _, _ in months}
    for hour in site_hours:
        for label, start, end in months:
            if start <= hour.hour_start_s < end:
                _add(sums[label], _priced(hour, pricing))
                break
    out: list[dict[str, object]] = []
    for label, _, _ in months:
        figures = sums[label]
        if not figures:
            continue
        entry: dict[str, object] = {"period": label, "gpu_hours": round(figures["gpu_hours"], 3),
                                    "energy_kwh": round(figures["energy_kwh"], 3), "cost": round(figures["cost"], 2),
                                    "co2_kg": round(figures["co2_kg"], 3)}
        if pricing.market is not None:
            entry["co2_market_kg"] = round(market_co2_kg(figures["energy_kwh"], pricing.market), 3)
        out.append(entry)
    return out
