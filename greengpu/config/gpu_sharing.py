"""The `mig:` and `time_slicing:` blocks of a node type (docs/GPU-SHARING.md), with located errors.

    mig:              {gpus: 2, profiles: [1g.5gb, 3g.20gb], reconfigure_s: 60}
    time_slicing:     {gpus: 1, replicas: 4, classes: [interactive, batch]}

The first `mig.gpus` GPUs of the type are MIG GPUs, the next `time_slicing.gpus` time-sliced; together at most
the type's `gpus`. A profile must be one the GPU model offers (greengpu.sched.mig: A100-40GB, A100/H100-80GB,
A30); only the non-critical classes (interactive, batch) may share a GPU by time-slicing.
"""

from __future__ import annotations

from greengpu.config.fields import Fields
from greengpu.model import JOB_CLASSES, TIMESLICE, MigConfig, TimeSlicing
from greengpu.sched.mig import ALL_PROFILES, family_of

MIG_KEYS = ("gpus", "profiles", "reconfigure_s")
TIME_SLICING_KEYS = ("gpus", "replicas", "classes")
SHARING_KEYS = ("mig", "time_slicing")
SLICEABLE_CLASSES = ("interactive", "batch")
"""Classes that may take a time-slice replica: no isolation, no guaranteed speed (training and inference do not
share a GPU they cannot be sure of)."""
MAX_REPLICAS = 64


def gpu_sharing(fields: Fields, gpus: int, gpu_model: str) -> tuple[MigConfig | None, TimeSlicing | None]:
    """The node type's sharing blocks (None each when absent)."""
    mig = _mig(fields.sub("mig"), gpus, gpu_model)
    used = mig.gpus if mig else 0
    sliced = _time_slicing(fields.sub("time_slicing"), gpus - used, used)
    return mig, sliced


def _mig(fields: Fields | None, gpus: int, gpu_model: str) -> MigConfig | None:
    if fields is None:
        return None
    fields.reject_unknown(MIG_KEYS)
    count = fields.integer("gpus", required=True, minimum=0, maximum=64)
    assert count is not None
    if count > gpus:
        raise fields.error("gpus", f"{count} MIG GPUs, more than the node type's {gpus}")
    family = family_of(gpu_model)
    if family is None and count:
        raise fields.error(None, f"gpu_model {gpu_model!r} does not support MIG (A100, H100 80GB or A30)")
    profiles: list[str] = []
    for path, item in fields.items("profiles", required=True):
        if not isinstance(item, str) or item not in ALL_PROFILES:
            known = ", ".join(sorted(ALL_PROFILES))
            raise fields.doc.error(path, f"unknown MIG profile {item!r} (known: {known})")
        if family is not None and item not in family.profiles:
            offered = ", ".join(family.profiles)
            raise fields.doc.error(path, f"{item} is not a profile of {gpu_model} ({family.name}: {offered})")
        if item in profiles:
            raise fields.doc.error(path, f"{item} listed twice")
        profiles.append(item)
    if not profiles:
        raise fields.error("profiles", "must name at least one MIG profile")
    reconfigure_s = fields.number("reconfigure_s", 60.0, minimum=0.0, maximum=86_400.0)
    assert reconfigure_s is not None
    return MigConfig(count, tuple(profiles), reconfigure_s)


def _time_slicing(fields: Fields | None, left: int, after: int) -> TimeSlicing | None:
    if fields is None:
        return None
    fields.reject_unknown(TIME_SLICING_KEYS)
    count = fields.integer("gpus", required=True, minimum=0, maximum=64)
    assert count is not None
    if count > left:
        raise fields.error("gpus", f"{count} time-sliced GPUs, more than the {left} left after {after} MIG GPUs")
    replicas = fields.integer("replicas", required=True, minimum=2, maximum=MAX_REPLICAS)
    assert replicas is not None
    classes: set[str] = set()
    for path, item in fields.items("classes", required=True):
        if not isinstance(item, str) or item not in JOB_CLASSES:
            raise fields.doc.error(path, f"unknown job class {item!r} (known: {', '.join(JOB_CLASSES)})")
        if item not in SLICEABLE_CLASSES:
            raise fields.doc.error(path, f"{item} jobs may not share a GPU by time-slicing "
                                         f"(allowed: {', '.join(SLICEABLE_CLASSES)})")
        classes.add(item)
    if not classes:
        raise fields.error("classes", "must name at least one job class")
    return TimeSlicing(count, replicas, frozenset(classes))


def valid_profiles() -> frozenset[str]:
    """Every `gpu_profile` a job may ask for: the MIG profiles and `timeslice`."""
    return ALL_PROFILES | {TIMESLICE}
