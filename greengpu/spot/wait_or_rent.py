"""Wait for on-premises capacity or rent in the cloud; come back on-premises at a checkpoint (pure; docs/SPOT.md).

`greengpu.spot.decide` says which kind of cloud capacity a job may take; this module says whether it should
take it at all, and when a cloud job should return. The principle, in money and time only (no constant tuned
to a trace):

- A job never rents while on-premises capacity is predicted to start it no later than a cloud node would
  (a sleeping node that boots sooner, a reservation that comes due first): waiting then delays nothing.
- Beyond that, it waits while the predicted extra wait is within its class's tolerance, or (a job that cannot
  come back) while waiting costs less than renting: the extra wait, priced at its class's value of waiting
  per GPU-hour, against the cloud's expected cost of the job (electricity on-premises is cents beside a cloud
  node-hour, so the comparison leaves it out and errs towards renting). Otherwise it rents.
- A job that checkpoints (and may come back) rents rather than wait beyond its tolerance: it comes back at a
  checkpoint once on-premises room frees, so renting costs it no time and only the rent until then. A job that
  cannot come back would pay its whole run in the cloud, and weighs that bill against the wait.
- A job without a prediction (no reservation, no sleeping node to wake) rents as it always did: the rule
  only ever trades money for a wait the core has predicted.
- A deadline job waits only while the predicted start still leaves it its run time and a restart before the
  deadline: its slack is spent on-premises first, never past the point where only a guaranteed start helps.
- A deadline job whose slack runs out while no cloud pool has room for it (the predicted start no longer leaves
  its run and a restart) is raised above the queue, so that the core makes room for it on-premises.
- A cloud job that checkpoints comes back on-premises at a checkpoint when on-premises capacity that fits it
  is free and the move pays: the cloud cost of the work left exceeds what the restart costs, its delay priced
  at the value of waiting.

Units: seconds for times, the site currency per GPU-hour for prices and values.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from greengpu.policy import ON_DEMAND_VALUE, ClassWaiting

Waiting = Mapping[str, ClassWaiting]
"""Per class, its wait tolerance and value of waiting (greengpu.policy.SpotPolicy.waiting)."""


def value_of_waiting(waiting: Waiting, job_class: str, on_demand_per_gpu_hour: float | None) -> float:
    """The class's value of one GPU-hour of waiting (inf: it never waits to save money)."""
    terms = waiting.get(job_class)
    value = terms.value_per_gpu_hour if terms is not None else None
    if value is None:
        return math.inf
    if value == ON_DEMAND_VALUE:
        return on_demand_per_gpu_hour if on_demand_per_gpu_hour is not None else math.inf
    assert not isinstance(value, str)
    return value


def tolerance_s(waiting: Waiting, job_class: str) -> float:
    """Extra wait the class always accepts (0 when not listed)."""
    terms = waiting.get(job_class)
    return terms.tolerance_s if terms is not None else 0.0


@dataclass(frozen=True)
class WaitOrRentFacts:
    """What the choice needs to know of one waiting job, now."""

    job_class: str
    gpus: float
    remaining_s: float
    """Work still to do, seconds at full speed."""
    on_premises_start_in_s: float | None
    """The core's predicted start from now (a reservation's start, or a sleeping node's boot); None: none."""
    cloud_start_in_s: float
    """Seconds until a cloud node could run it (its start-up; 0 on an idle node already up)."""
    cloud_cost: float
    """The cloud's expected cost of finishing the job on the capacity `decide` chose."""
    on_demand_per_gpu_hour: float | None = None
    """The cheapest on-demand price per GPU-hour (for a value of waiting given as `on-demand`)."""
    deadline_remaining_s: float | None = None
    restart_s: float = 0.0
    leaves_at_checkpoint_s: float | None = None
    """A job that can come back on-premises at a checkpoint: its checkpoint interval (None: once in the cloud it
    stays there to its end)."""


def extra_wait_s(facts: WaitOrRentFacts) -> float | None:
    """How much later the job starts on-premises than in the cloud (None: no prediction)."""
    if facts.on_premises_start_in_s is None:
        return None
    return max(0.0, facts.on_premises_start_in_s - facts.cloud_start_in_s)


def wait_cost(facts: WaitOrRentFacts, waiting: Waiting) -> float:
    """What the extra wait costs the job at its class's value of waiting (inf: no prediction, or never waits)."""
    extra_s = extra_wait_s(facts)
    if extra_s is None:
        return math.inf
    if extra_s == 0.0:
        return 0.0
    return value_of_waiting(waiting, facts.job_class, facts.on_demand_per_gpu_hour) * facts.gpus * extra_s / 3600.0


def deadline_allows_waiting(facts: WaitOrRentFacts) -> bool:
    """Whether starting on-premises at the predicted time still finishes before the deadline, with a restart's
    margin (a deadline job spends its slack on-premises first, never past that point)."""
    if facts.deadline_remaining_s is None:
        return True
    if facts.on_premises_start_in_s is None:
        return False
    return facts.on_premises_start_in_s + facts.remaining_s + facts.restart_s <= facts.deadline_remaining_s


def slack_runs_out(remaining_s: float, deadline_remaining_s: float | None, restart_s: float,
                   on_premises_start_in_s: float | None) -> bool:
    """A deadline job no cloud pool takes now: whether starting at its predicted on-premises start (unknown: now)
    would no longer leave its run and a restart before the deadline. Then waiting in the queue's order cannot keep
    it: it must be given the capacity that guarantees it, on-premises first (the body raises it above the
    queue, so the core makes room by preempting interruptible work, which checkpoints first)."""
    if deadline_remaining_s is None:
        return False
    start_in_s = on_premises_start_in_s if on_premises_start_in_s is not None else 0.0
    return start_in_s + remaining_s + restart_s > deadline_remaining_s


def waits_on_premises(facts: WaitOrRentFacts, waiting: Waiting) -> bool:
    """The wait-or-rent rule: True when the job should keep waiting for on-premises capacity."""
    extra_s = extra_wait_s(facts)
    if extra_s is None:
        return False  # nothing predicted: rent as before
    if not deadline_allows_waiting(facts):
        return False
    if extra_s == 0.0:
        return True  # on-premises starts it no later than a cloud node could
    if extra_s <= tolerance_s(waiting, facts.job_class):
        return True
    if facts.leaves_at_checkpoint_s is not None:
        return False  # it rents now and comes back at a checkpoint once room frees: no wait, little rent
    return facts.cloud_cost > wait_cost(facts, waiting)


@dataclass(frozen=True)
class ComeBackFacts:
    """What the come-back move needs to know of one cloud job at a checkpoint it just wrote."""

    job_class: str
    gpus: float
    remaining_s: float
    """Work left after the checkpoint, seconds at full speed."""
    cloud_per_gpu_hour: float
    """What its cloud capacity costs per GPU-hour."""
    on_premises_fits: bool
    """On-premises capacity that fits it is free now."""
    restart_s: float
    """From stopping here to running on-premises (requeue, reload from the checkpoint)."""
    on_demand_per_gpu_hour: float | None = None
    deadline_remaining_s: float | None = None


def comes_back(facts: ComeBackFacts, waiting: Waiting) -> bool:
    """True when the job should stop at this checkpoint and move on-premises: room is free there, the cloud cost
    of the work left exceeds the restart's delay priced at the class's value of waiting (a class that never
    waits prices it at the cloud rate it pays), and a deadline still holds after the restart."""
    if not facts.on_premises_fits or facts.remaining_s <= facts.restart_s:
        return False
    if facts.deadline_remaining_s is not None and facts.remaining_s + facts.restart_s > facts.deadline_remaining_s:
        return False
    saved = facts.cloud_per_gpu_hour * facts.gpus * facts.remaining_s / 3600.0
    value = value_of_waiting(waiting, facts.job_class, facts.on_demand_per_gpu_hour)
    if not math.isfinite(value):
        value = facts.cloud_per_gpu_hour
    restart_cost = value * facts.gpus * facts.restart_s / 3600.0
    return saved > restart_cost
