"""The replay's MIG GPUs: each one's partition, repartitioned when the core says so (`PartitionGpu`), unusable
for the node type's `mig.reconfigure_s` after, and the count of repartitions for the results."""

from __future__ import annotations

from collections.abc import Mapping

from greengpu.model import Cluster, MigPartition, PartitionGpu


class MigPartitions:
    """The partitions the replay's MIG GPUs hold (a new mapping on every change: snapshots keep theirs)."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.current: Mapping[tuple[str, int], MigPartition] = {}
        self.reconfigurations = 0
        self.has_mig = any(cluster.node_types[n.type_name].mig for n in cluster.nodes)

    def apply(self, action: PartitionGpu, now_s: float) -> None:
        """Repartition the GPU: its new instances are usable `reconfigure_s` from now."""
        node = next(n for n in self.cluster.nodes if n.name == action.node)
        mig = self.cluster.node_types[node.type_name].mig
        reconfigure_s = mig.reconfigure_s if mig is not None else 0.0
        self.current = {**self.current,
                        (action.node, action.gpu_index): MigPartition(action.instances, now_s + reconfigure_s)}
        self.reconfigurations += 1

    def busy(self, now_s: float) -> bool:
        """Whether a GPU is still being repartitioned (a job waits for it: the replay is not stalled)."""
        return any(p.ready_s > now_s for p in self.current.values())
