"""Seeded job streams for a cluster that bursts to the cloud (issue 37's three traces; docs/SPOT.md).

Each is drawn from `random.Random(seed)` alone, so a seed gives the same jobs on any machine:

- `training_overflow`: training jobs (1 to 8 GPUs, log-normal run times around an hour, three in four for
  `research`) arriving in a daily wave whose peak asks for more GPUs than the cluster has; jobs over 30
  minutes checkpoint every 30 minutes.
- `with_deadlines_and_inference`: the same, with every tenth training job due within three times its run time
  and a stream of `research` inference jobs (priority 10, never interruptible, no checkpoints) that peaks with
  the training wave.
- `with_two_long_jobs`: the same again, with two 30-hour 8-GPU training jobs without checkpoints submitted at
  the first peak, when every on-premises GPU is taken.
"""

from __future__ import annotations

import math
import random
from dataclasses import replace

from greengpu.model import Job

HOUR = 3600.0
DAY = 24 * HOUR
CHECKPOINT_S = 1800.0
"""Jobs that run longer than this checkpoint this often (a training loop's periodic save)."""


def _rate_per_hour(time_s: float, mean: float) -> float:
    """A daily wave: about three times the mean at the peak (mid-afternoon), a tenth of it at night."""
    phase = (time_s % DAY) / DAY
    return mean * (0.1 + 2.9 * max(0.0, math.sin(math.pi * (phase - 0.25) / 0.75)) ** 2) if phase > 0.25 \
        else mean * 0.1


def _arrivals(rng: random.Random, days: float, mean_per_hour: float) -> list[float]:
    """Arrival times of a non-homogeneous Poisson process (thinning) with the daily wave above."""
    peak = mean_per_hour * 3.0
    times: list[float] = []
    now_s = 0.0
    while True:
        now_s += rng.expovariate(peak / HOUR)
        if now_s >= days * DAY:
            return times
        if rng.random() * peak <= _rate_per_hour(now_s, mean_per_hour):
            times.append(now_s)


def training_overflow(seed: int, days: float = 3.0, jobs_per_hour: float = 3.0) -> list[Job]:
    """Training only; the wave's peaks overflow the 64 on-premises GPUs of examples/burst-cloud."""
    rng = random.Random(f"training/{seed}")
    jobs = []
    for index, submit_s in enumerate(_arrivals(rng, days, jobs_per_hour)):
        gpus = rng.choice((1, 2, 4, 4, 8, 8))
        duration_s = min(12 * HOUR, max(300.0, rng.lognormvariate(math.log(HOUR), 1.0)))
        checkpoint = CHECKPOINT_S if duration_s > CHECKPOINT_S else None
        tenant = rng.choice(("research", "research", "research", "product"))
        jobs.append(Job(f"t{index}", tenant, gpus, round(duration_s), submit_time_s=round(submit_s, 1),
                        checkpoint_interval_s=checkpoint))
    return jobs


def with_deadlines_and_inference(seed: int, days: float = 3.0) -> list[Job]:
    """Training with a deadline of three times the run time on every tenth job, plus inference overflow."""
    rng = random.Random(f"inference/{seed}")
    training = [job if index % 10 else _due(job) for index, job in enumerate(training_overflow(seed, days))]
    inference = [Job(f"i{index}", "research", rng.choice((1, 2, 4)), round(rng.uniform(0.5, 4.0) * HOUR),
                     submit_time_s=round(submit_s, 1), job_class="inference", interruptible=False,
                     priority=10)
                 for index, submit_s in enumerate(_arrivals(rng, days, 1.0))]
    return sorted(training + inference, key=lambda job: (job.submit_time_s, job.job_id))


def with_two_long_jobs(seed: int, days: float = 3.0) -> list[Job]:
    """The trace above and two 30-hour 8-GPU training jobs without checkpoints, submitted at the first peak."""
    peak_s = 0.625 * DAY  # the wave's peak on the first day (15:00)
    long = [Job(f"long{k}", "research", 8, 30 * HOUR, submit_time_s=peak_s + k * 60.0) for k in range(2)]
    return sorted(with_deadlines_and_inference(seed, days) + long, key=lambda job: (job.submit_time_s, job.job_id))


def _due(job: Job) -> Job:
    return replace(job, deadline_s=3.0 * job.duration_s)
