"""The cloud's part of the bill: node-hours, spend and CO2 per UTC hour, pool and tenant (ledger table
cloud_hours, docs/LEDGER.md).

Pure: the spans a replay's cloud pools record come in, hourly rows go out. The rules:
- a cloud node is paid from its request to its stop, boot and idle keep included, at its pool's price per
  node-hour;
- a job is charged its share of each node it held (its milli-GPUs over the node's) for the time it ran there;
  the tenant '' row of an hour and pool is the paid node time no job used (boots, idle keep, empty GPUs), so
  the tenant rows plus '' add up to what the pool was paid;
- energy is modelled from the pool's node type: a job's GPUs at their full power plus its share of the host's
  idle power, the rest of the node at idle (no PUE: the provider's facility is not ours);
- CO2 is that energy at the intensity of the pool's region where a series for it is known; a region without a
  series (or a pool that names none) is charged at the site's own grid intensity, the one figure the replay
  has, and its rows keep the region so a report can say which rows used the fallback.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from greengpu.model import Cluster

HOUR_S = 3600.0
J_PER_KWH = 3_600_000.0


@dataclass(frozen=True)
class CloudSpan:
    """A stretch of one cloud node: its paid time (tenant '', node_share 1) or a job's use of it."""

    pool: str
    tenant: str
    start_s: float
    end_s: float
    node_share: float
    """Of one node: 1 for the node's paid time; a job's milli-GPUs over the node's."""
    gpus: float = 0.0
    """GPUs the job kept busy (0 for the node's paid time)."""


@dataclass(frozen=True)
class PoolCosting:
    """What the cloud rows need of a pool."""

    price_per_hour: float
    region: str
    gpus: int
    gpu_idle_w: float
    gpu_max_w: float
    host_idle_w: float


@dataclass
class CloudUsage:
    """One row of cloud_hours (an hour, a pool, a tenant)."""

    region: str
    node_hours: float = 0.0
    energy_kwh: float = 0.0
    cost: float = 0.0
    co2_kg: float = 0.0


@dataclass(frozen=True)
class CloudHour:
    """One row of cloud_hours."""

    hour_start_s: float
    pool: str
    region: str
    tenant: str
    node_hours: float
    energy_kwh: float
    cost: float
    co2_kg: float


def _pieces(start_s: float, end_s: float) -> Iterable[tuple[float, float]]:
    """(hour start, seconds) of [start_s, end_s) cut at UTC hours."""
    t = start_s
    while t < end_s:
        hour = math.floor(t / HOUR_S) * HOUR_S
        piece_end = min(end_s, hour + HOUR_S)
        yield hour, piece_end - t
        t = piece_end


def cloud_hours(spans: Iterable[CloudSpan], pools: Mapping[str, PoolCosting],
                g_per_kwh: Callable[[str, float], float]) -> dict[tuple[float, str, str], CloudUsage]:
    """Rows keyed (hour start, pool, tenant); `g_per_kwh(region, time_s)`: the intensity to charge CO2 at."""
    rows: dict[tuple[float, str, str], CloudUsage] = {}
    paid: list[CloudSpan] = []
    for span in spans:
        if span.tenant == "":
            paid.append(span)
            continue
        pool = pools[span.pool]
        watts = span.gpus * pool.gpu_max_w + span.node_share * pool.host_idle_w
        for hour, seconds in _pieces(span.start_s, span.end_s):
            row = rows.setdefault((hour, span.pool, span.tenant), CloudUsage(pool.region))
            row.node_hours += span.node_share * seconds / HOUR_S
            row.cost += span.node_share * pool.price_per_hour * seconds / HOUR_S
            kwh = watts * seconds / J_PER_KWH
            row.energy_kwh += kwh
            row.co2_kg += kwh * g_per_kwh(pool.region, hour) / 1000.0
    used: dict[tuple[float, str], list[float]] = {}
    for (hour, pool_name, _), row in rows.items():
        entry = used.setdefault((hour, pool_name), [0.0, 0.0])
        entry[0] += row.node_hours
        entry[1] += row.cost
    whole: dict[tuple[float, str], float] = {}
    for span in paid:
        for hour, seconds in _pieces(span.start_s, span.end_s):
            whole[(hour, span.pool)] = whole.get((hour, span.pool), 0.0) + seconds / HOUR_S
    for (hour, pool_name), node_hours in sorted(whole.items()):
        pool = pools[pool_name]
        taken_h, taken_cost = used.get((hour, pool_name), (0.0, 0.0))
        idle_h = max(0.0, node_hours - taken_h)
        # The unused node time: its GPUs at idle, its host at idle (the jobs' GPUs already counted at full power).
        idle_w = pool.gpus * pool.gpu_idle_w + pool.host_idle_w
        kwh = idle_w * idle_h * HOUR_S / J_PER_KWH
        rows[(hour, pool_name, "")] = CloudUsage(pool.region, idle_h, kwh,
                                                  max(0.0, node_hours * pool.price_per_hour - taken_cost),
                                                  kwh * g_per_kwh(pool.region, hour) / 1000.0)
    return rows


def site_cloud_hours(cluster: Cluster, spans: Iterable[CloudSpan], regions: Mapping[str, str],
                     region_g_per_kwh: Mapping[str, float]) -> dict[tuple[float, str, str], CloudUsage]:
    """`cloud_hours` for the inventory's pools: each pool's region from `regions` ('' when it names none), CO2 at
    `region_g_per_kwh[region]` where known, else at the site's own grid intensity (docs/LEDGER.md). The one
    costing of cloud rows, for a replay's writer and the daemon's meter alike."""
    site = cluster.site
    pools = {}
    for name, pool in cluster.pools.items():
        node_type = cluster.node_types[pool.type_name]
        pools[name] = PoolCosting(pool.price_per_hour, regions.get(name, ""), node_type.gpus, node_type.gpu_idle_w,
                                  node_type.gpu_max_w, node_type.host_idle_w)

    def g_per_kwh(region: str, time_s: float) -> float:
        if region in region_g_per_kwh:
            return region_g_per_kwh[region]
        if site.carbon is not None:
            return site.carbon.value_at(time_s)
        return site.carbon_g_per_kwh or 0.0

    return cloud_hours(spans, pools, g_per_kwh)
