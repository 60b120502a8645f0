"""The daemon's MIG repartitions (`PartitionGpu`): carried out by a body that can repartition, refused fail safe
by one that cannot, and the MIG GPUs as /v1/status shows them.

A body repartitions when it has `partition_gpu(action, now_s)` (the fake cluster, through the fake NVML). On
Kubernetes the GPU Operator's MIG Manager owns the partitions (the `nvidia.com/mig.config` label), on Slurm
the gres configuration does: greengpu changes neither. There the action is refused (`PartitionRefused`):
journaled `refused`, one `partition_refused` alert naming the node, the GPU and the wanted layout, nothing
changed; the job keeps waiting, and the same GPU is not asked again for the daemon's refusal backoff.
"""

from __future__ import annotations

from greengpu.control.bodies.body import ActionFailed
from greengpu.model import ClusterSnapshot, PartitionGpu

OWNERS = {"kubernetes": "the GPU Operator's MIG Manager owns MIG partitions on Kubernetes (nvidia.com/mig.config)",
          "slurm": "Slurm's gres configuration owns MIG partitions"}
"""Who owns the partitions on a body that cannot repartition, for the refusal's line."""


class PartitionRefused(ActionFailed):
    """The body cannot repartition MIG GPUs: nothing was changed (the journal says `refused`)."""


def carry_out_partition(body: object, action: PartitionGpu, now_s: float) -> str:
    """Repartition through the body, or raise PartitionRefused when it cannot."""
    partition = getattr(body, "partition_gpu", None)
    if partition is None:
        owner = OWNERS.get(getattr(body, "name", ""), f"the {getattr(body, 'name', '?')} body cannot repartition")
        raise PartitionRefused(f"{action.node} GPU {action.gpu_index}: repartition to "
                               f"{' '.join(action.instances) or 'no instances'} refused: {owner}; nothing changed, "
                               "the job keeps waiting")
    outcome: str = partition(action, now_s)
    return outcome


def mig_status(snapshot: ClusterSnapshot) -> list[dict[str, object]]:
    """Each MIG GPU's partition, whether it takes work now, and which job holds which instance."""
    held = {(s.node, s.gpu_index, s.instance): r.job.job_id for r in snapshot.running for s in r.slots if s.instance}
    return [{"node": node, "gpu": index, "instances": list(p.instances), "ready": p.ready_s <= snapshot.time_s,
             "jobs": {i: held[(node, index, i)] for i in p.instances if (node, index, i) in held}}
            for (node, index), p in sorted(snapshot.mig_partitions.items())]
