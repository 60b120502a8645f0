"""Small inventories for the sleep and wake tests: one site, A100 node types, nodes with wake targets."""

from __future__ import annotations

from pathlib import Path

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
