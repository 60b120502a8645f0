"""The inventory's cloud pools (docs/INVENTORY.md, docs/SPOT-LIVE.md): price, instance, Slurm cloud node names
and the provider commands that launch and release their nodes."""

from __future__ import annotations

import shlex
import string
from dataclasses import dataclass
from pathlib import Path

from greengpu.config.fields import Fields
from greengpu.config.node_names import MAX_NODES_PER_EXPRESSION, NAME_RE, expand_names, shown_path
from greengpu.config.prices import PriceTable, read_price_csv
from greengpu.config.yamlsource import YamlDocument
from greengpu.model import Node, NodeType, Pool

POOL_KEYS = ("type", "spot", "price_per_hour", "interruptions_per_hour", "max_nodes", "instance_type", "region", "zone",
             "price_csv", "node_names", "launch_command", "release_command", "command_timeout_s")
TEMPLATE_FIELDS = ("node", "pool", "instance_type", "region", "zone")
"""Placeholders a pool's launch and release commands may use."""
DEFAULT_COMMAND_TIMEOUT_S = 600.0
"""How long a launch or release command may run (a cloud instance takes minutes to be granted)."""


@dataclass(frozen=True)
class CloudPool:
    """What the live bodies need of a cloud pool beyond its price: the instance it launches, the Slurm
    cloud node names that stand for its nodes and the provider commands (docs/SPOT-LIVE.md)."""

    name: str
    spot: bool
    instance_type: str
    region: str
    zone: str
    node_names: tuple[str, ...]
    launch_command: tuple[str, ...]
    release_command: tuple[str, ...]
    command_timeout_s: float = DEFAULT_COMMAND_TIMEOUT_S


def parse_pools(doc: YamlDocument, root: Fields, node_types: dict[str, NodeType],
           base_dir: Path) -> list[tuple[Pool, CloudPool]]:
    fields = root.sub("pools")
    if fields is None:
        return []
    pools: list[tuple[Pool, CloudPool]] = []
    tables: dict[str, PriceTable] = {}
    for name in fields.data:
        entry = fields.sub(name, required=True)
        assert entry is not None
        entry.reject_unknown(POOL_KEYS)
        type_name = entry.string("type", required=True)
        assert type_name is not None
        if type_name not in node_types:
            known = ", ".join(sorted(node_types)) or "none defined"
            raise entry.error("type", f"unknown node type {type_name!r} (known: {known})")
        spot = entry.boolean("spot", False)
        price = _pool_price(entry, node_types[type_name], spot, base_dir, tables)
        rate = entry.number("interruptions_per_hour", 0.0, minimum=0.0)
        if rate and not spot:
            raise entry.error("interruptions_per_hour", "only spot pools are interrupted; set spot: true")
        max_nodes = entry.integer("max_nodes", required=True, minimum=0)
        assert rate is not None and max_nodes is not None
        pools.append((Pool(name=name, type_name=type_name, spot=spot, price_per_hour=price,
                           interruptions_per_hour=rate, max_nodes=max_nodes),
                      _cloud_pool(entry, name, spot, max_nodes)))
    return pools


def _pool_price(entry: Fields, node_type: NodeType, spot: bool, base_dir: Path,
                tables: dict[str, PriceTable]) -> float:
    """`price_per_hour`, or the price of the pool's `instance_type` (and `region`, `zone`) in `price_csv`."""
    if entry.has("price_per_hour") and entry.has("price_csv"):
        raise entry.error("price_csv", "give either price_per_hour or price_csv, not both")
    csv_name = entry.string("price_csv")
    if csv_name is None:
        return entry.req_number("price_per_hour", minimum=0.0)
    instance_type = entry.string("instance_type")
    if instance_type is None:
        raise entry.error("instance_type", "missing required key (price_csv gives the price of an instance type)")
    if csv_name not in tables:
        tables[csv_name] = read_price_csv(base_dir / csv_name, shown_name=shown_path(base_dir, csv_name))
    table = tables[csv_name]
    key = "zone" if entry.has("zone") else "region" if entry.has("region") else "instance_type"
    if not table.matching(instance_type):
        key = "instance_type"
    try:
        prices = table.pool_prices(instance_type, entry.string("region"), entry.string("zone"))
    except ValueError as exc:
        raise entry.error(key, str(exc)) from None
    if prices.gpus_per_node != node_type.gpus:
        raise entry.error("instance_type", f"{instance_type} has {prices.gpus_per_node:g} GPUs ({prices.file}:"
                                           f"{prices.lines[0]}) but node type {node_type.name} has {node_type.gpus}")
    price = prices.per_node_hour(spot)
    if price is None:
        raise entry.error(key, f"{instance_type} has no {'SpotPrice' if spot else 'Price'} for "
                               f"{entry.string('zone') or entry.string('region') or 'any region'} in {prices.file}")
    return price


def _cloud_pool(entry: Fields, name: str, spot: bool, max_nodes: int) -> CloudPool:
    """The pool's live settings: Slurm cloud node names and commands. A pool with a launch or release command
    has nodes NAME-1 ... NAME-max_nodes unless `node_names` names them; one without (replay only) has none."""
    expression = entry.string("node_names")
    live = entry.has("launch_command") or entry.has("release_command")
    if expression is None and not live:
        node_names: list[str] = []  # a replay-only pool: no Slurm nodes stand for it
    elif expression is None:
        if max_nodes > MAX_NODES_PER_EXPRESSION:
            raise entry.error("max_nodes", f"{max_nodes} nodes is more than {MAX_NODES_PER_EXPRESSION} Slurm cloud "
                                           "nodes")
        node_names = [f"{name}-{index}" for index in range(1, max_nodes + 1)]
        bad = [n for n in node_names[:1] if not NAME_RE.match(n)]
        if bad:
            raise entry.error("node_names", f"pool name {name!r} makes node names like {bad[0]!r}; name them here")
    else:
        node_names = expand_names(entry, "node_names")
        if len(node_names) != max_nodes:
            raise entry.error("node_names", f"names {len(node_names)} nodes, max_nodes is {max_nodes}")
    timeout_s = entry.number("command_timeout_s", DEFAULT_COMMAND_TIMEOUT_S, minimum=0.0, exclusive_minimum=True,
                             maximum=86_400.0)
    assert timeout_s is not None
    return CloudPool(name=name, spot=spot, instance_type=entry.string("instance_type", "") or "",
                     region=entry.string("region", "") or "", zone=entry.string("zone", "") or "",
                     node_names=tuple(node_names), launch_command=_template(entry, "launch_command"),
                     release_command=_template(entry, "release_command"), command_timeout_s=timeout_s)


def _template(entry: Fields, key: str) -> tuple[str, ...]:
    """A command template split as a shell would (it is run without one); placeholders checked now."""
    text = entry.string(key)
    if text is None:
        return ()
    try:
        argv = shlex.split(text)
    except ValueError as exc:
        raise entry.error(key, f"cannot split into words: {exc}") from None
    for word in argv:
        try:
            names = [field for _, field, _, _ in string.Formatter().parse(word) if field is not None]
        except ValueError as exc:
            raise entry.error(key, f"bad placeholder in {word!r}: {exc}") from None
        unknown = [field for field in names if field not in TEMPLATE_FIELDS]
        if unknown:
            raise entry.error(key, f"unknown placeholder {{{unknown[0]}}} (allowed: "
                                   f"{', '.join('{' + f + '}' for f in TEMPLATE_FIELDS)})")
    return tuple(argv)


def check_cloud_names(doc: YamlDocument, nodes: tuple[Node, ...], pools: list[tuple[Pool, CloudPool]]) -> None:
    """A cloud node's name is unique among all nodes: Slurm and the resume program tell them apart by name."""
    owner = {node.name: "nodes" for node in nodes}
    for _, cloud in pools:
        for name in cloud.node_names:
            if name in owner:
                raise doc.error(("pools", cloud.name, "node_names"),
                                f"node name {name!r} is also in {owner[name]}")
            owner[name] = f"pools.{cloud.name}"
