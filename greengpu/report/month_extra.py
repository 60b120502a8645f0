"""What a month's bill adds from ledger schema 3 (docs/REPORT.md): the cloud rows, the chargeback at the
settings' rates, the basis (measured, modelled or partly measured) and the queue rows."""

from __future__ import annotations

import math
from dataclasses import replace

from greengpu.accounting.bill import MonthInput
from greengpu.accounting.chargeback import NoRate, chargeback
from greengpu.accounting.ledger_url import Ledger
from greengpu.accounting.ledger_v3 import JobFacts, charge_segments, cloud_hours, job_facts
from greengpu.errors import BadInput
from greengpu.report.month_types import CloudCarbon, Queue, QueueFigures
from greengpu.report.settings import ReportSettings

FAILED = ("failed", "killed")


def add_month_extras(data: MonthInput, ledger: Ledger, run_id: int, settings: ReportSettings, aggregate: str
                     ) -> MonthInput:
    """`data` with the run's cloud rows and, when the settings give rates, each row's chargeback."""
    data.cloud_hours = cloud_hours(ledger, run_id, data.start_s, data.end_s)
    if settings.cloud_carbon is not None:  # the region's own intensity where the settings know it
        known = settings.cloud_carbon.g_per_kwh_by_region
        data.cloud_hours = [replace(h, co2_kg=h.energy_kwh * known[h.region] / 1000.0) if h.region in known else h
                            for h in data.cloud_hours]
    if settings.chargeback is not None:
        segments = charge_segments(ledger, run_id, data.start_s, data.end_s, aggregate)
        try:
            data.chargeback = chargeback(segments, settings.chargeback, data.start_s, data.end_s)
        except NoRate as error:
            raise BadInput(f"--settings: chargeback.{error} (run {run_id} of {ledger})") from None
    return data


def percentile(values: list[float], share: float) -> float | None:
    """The nearest-rank percentile (`share` 0.5: the median) of `values`; None when there are none."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, math.ceil(share * len(ordered)) - 1)]


def _queue_row(facts: list[JobFacts]) -> QueueFigures:
    waits = [f.first_start_s - f.submit_s for f in facts if f.submit_s is not None]
    ended = [f for f in facts if f.outcome in ("completed", *FAILED)]
    checkpoints = [f.checkpoint_s for f in facts if f.checkpoint_s is not None]
    p50, p95 = percentile(waits, 0.5), percentile(waits, 0.95)
    return {"jobs_started": len(facts), "jobs_ended": len(ended),
            "wait_p50_s": None if p50 is None else round(p50, 1),
            "wait_p95_s": None if p95 is None else round(p95, 1),
            "failure_rate": round(sum(f.outcome in FAILED for f in ended) / len(ended), 4) if ended else None,
            "checkpoint_mean_s": round(math.fsum(checkpoints) / len(checkpoints), 1) if checkpoints else None}


def queue_rows(ledger: Ledger, run_id: int, start_s: float, end_s: float) -> Queue:
    """Per tenant and in total, over the jobs that first started in the month: wait P50 and P95 (submit to
    first start), failure rate (failed or killed over the jobs that ended) and mean checkpoint time."""
    facts = job_facts(ledger, run_id, start_s, end_s)
    tenants = sorted({f.tenant for f in facts})
    return {"tenants": [{"tenant": t, **_queue_row([f for f in facts if f.tenant == t])} for t in tenants],
            "total": _queue_row(facts)}


def cloud_carbon_payload(ledger: Ledger, run_id: int, start_s: float, end_s: float, settings: ReportSettings
                         ) -> CloudCarbon:
    """Where the cloud's CO2 comes from: the settings' region intensities, and the regions (or pools that name
    none) charged at the site's intensity when the replay wrote them, because no series was known."""
    rows = cloud_hours(ledger, run_id, start_s, end_s)
    known = settings.cloud_carbon.g_per_kwh_by_region if settings.cloud_carbon is not None else {}
    fallback = sorted({h.region or f"(pool {h.pool}: no region)" for h in rows if h.region not in known})
    return {"source": settings.cloud_carbon.source if settings.cloud_carbon is not None else None,
            "g_per_kwh_by_region": dict(sorted(known.items())),
            "at_site_intensity": fallback}
