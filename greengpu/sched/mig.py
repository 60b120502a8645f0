"""MIG geometry: which profiles a GPU model offers, where each instance may start, and which sets fit one GPU.

A MIG GPU has memory slices (8 on A100/H100, 4 on A30) and compute slices (7 and 4). A GPU instance of a
profile takes `memory` consecutive memory slices starting at one of the profile's allowed start slices, and
`compute` compute slices. Instances fit together when their memory slices do not overlap and their compute
slices add up to at most the GPU's (NVIDIA MIG user guide, "Supported MIG Profiles", the placements that
`nvidia-smi mig -lgipp` lists). So 4g.20gb + 3g.20gb fits (slices 0-3 and 4-7), two 4g.20gb do not (both
start at 0), 3g.20gb + 3g.20gb fits (starts 0 and 4, one compute slice unused). Summing sevenths is not enough.

An instance is named `profile@start`. Pure: tables and set arithmetic.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from greengpu.model import GPU_UNITS


@dataclass(frozen=True)
class MigProfile:
    """One GPU instance profile: compute slices, memory slices, and the memory slices it may start at."""

    name: str
    compute: int
    memory: int
    starts: tuple[int, ...]


@dataclass(frozen=True)
class MigFamily:
    """The MIG geometry of a kind of GPU."""

    name: str
    compute_slices: int
    memory_slices: int
    profiles: dict[str, MigProfile]


def _family(name: str, compute_slices: int, memory_slices: int,
            rows: Sequence[tuple[str, int, int, tuple[int, ...]]]) -> MigFamily:
    return MigFamily(name, compute_slices, memory_slices, {r[0]: MigProfile(*r) for r in rows})


A100_40GB = _family("A100-40GB", 7, 8, [
    ("1g.5gb", 1, 1, (0, 1, 2, 3, 4, 5, 6)),
    ("1g.10gb", 1, 2, (0, 2, 4, 6)),
    ("2g.10gb", 2, 2, (0, 2, 4)),
    ("3g.20gb", 3, 4, (0, 4)),
    ("4g.20gb", 4, 4, (0,)),
    ("7g.40gb", 7, 8, (0,)),
])
GPU_80GB = _family("A100/H100-80GB", 7, 8, [
    ("1g.10gb", 1, 1, (0, 1, 2, 3, 4, 5, 6)),
    ("1g.20gb", 1, 2, (0, 2, 4, 6)),
    ("2g.20gb", 2, 2, (0, 2, 4)),
    ("3g.40gb", 3, 4, (0, 4)),
    ("4g.40gb", 4, 4, (0,)),
    ("7g.80gb", 7, 8, (0,)),
])
A30_24GB = _family("A30-24GB", 4, 4, [
    ("1g.6gb", 1, 1, (0, 1, 2, 3)),
    ("2g.12gb", 2, 2, (0, 2)),
    ("4g.24gb", 4, 4, (0,)),
])
FAMILIES = (A100_40GB, GPU_80GB, A30_24GB)
ALL_PROFILES = frozenset(name for family in FAMILIES for name in family.profiles)


def family_of(gpu_model: str) -> MigFamily | None:
    """The MIG geometry of a GPU model name as NVML or an inventory spells it (A100-SXM4-40GB, NVIDIA A100 80GB
    PCIe, H100-SXM5-80GB, A30); None for a model without MIG."""
    model = gpu_model.upper().replace(" ", "-")
    if "A30" in model.split("-") or model.endswith("A30") or "-A30-" in f"-{model}-":
        return A30_24GB
    if "80GB" in model and ("A100" in model or "H100" in model):
        return GPU_80GB
    if "A100" in model:
        return A100_40GB
    return None


def parse_instance(instance: str) -> tuple[str, int]:
    """`profile@start` -> (profile, start)."""
    profile, _, start = instance.partition("@")
    return profile, int(start)


def instance_name(profile: str, start: int) -> str:
    return f"{profile}@{start}"


def profile_units(family: MigFamily, profile: str) -> int:
    """The share of a GPU one instance counts as, in milli-GPUs: its compute slices over the GPU's (1g.5gb is
    1/7 of an A100), rounded down so that instances that fit never add up to more than one GPU."""
    return GPU_UNITS * family.profiles[profile].compute // family.compute_slices


def _slices(family: MigFamily, instance: str) -> tuple[range, int]:
    profile, start = parse_instance(instance)
    shape = family.profiles[profile]
    return range(start, start + shape.memory), shape.compute


def layout_problem(family: MigFamily, instances: Iterable[str]) -> str | None:
    """Why these instances cannot exist together on one GPU (unknown profile, start not allowed, memory slices
    overlapping, compute slices over the GPU's), or None when they fit."""
    memory: set[int] = set()
    compute = 0
    for instance in instances:
        profile, start = parse_instance(instance)
        shape = family.profiles.get(profile)
        if shape is None:
            return f"{profile} is not a {family.name} MIG profile"
        if start not in shape.starts:
            return f"{profile} cannot start at memory slice {start}"
        taken, slices = _slices(family, instance)
        if memory.intersection(taken):
            return f"{instance} overlaps another instance"
        memory.update(taken)
        compute += slices
    if compute > family.compute_slices:
        return f"{compute} compute slices, more than the GPU's {family.compute_slices}"
    return None


def place_instance(family: MigFamily, instances: Iterable[str], profile: str) -> str | None:
    """The instance of `profile` at the lowest allowed start that fits beside `instances`, or None."""
    existing = tuple(instances)
    for start in family.profiles[profile].starts:
        candidate = instance_name(profile, start)
        if layout_problem(family, (*existing, candidate)) is None:
            return candidate
    return None


def fits(family: MigFamily, profiles: Iterable[str], beside: Sequence[str] = ()) -> bool:
    """Whether instances of these profiles can all be created beside `beside` on one GPU: a search over every
    allowed start (a greedy lowest start would miss 3g.20gb + 4g.20gb, which fits only with the 4g at 0)."""
    wanted = sorted(profiles, key=lambda p: (-family.profiles[p].memory, -family.profiles[p].compute, p))
    return _search(family, list(beside), wanted)


def _search(family: MigFamily, placed: list[str], wanted: list[str]) -> bool:
    if not wanted:
        return True
    profile, rest = wanted[0], wanted[1:]
    for start in family.profiles[profile].starts:
        candidate = instance_name(profile, start)
        if layout_problem(family, (*placed, candidate)) is None and _search(family, [*placed, candidate], rest):
            return True
    return False


def partition_for(family: MigFamily, profile: str, allowed: Sequence[str]) -> tuple[str, ...]:
    """A new partition of an empty GPU for a job of `profile`: as many instances of it as fit (the next jobs
    are likely alike), then the free slices filled with the largest allowed profiles that still fit."""
    instances: list[str] = []
    while (instance := place_instance(family, instances, profile)) is not None:
        instances.append(instance)
    by_size = sorted((p for p in allowed if p in family.profiles),
                     key=lambda p: (-family.profiles[p].compute, -family.profiles[p].memory, p))
    for other in by_size:
        while (instance := place_instance(family, instances, other)) is not None:
            instances.append(instance)
    return tuple(sorted(instances, key=lambda i: (parse_instance(i)[1], i)))


def free_compute(family: MigFamily, instances: Iterable[str], used: Iterable[str]) -> int:
    """Compute slices of the partition's instances not in use (the best-fit key: fewer is fuller)."""
    taken = set(used)
    return sum(family.profiles[parse_instance(i)[0]].compute for i in instances if i not in taken)
