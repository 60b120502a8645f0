"""The live MIG partitions from the reads (laid out, or unavailable fail safe), and a repartition refused by a
body that cannot make one (Slurm: gres owns the partitions)."""

from __future__ import annotations

import math

import pytest
from sharingkit import a100, lab

from greengpu.backends.gpu_sharing import GpuSharing, MigInstance, NodeSharing, node_from_gpus
from greengpu.backends.sharing_live import UNAVAILABLE, declared_sharing, live_partitions
from greengpu.control.daemon.mig_actions import PartitionRefused, carry_out_partition
from greengpu.model import MigPartition, PartitionGpu


def test_label_counts_are_laid_out_on_the_mig_gpus() -> None:
    cluster = lab(a100("mig", mig=2))
    reading = NodeSharing("n0", mig_devices={"3g.20gb": 2, "1g.5gb": 2}, mig_strategy="mixed")
    partitions, warnings = live_partitions(cluster, [reading], {("n0", 1): 500.0})
    assert warnings == []
    assert partitions[("n0", 0)] == MigPartition(("3g.20gb@0", "3g.20gb@4"), -math.inf)
    assert partitions[("n0", 1)] == MigPartition(("1g.5gb@0", "1g.5gb@1"), 500.0)


def test_what_cannot_be_laid_out_or_disagrees_is_unavailable() -> None:
    cluster = lab(a100("mig", mig=2), a100("plain"))
    too_many = NodeSharing("n0", mig_devices={"7g.40gb": 3}, mig_strategy="mixed")
    partitions, warnings = live_partitions(cluster, [too_many])
    assert partitions == {("n0", 0): UNAVAILABLE, ("n0", 1): UNAVAILABLE}
    assert warnings == ["n0: MIG GPUs 0-1 unavailable (fail safe): 3 x 7g.40gb do not fit on 2 MIG GPUs with the rest"]
    gpus = [GpuSharing(0, True, True, True, (MigInstance("7g.40gb", 0, 8),)), GpuSharing(1, True, False, False),
            GpuSharing(2, True, False, False), GpuSharing(3, True, False, False)]
    partitions, warnings = live_partitions(cluster, [node_from_gpus("n0", gpus)])
    assert partitions[("n0", 0)] == UNAVAILABLE
    assert warnings == ["n0: MIG GPUs 0-1 unavailable (fail safe): GPU 1 is not in MIG mode, the inventory declares "
                        "GPUs 0-1 in MIG mode"]
    _, warnings = live_partitions(cluster, [])
    assert warnings == ["n0: MIG GPUs 0-1 unavailable (fail safe): no MIG reading"]
    assert set(declared_sharing(cluster)) == {"n0"}  # the plain node declares nothing


class SlurmLike:
    """A body with no way to repartition (as greengpu's Slurm body: gres owns the MIG layout)."""

    name = "slurm"


def test_a_body_that_cannot_repartition_refuses_with_one_line() -> None:
    with pytest.raises(PartitionRefused) as refused:
        carry_out_partition(SlurmLike(), PartitionGpu("n0", 1, ("1g.5gb@0", "3g.20gb@4")), 0.0)
    assert str(refused.value) == ("n0 GPU 1: repartition to 1g.5gb@0 3g.20gb@4 refused: Slurm's gres configuration "
                                  "owns MIG partitions; nothing changed, the job keeps waiting")
