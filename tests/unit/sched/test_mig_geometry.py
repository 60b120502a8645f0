"""MIG geometry against NVIDIA's placement rules (greengpu.sched.mig; docs/GPU-SHARING.md)."""

from __future__ import annotations

import pytest

from greengpu.model import GPU_UNITS
from greengpu.sched.mig import (
    A30_24GB,
    A100_40GB,
    GPU_80GB,
    family_of,
    fits,
    layout_problem,
    partition_for,
    profile_units,
)


@pytest.mark.parametrize("profiles", [
    ["4g.20gb", "3g.20gb"],
    ["4g.20gb", "2g.10gb", "1g.5gb"],
    ["3g.20gb", "3g.20gb"],
    ["1g.5gb"] * 7,
    ["2g.10gb"] * 3 + ["1g.5gb"],
    ["3g.20gb", "2g.10gb", "1g.5gb", "1g.5gb"],
    ["1g.10gb"] * 4,
    ["7g.40gb"],
])
def test_mixes_that_fit_an_a100_40gb(profiles: list[str]) -> None:
    assert fits(A100_40GB, profiles)


@pytest.mark.parametrize("profiles", [
    ["4g.20gb", "4g.20gb"],           # both can only start at memory slice 0
    ["1g.5gb"] * 8,                   # seven compute slices
    ["7g.40gb", "1g.5gb"],
    ["3g.20gb"] * 3,
    ["4g.20gb", "3g.20gb", "1g.5gb"],  # 8 compute slices
    ["2g.10gb"] * 4,                  # starts 0, 2, 4 only
    ["1g.10gb"] * 5,
])
def test_mixes_that_do_not_fit(profiles: list[str]) -> None:
    assert not fits(A100_40GB, profiles)


def test_summing_sevenths_is_not_the_rule() -> None:
    # 4 + 2 = 6 sevenths, yet two 4g instances never fit, and 3g + 3g + 1g (7 sevenths) fits only by position
    assert not fits(A100_40GB, ["4g.20gb", "4g.20gb"])
    assert fits(A100_40GB, ["3g.20gb", "3g.20gb"])
    assert layout_problem(A100_40GB, ["3g.20gb@0", "3g.20gb@4"]) is None
    assert layout_problem(A100_40GB, ["4g.20gb@0", "3g.20gb@0"]) == "3g.20gb@0 overlaps another instance"
    assert layout_problem(A100_40GB, ["3g.20gb@2"]) == "3g.20gb cannot start at memory slice 2"


def test_the_80gb_and_a30_families() -> None:
    assert fits(GPU_80GB, ["4g.40gb", "3g.40gb"]) and not fits(GPU_80GB, ["4g.40gb", "4g.40gb"])
    assert fits(GPU_80GB, ["1g.10gb"] * 7) and not fits(GPU_80GB, ["1g.10gb"] * 8)
    assert fits(A30_24GB, ["2g.12gb", "1g.6gb", "1g.6gb"]) and not fits(A30_24GB, ["2g.12gb"] * 3)
    assert not fits(A30_24GB, ["4g.24gb", "1g.6gb"])


@pytest.mark.parametrize(("model", "family"), [
    ("A100-SXM4-40GB", A100_40GB), ("NVIDIA A100-PCIE-40GB", A100_40GB), ("A100", A100_40GB),
    ("A100-SXM4-80GB", GPU_80GB), ("NVIDIA A100 80GB PCIe", GPU_80GB), ("H100-SXM5-80GB", GPU_80GB),
    ("NVIDIA H100 80GB HBM3", GPU_80GB), ("A30", A30_24GB), ("NVIDIA A30", A30_24GB),
])
def test_gpu_models_map_to_their_geometry(model: str, family: object) -> None:
    assert family_of(model) is family


@pytest.mark.parametrize("model", ["V100", "T4", "L40S", "A40", "RTX A6000", "P100"])
def test_gpus_without_mig(model: str) -> None:
    assert family_of(model) is None


def test_an_instance_counts_its_compute_slices_over_the_gpus() -> None:
    assert profile_units(A100_40GB, "1g.5gb") == GPU_UNITS // 7
    assert profile_units(A100_40GB, "3g.20gb") == 3 * GPU_UNITS // 7
    assert profile_units(A100_40GB, "7g.40gb") == GPU_UNITS
    assert profile_units(A30_24GB, "1g.6gb") == GPU_UNITS // 4
    # rounded down: a full partition never adds up to more than one GPU
    assert 7 * profile_units(A100_40GB, "1g.5gb") <= GPU_UNITS
    assert profile_units(A100_40GB, "4g.20gb") + profile_units(A100_40GB, "3g.20gb") <= GPU_UNITS


def test_a_new_partition_holds_as_many_of_the_profile_as_fit_then_fills_the_rest() -> None:
    allowed = ["1g.5gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb"]
    assert partition_for(A100_40GB, "1g.5gb", allowed) == tuple(f"1g.5gb@{s}" for s in range(7))
    assert partition_for(A100_40GB, "3g.20gb", allowed) == ("3g.20gb@0", "3g.20gb@4")
    assert partition_for(A100_40GB, "2g.10gb", allowed) == ("2g.10gb@0", "2g.10gb@2", "2g.10gb@4", "1g.5gb@6")
    assert partition_for(A100_40GB, "4g.20gb", allowed) == ("4g.20gb@0", "3g.20gb@4")
    # only allowed profiles fill the rest
    assert partition_for(A100_40GB, "4g.20gb", ["4g.20gb", "1g.5gb"]) == (
        "4g.20gb@0", "1g.5gb@4", "1g.5gb@5", "1g.5gb@6")
    for profile in allowed:
        assert layout_problem(A100_40GB, partition_for(A100_40GB, profile, allowed)) is None
