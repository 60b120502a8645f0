"""Make `examples/a100-lab.year.trace.csv`: a year of a 20-GPU A100 lab (5 nodes x 4 A100-SXM4-40GB), seeded.

    python scripts/make_a100_lab_year_trace.py [--seed 41] [--out examples/a100-lab.year.trace.csv]

The same seed gives the same file, byte for byte. Shapes come from the public traces shipped in data/
(docs/EXAMPLE-A100-LAB.md credits them):

- training and batch job sizes and run times: Microsoft Philly (data/philly-2017/philly.csv): the mix of
  1, 2, 4 and 8-GPU jobs and, per size, run times drawn from that size's empirical distribution;
- how demand moves over the hours of a week: Helios Earth (data/helios-2020/earth_*_hourly.csv), the
  running plus pending GPUs per hour of the week, a mild modulation of the lab's own day;
- which MIG profile an inference service needs: the Philly GPU-utilisation CDF published with AcmeTrace
  (data/acme-2023/philly_gpu_util_cdf.csv): a service that would use u of a whole GPU gets the smallest
  profile with at least u x 7 compute slices, among the services that fit in 3 slices;
- the lab's week (busy working days, quiet nights 2-6 AM, weekends, a summer and a winter break) and the
  target use of the whole GPUs are this script's choices, named below; arrival rates follow from them.

Columns: the canonical trace format (docs/TRACES.md) plus `gpu_profile` (empty, a MIG profile, `timeslice`).
"""

from __future__ import annotations

import argparse
import bisect
import csv
import math
import random
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PHILLY = ROOT / "data/philly-2017/philly.csv"
HELIOS = [ROOT / "data/helios-2020/earth_vc6YE_hourly.csv", ROOT / "data/helios-2020/earth_vcvlY_hourly.csv"]
UTIL_CDF = ROOT / "data/acme-2023/philly_gpu_util_cdf.csv"
OUT = ROOT / "examples/a100-lab.year.trace.csv"

START = datetime(2025, 1, 1, tzinfo=UTC)
DAYS = 365
WHOLE_GPUS = 14
"""GPUs for whole-GPU jobs: 20 less 4 in MIG mode and 2 time-sliced (examples/a100-lab.cluster.yaml's layout)."""
WHOLE_GPU_USE = 0.50
"""The share of the whole GPUs' year that training and batch work asks for (before queueing)."""
TRAINING_SHARE = 0.85
"""Of that work, the share that is training (the rest is students' batch jobs)."""
NOTEBOOKS_PER_WORKDAY = 14.0
SERVICES_PER_WORKDAY = 1.0
MAX_TRAINING_S = 7 * 86400
MAX_BATCH_S = 86400
NOTEBOOK_S = (600, 8 * 3600)
SERVICE_DAYS = (1.0, 14.0)
CHECKPOINT_AFTER_S = 2 * 3600
CHECKPOINT_INTERVAL_S = 1800
PROFILES = {1: "1g.5gb", 2: "2g.10gb", 3: "3g.20gb"}
COLUMNS = ["job_id", "submit_time", "duration_s", "gpus", "tenant", "priority", "class", "checkpoint_interval_s",
           "gpu_profile"]


def lab_hour_weight(moment: datetime) -> float:
    """The lab's own week: how busy an hour is, 1 at a working-day peak."""
    hour, weekday = moment.hour, moment.weekday()
    if 2 <= hour < 6:
        weight = 0.03 if weekday < 5 else 0.02
    elif weekday >= 5:
        weight = 0.15
    elif 9 <= hour < 18:
        weight = 1.0
    elif hour in (8, 18, 19):
        weight = 0.5
    else:
        weight = 0.25
    if (moment.month == 12 and moment.day >= 22) or (moment.month == 1 and moment.day == 1):
        weight *= 0.2  # winter break
    elif moment.month == 8:
        weight *= 0.6  # summer
    return weight


def helios_week_shape(paths: Sequence[Path]) -> list[float]:
    """Running plus pending GPUs per hour of the week (Monday 00:00 first), mean 1, held within 0.7-1.3."""
    sums, counts = [0.0] * 168, [0] * 168
    for path in paths:
        with path.open() as handle:
            for row in csv.DictReader(handle):
                moment = datetime.fromisoformat(row["time"])
                slot = moment.weekday() * 24 + moment.hour
                sums[slot] += float(row["running_gpu_num"]) + float(row["pending_gpu_num"])
                counts[slot] += 1
    means = [s / c for s, c in zip(sums, counts, strict=True)]
    overall = sum(means) / len(means)
    return [min(1.3, max(0.7, m / overall)) for m in means]


@dataclass(frozen=True)
class Philly:
    sizes: list[int]
    size_weights: list[int]
    durations: dict[int, list[float]]


def read_philly(path: Path) -> Philly:
    durations: dict[int, list[float]] = defaultdict(list)
    with path.open() as handle:
        for row in csv.DictReader(handle):
            gpus = int(row["num_gpus"])
            if gpus in (1, 2, 4, 8):
                durations[gpus].append(float(row["duration"]))
    sizes = sorted(durations)
    for values in durations.values():
        values.sort()
    return Philly(sizes, [len(durations[g]) for g in sizes], dict(durations))


def read_util_cdf(path: Path) -> list[tuple[float, float]]:
    """(utilisation 0-1, cumulative share 0-1), sorted by share."""
    with path.open() as handle:
        rows = [(float(r["gpu_util_percent"]) / 100.0, float(r["cdf_percent"]) / 100.0) for r in csv.DictReader(handle)]
    return sorted(rows, key=lambda r: r[1])


def profile_mix(cdf: list[tuple[float, float]]) -> dict[int, float]:
    """Share of services needing 1, 2 or 3 slices: the CDF's mass in (0, 1/7], (1/7, 2/7], (2/7, 3/7]."""
    def at(u: float) -> float:
        return max((share for value, share in cdf if value <= u), default=0.0)
    edges = [at(0.0)] + [at(k / 7) for k in (1, 2, 3)]
    mass = {k: edges[k] - edges[k - 1] for k in (1, 2, 3)}
    total = sum(mass.values())
    return {k: m / total for k, m in mass.items()}


def poisson(rng: random.Random, mean: float) -> int:
    """Knuth's method (the means here are a few per hour)."""
    limit, count, product = math.exp(-mean), 0, rng.random()
    while product > limit:
        count += 1
        product *= rng.random()
    return count


def clipped(rng: random.Random, values: list[float], low: float, high: float) -> int:
    """A draw from the empirical distribution `values` (sorted), restricted to [low, high]."""
    lo, hi = bisect.bisect_left(values, low), bisect.bisect_right(values, high)
    if hi > lo:
        return int(round(values[rng.randrange(lo, hi)]))
    return int(min(high, max(low, values[rng.randrange(len(values))])))


def generate(seed: int) -> list[dict[str, str]]:
    rng = random.Random(seed)
    philly = read_philly(PHILLY)
    shape = helios_week_shape(HELIOS)
    mix = profile_mix(read_util_cdf(UTIL_CDF))
    hours = [START + timedelta(hours=h) for h in range(DAYS * 24)]
    weights = [lab_hour_weight(m) * shape[m.weekday() * 24 + m.hour] for m in hours]
    weight_sum = sum(weights)
    workdays = sum(1 for d in range(DAYS) if (START + timedelta(days=d)).weekday() < 5)
    peak_hours_per_workday = weight_sum / workdays

    # Expected GPU-hours of one job of each kind, from the same distributions the draws use.
    total = sum(philly.size_weights)
    train_gpu_h = sum(w / total * g * sum(min(d, MAX_TRAINING_S) for d in philly.durations[g]) /
                      len(philly.durations[g]) / 3600 for g, w in zip(philly.sizes, philly.size_weights, strict=True))
    batch_gpu_h = sum(min(d, MAX_BATCH_S) for d in philly.durations[1]) / len(philly.durations[1]) / 3600
    work_gpu_h = WHOLE_GPUS * DAYS * 24 * WHOLE_GPU_USE
    rates = {  # jobs per hour at weight 1
        "training": work_gpu_h * TRAINING_SHARE / train_gpu_h / weight_sum,
        "batch": work_gpu_h * (1 - TRAINING_SHARE) / batch_gpu_h / weight_sum,
        "notebook": NOTEBOOKS_PER_WORKDAY / peak_hours_per_workday,
        "service": SERVICES_PER_WORKDAY / peak_hours_per_workday,
    }
    jobs: list[tuple[datetime, dict[str, str]]] = []
    for moment, weight in zip(hours, weights, strict=True):
        for kind, rate in rates.items():
            for _ in range(poisson(rng, rate * weight)):
                submit = moment + timedelta(seconds=rng.randrange(3600))
                jobs.append((submit, _job(rng, kind, philly, mix)))
    jobs.sort(key=lambda j: (j[0], j[1]["tenant"], j[1]["duration_s"]))
    rows = []
    for number, (submit, job) in enumerate(jobs, start=1):
        rows.append({"job_id": f"y{number:05d}", "submit_time": submit.strftime("%Y-%m-%dT%H:%M:%SZ"), **job})
    return rows


NOTEBOOK_TENANT = "notebooks"
"""Whose quota the notebooks on the time-sliced GPUs count against (every group's students and researchers)."""


def _job(rng: random.Random, kind: str, philly: Philly, mix: dict[int, float]) -> dict[str, str]:
    if kind == "training":
        gpus = rng.choices(philly.sizes, weights=philly.size_weights)[0]
        duration = clipped(rng, philly.durations[gpus], 120, MAX_TRAINING_S)
        tenant = rng.choices(["vision", "nlp"], weights=[55, 45])[0]
        checkpoint = str(CHECKPOINT_INTERVAL_S) if duration > CHECKPOINT_AFTER_S else ""
        return _row(duration, gpus, tenant, 0, "training", checkpoint, "")
    if kind == "batch":
        duration = clipped(rng, philly.durations[1], 60, MAX_BATCH_S)
        tenant = rng.choices(["students", "vision", "nlp"], weights=[70, 15, 15])[0]
        return _row(duration, 1, tenant, 0, "batch", "", "")
    if kind == "notebook":
        duration = clipped(rng, philly.durations[1], *NOTEBOOK_S)
        # The development pool is a tenant of its own: a notebook cannot be preempted, so it may not borrow, and
        # charged to a research group whose training already borrows it would wait for that training to end.
        return _row(duration, 1, NOTEBOOK_TENANT, 1, "interactive", "", "timeslice")
    slices = rng.choices(list(mix), weights=list(mix.values()))[0]
    days = math.exp(rng.uniform(math.log(SERVICE_DAYS[0]), math.log(SERVICE_DAYS[1])))
    return _row(int(days * 86400), 1, "inference", 2, "inference", "", PROFILES[slices])


def _row(duration_s: int, gpus: int, tenant: str, priority: int, job_class: str, checkpoint: str,
         profile: str) -> dict[str, str]:
    return {"duration_s": str(duration_s), "gpus": str(gpus), "tenant": tenant, "priority": str(priority),
            "class": job_class, "checkpoint_interval_s": checkpoint, "gpu_profile": profile}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=41)
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    rows = generate(args.seed)
    with args.out.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=COLUMNS, lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
    print(f"{args.out}: {len(rows)} jobs")


if __name__ == "__main__":
    main()
