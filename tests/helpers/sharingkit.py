"""Small clusters with MIG and time-sliced GPUs for the sharing tests (docs/GPU-SHARING.md)."""

from __future__ import annotations

from greengpu.model import GPU_UNITS, Cluster, MigConfig, Node, NodeType, Site, Tenant, TimeSlicing

PROFILES = ("1g.5gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb")
ONE_G = GPU_UNITS // 7


def a100(name: str, mig: int = 0, sliced: int = 0, replicas: int = 4,
         classes: frozenset[str] = frozenset({"interactive", "batch"}), reconfigure_s: float = 60.0) -> NodeType:
    return NodeType(name=name, gpus=4, gpu_model="A100-SXM4-40GB", gpu_idle_w=50, gpu_max_w=400,
                    gpu_min_limit_w=100, host_idle_w=300, host_sleep_w=6, boot_s=240, gpu_memory_gb=40,
                    mig=MigConfig(mig, PROFILES, reconfigure_s) if mig else None,
                    time_slicing=TimeSlicing(sliced, replicas, classes) if sliced else None)


def lab(*types: NodeType, tenants: tuple[Tenant, ...] = ()) -> Cluster:
    nodes = tuple(Node(f"n{i}", t.name) for i, t in enumerate(types))
    return Cluster(Site(), {t.name: t for t in types}, nodes, {t.name: t for t in tenants})


