"""A pending Slurm job's facts for the spot decision, and the constraint that steers it (docs/SPOT-LIVE.md).

Pure: a job is one record of `squeue --json`; nothing here runs Slurm or reads a clock. The convention
(Slurm has no field for most of these, so they go in the job's comment, as the class already does):

| where | meaning | default |
|---|---|---|
| `--comment "greengpu.class=training"` | job class | `training` (as the daemon reads it) |
| `--comment "greengpu.interruptible=true"` | the job survives being stopped and requeued | false: on-demand |
| `--comment "greengpu.checkpoint-interval=30m"` | time between its checkpoints | none: no checkpoints |
| `--comment "greengpu.checkpoint-cost=60s"` | time one checkpoint takes | the policy's `spot.checkpoint_cost_s` |
| `--time` | how long it runs (its time limit) | 1 h when it has none |
| `--deadline` | when it must be done (Slurm cancels it after) | none |
| `--no-requeue` | Slurm will not requeue it: never interruptible, whatever the comment says | |

Several keys share one comment, separated by spaces or commas
(`--comment "greengpu.class=training greengpu.interruptible=true greengpu.checkpoint-interval=30m"`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from greengpu import slurm_json
from greengpu.model import JOB_CLASSES
from greengpu.slurm_json import JobRecord
from greengpu.slurm_json import json_number as number
from greengpu.spot.decide import CapacityKind, SpotJobFacts
from greengpu.spot.pod_facts import (
    DEFAULT_RUNTIME_S,
    MAX_DURATION_S,
    BadAnnotation,
    parse_boolean,
    parse_duration_s,
)

CAPACITY_FEATURES = frozenset({"spot", "on-demand"})
"""The node features of cloud nodes (deploy/slurm/slurm.conf.greengpu-cloud): a job naming one has chosen."""
WAITING_REASONS = frozenset({"Resources", "Priority"})
"""Pending reasons that mean the job's partitions have no room for it now (Priority: it queues behind a job
that waits for resources). Other reasons (dependencies, limits, holds, a begin time) are not a shortage."""
DEFAULT_CLASS = "training"
_KEY = re.compile(r"(?:^|[\s,;])greengpu\.([a-z][a-z-]*)=([^\s,;]*)")
_PLAIN_FEATURES = re.compile(r"^[A-Za-z0-9_.\-]+(&[A-Za-z0-9_.\-]+)*$")
_KNOWN_KEYS = frozenset({"class", "interruptible", "checkpoint-interval", "checkpoint-cost"})


STEERED_MARK = re.compile(r"(?:^|\s)greengpu\.steered=(spot|on-demand)(?=\s|$)")
"""What greengpu writes in a job's admin comment (users cannot change it) when it adds the capacity feature, so a
later pass knows the feature is greengpu's to change, not the user's choice."""


@dataclass(frozen=True)
class PendingSlurmJob:
    """What steering needs of one pending job, besides its facts."""

    job_id: str
    partitions: tuple[str, ...]
    features: str
    reason: str
    gpus: float
    node_count: int
    eligible_s: float
    admin_comment: str = ""

    @property
    def steered(self) -> CapacityKind | None:
        """The capacity greengpu gave this job at an earlier pass (None: none)."""
        found = STEERED_MARK.search(self.admin_comment)
        return "spot" if found and found.group(1) == "spot" else "on-demand" if found else None

    def marked(self, capacity: CapacityKind) -> str:
        """The admin comment that records `capacity` as greengpu's choice (the rest of it kept)."""
        rest = STEERED_MARK.sub(" ", self.admin_comment).strip()
        return f"{rest} greengpu.steered={capacity}".strip()


def pending_job(record: JobRecord) -> PendingSlurmJob | None:
    """The pending GPU job in one `squeue --json` record; None for any other job."""
    if "PENDING" not in slurm_json.job_states(record):
        return None
    nodes = int(number(record.get("node_count")) or 1)
    asked = slurm_json.gpus_asked(record)
    if asked is None:
        return None
    gpus = asked[0]
    partitions = tuple(p for p in str(record.get("partition") or "").split(",") if p)
    return PendingSlurmJob(job_id=str(record.get("job_id")), partitions=partitions,
                           features=str(record.get("features") or "").strip(),
                           reason=str(record.get("state_reason") or ""), gpus=gpus, node_count=max(1, nodes),
                           eligible_s=number(record.get("eligible_time")) or number(record.get("submit_time")) or 0.0,
                           admin_comment=str(record.get("admin_comment") or "").strip())


def comment_keys(comment: str) -> dict[str, str]:
    """`greengpu.KEY=VALUE` words of a job's comment; BadAnnotation for a greengpu key it does not know."""
    found = {key: value for key, value in _KEY.findall(comment)}
    unknown = sorted(set(found) - _KNOWN_KEYS)
    if unknown:
        raise BadAnnotation(f"comment key greengpu.{unknown[0]}: unknown (known: "
                            f"{', '.join('greengpu.' + k for k in sorted(_KNOWN_KEYS))})")
    return found


def job_facts(record: JobRecord, job: PendingSlurmJob, now_s: float,
              default_checkpoint_cost_s: float) -> SpotJobFacts:
    """The spot decision's facts for a pending job (docstring of this module: where each comes from);
    BadAnnotation, naming the comment key, when the comment says something greengpu cannot use."""
    keys = comment_keys(str(record.get("comment") or ""))
    job_class = keys.get("class", DEFAULT_CLASS)
    if job_class not in JOB_CLASSES:
        raise BadAnnotation(f"comment key greengpu.class: {job_class[:40]!r} is not one of {', '.join(JOB_CLASSES)}")
    said = keys.get("interruptible")
    interruptible = parse_boolean("comment key greengpu.interruptible", said) if said is not None else False
    if record.get("requeue") is False:
        interruptible = False  # Slurm would not bring it back after its node is taken
    interval = keys.get("checkpoint-interval")
    interval_s = parse_duration_s("comment key greengpu.checkpoint-interval", interval) if interval else None
    cost = keys.get("checkpoint-cost")
    cost_s = parse_duration_s("comment key greengpu.checkpoint-cost", cost) if cost else default_checkpoint_cost_s
    limit_min = number(record.get("time_limit"))
    work_s = limit_min * 60.0 if limit_min and 0 < limit_min * 60.0 <= MAX_DURATION_S else DEFAULT_RUNTIME_S
    deadline_at = number(record.get("deadline"))
    submit_s = number(record.get("submit_time")) or job.eligible_s
    left_s = deadline_s = None
    if deadline_at and deadline_at > 0:
        left_s = deadline_at - now_s
        deadline_s = deadline_at - submit_s
    return SpotJobFacts(job_class=job_class, interruptible=interruptible,
                        checkpoint_interval_s=interval_s or None, checkpoint_cost_s=cost_s,
                        remaining_s=work_s,  # a requeued job's saved work is unknown here: all of it, to be safe
                        deadline_remaining_s=left_s, gpus=job.gpus, work_s=work_s, deadline_s=deadline_s)


def names_capacity(features: str) -> bool:
    """Whether a job's constraint already names `spot` or `on-demand` (the user chose)."""
    return bool(CAPACITY_FEATURES & set(re.split(r"[^A-Za-z0-9_.\-]+", features)))


def steered_features(features: str, capacity: CapacityKind) -> str | None:
    """The job's constraint with the capacity feature added; None when the constraint is an expression
    (`|`, `[...]`, counts) that greengpu will not rewrite: the job is then left as the user wrote it."""
    if not features:
        return capacity
    if not _PLAIN_FEATURES.match(features):
        return None
    return f"{features}&{capacity}"


def without_capacity(features: str, capacity: CapacityKind) -> str | None:
    """The constraint as it was before greengpu added `capacity` (`steered_features` undone); None when it no
    longer ends with that feature (someone changed it since: the job is theirs again)."""
    if features == capacity:
        return ""
    if features.endswith("&" + capacity):
        return features[: -len(capacity) - 1]
    return None
