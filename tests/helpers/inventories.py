"""Small inventories for the sleep and wake tests (one site, A100 node types, nodes with wake targets), and the
daemon benchmark's site and jobs."""

from __future__ import annotations

import random
from pathlib import Path

from greengpu.model import Job

SITE = "site: {pue: 1.2, price_per_kwh: 0.1, carbon_g_per_kwh: 300}\n"


def a100_type(gpus: int = 8, host_idle_w: float = 450, boot_s: float = 180) -> str:
    """One A100 node type as a YAML flow mapping."""
    return (f"{{gpus: {gpus}, gpu_model: A100, gpu_idle_w: 55, gpu_max_w: 400, gpu_min_limit_w: 100, "
            f"host_idle_w: {host_idle_w:g}, host_sleep_w: 8, boot_s: {boot_s:g}}}")


def wol_node(name: str, node_type: str, mac: str, port: int) -> str:
    """A node (or hostlist) woken by magic packets sent to 127.0.0.1:`port`."""
    return f'{{name: "{name}", type: {node_type}, mac: "{mac}", wol_host: 127.0.0.1, wol_port: {port}}}'


def write_inventory(path: Path, node_types: dict[str, str], nodes: list[str]) -> Path:
    """Write an inventory of `node_types` (name -> flow mapping) and `nodes` (flow mappings) to `path`."""
    path.write_text(SITE + "node_types:\n" + "".join(f"  {name}: {spec}\n" for name, spec in node_types.items())
                    + "nodes:\n" + "".join(f"  - {node}\n" for node in nodes))
    return path


def write_gpu_site(path: Path, nodes: int, quota_gpus: int, tenants: int = 20) -> Path:
    """The daemon benchmark's inventory: `nodes` 8-GPU A100 nodes and `tenants` tenants of `quota_gpus` each."""
    path.write_text(SITE + "node_types:\n  g8: {gpus: 8, gpu_model: A100, gpu_idle_w: 52, gpu_max_w: 400, "
                    "gpu_min_limit_w: 100, host_idle_w: 600, host_sleep_w: 10, boot_s: 300, gpu_max_clock_mhz: 1410}\n"
                    f"nodes:\n  - {{name: \"n[0001-{nodes:04d}]\", type: g8}}\n"
                    + "tenants:\n" + "".join(f"  t{i}: {{quota_gpus: {quota_gpus}}}\n" for i in range(tenants)))
    return path


def submitted_jobs(count: int, t0: float, tenants: int = 20, seed: int = 3) -> list[Job]:
    """The daemon benchmark's jobs: 1 to 8 GPUs, 1 to 10 hours, all submitted in the 30 s after `t0`."""
    rng = random.Random(seed)
    return [Job(job_id=f"j{i:05d}", tenant=f"t{rng.randrange(tenants)}", gpus=rng.choice((1, 2, 4, 8)),
                duration_s=rng.uniform(3600, 36_000), submit_time_s=t0 + rng.uniform(0, 30),
                job_class=rng.choice(("training", "batch", "inference")), gpus_per_node=None)
            for i in range(count)]
