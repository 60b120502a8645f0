"""Load and validate the cluster inventory (docs/INVENTORY.md)."""

from __future__ import annotations

import ipaddress
import re
from pathlib import Path

from greengpu.config.cloud_pools import CloudPool, check_cloud_names, parse_pools
from greengpu.config.fields import Fields
from greengpu.config.gpu_sharing import SHARING_KEYS, gpu_sharing
from greengpu.config.node_names import expand_names, shown_path
from greengpu.config.series import read_series_csv
from greengpu.config.yamlsource import PathKey, YamlDocument, load_yaml_file, load_yaml_text
from greengpu.errors import ConfigError
from greengpu.localtime import time_zone_problem
from greengpu.model import Cluster, Node, NodeType, Site, Tenant, TimeSeries

_MAC_RE = re.compile(r"^[0-9a-fA-F]{2}([:-])[0-9a-fA-F]{2}(\1[0-9a-fA-F]{2}){4}$")
_HOSTNAME_RE = re.compile(r"^(?=.{1,253}$)[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
                          r"(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*\.?$")
_MAX_MAC = (1 << 48) - 1

TOP_KEYS = ("site", "node_types", "nodes", "tenants", "pools")
SITE_KEYS = ("pue", "price_per_kwh", "tariff_csv", "carbon_g_per_kwh", "carbon_csv", "currency", "name", "timezone")
NODE_TYPE_KEYS = (
    "gpus", "gpu_model", "gpu_idle_w", "gpu_max_w", "gpu_min_limit_w", "host_idle_w", "host_sleep_w",
    "boot_s", "gpu_memory_gb", "gpu_max_clock_mhz", *SHARING_KEYS,
)
NODE_KEYS = ("name", "type", "domain", "mac", "wol_host", "wol_port", "ipmi_host", "features", "partitions")
TENANT_KEYS = ("quota_gpus", "weight", "borrow_limit_gpus", "quota_gpus_by_model", "max_gpu_memory_gb")
def parse_mac(text: str) -> int:
    """Parse `aa:bb:cc:dd:ee:ff` (or with dashes) into a 48-bit integer; ValueError if malformed."""
    if not _MAC_RE.match(text):
        raise ValueError(text)
    return int(text.replace(":", "").replace("-", ""), 16)


def format_mac(value: int) -> str:
    """Format a 48-bit integer as lower-case colon-separated MAC."""
    raw = f"{value:012x}"
    return ":".join(raw[i : i + 2] for i in range(0, 12, 2))


def _site(doc: YamlDocument, root: Fields, base_dir: Path) -> Site:
    fields = root.sub("site")
    if fields is None:
        return Site()
    fields.reject_unknown(SITE_KEYS)
    pue = fields.number("pue", 1.0, minimum=1.0, maximum=5.0)
    price = fields.number("price_per_kwh", None)
    carbon = fields.number("carbon_g_per_kwh", None, minimum=0.0)
    tariff: TimeSeries | None = None
    carbon_series: TimeSeries | None = None
    if fields.has("price_per_kwh") and fields.has("tariff_csv"):
        raise fields.error("tariff_csv", "give either price_per_kwh or tariff_csv, not both")
    if fields.has("carbon_g_per_kwh") and fields.has("carbon_csv"):
        raise fields.error("carbon_csv", "give either carbon_g_per_kwh or carbon_csv, not both")
    tariff_name = fields.string("tariff_csv")
    if tariff_name is not None:
        tariff = read_series_csv(base_dir / tariff_name, "price_per_kwh", allow_negative=True,
                                 shown_name=shown_path(base_dir, tariff_name))
    carbon_name = fields.string("carbon_csv")
    if carbon_name is not None:
        carbon_series = read_series_csv(base_dir / carbon_name, "g_per_kwh", allow_negative=False,
                                        shown_name=shown_path(base_dir, carbon_name))
    assert pue is not None
    timezone = fields.string("timezone", "UTC") or "UTC"
    problem = time_zone_problem(timezone)
    if problem is not None:
        raise fields.error("timezone", problem)
    return Site(
        pue=pue,
        currency=fields.string("currency", "USD") or "USD",
        price_per_kwh=price,
        tariff=tariff,
        carbon_g_per_kwh=carbon,
        carbon=carbon_series,
        timezone=timezone,
    )


def _node_type(fields: Fields, name: str) -> NodeType:
    fields.reject_unknown(NODE_TYPE_KEYS)
    gpus = fields.integer("gpus", required=True, minimum=1, maximum=64)
    model = fields.string("gpu_model", required=True)
    gpu_max_w = fields.req_number("gpu_max_w", minimum=0.0, exclusive_minimum=True)
    gpu_idle_w = fields.req_number("gpu_idle_w", minimum=0.0)
    gpu_min_limit_w = fields.number("gpu_min_limit_w", gpu_max_w, minimum=0.0, exclusive_minimum=True)
    assert gpu_min_limit_w is not None and gpus is not None and model is not None
    if gpu_idle_w > gpu_max_w:
        raise fields.error("gpu_idle_w", f"idle power {gpu_idle_w:g} W is above gpu_max_w {gpu_max_w:g} W")
    if gpu_min_limit_w > gpu_max_w:
        raise fields.error(
            "gpu_min_limit_w", f"minimum limit {gpu_min_limit_w:g} W is above gpu_max_w {gpu_max_w:g} W"
        )
    host_idle_w = fields.req_number("host_idle_w", minimum=0.0)
    host_sleep_w = fields.number("host_sleep_w", 0.0, minimum=0.0)
    assert host_sleep_w is not None
    if host_sleep_w > host_idle_w:
        raise fields.error("host_sleep_w", f"sleep power {host_sleep_w:g} W is above host_idle_w {host_idle_w:g} W")
    boot_s = fields.number("boot_s", 180.0, minimum=0.0, maximum=86_400.0)
    memory = fields.number("gpu_memory_gb", 0.0, minimum=0.0)
    max_clock_mhz = fields.integer("gpu_max_clock_mhz", 0, minimum=0, maximum=10_000)
    assert boot_s is not None and memory is not None and max_clock_mhz is not None
    mig, time_slicing = gpu_sharing(fields, gpus, model)  # docs/GPU-SHARING.md
    return NodeType(
        name=name, gpus=gpus, gpu_model=model, gpu_idle_w=gpu_idle_w, gpu_max_w=gpu_max_w,
        gpu_min_limit_w=gpu_min_limit_w, host_idle_w=host_idle_w, host_sleep_w=host_sleep_w,
        boot_s=boot_s, gpu_memory_gb=memory, gpu_max_clock_mhz=max_clock_mhz, mig=mig, time_slicing=time_slicing,
    )


def _nodes(doc: YamlDocument, root: Fields, node_types: dict[str, NodeType]) -> tuple[Node, ...]:
    entries = root.items("nodes", required=True)
    if not entries:
        raise root.error("nodes", "must list at least one node")
    nodes: list[Node] = []
    seen_names: dict[str, str] = {}
    seen_macs: dict[int, str] = {}
    for path, entry in entries:
        fields = Fields(doc, path, entry)
        fields.reject_unknown(NODE_KEYS)
        names = expand_names(fields)
        type_name = fields.string("type", required=True)
        assert type_name is not None
        if type_name not in node_types:
            known = ", ".join(sorted(node_types)) or "none defined"
            raise fields.error("type", f"unknown node type {type_name!r} (known: {known})")
        domain = fields.string("domain", "") or ""
        first_mac: int | None = None
        if fields.has("mac"):
            mac_text = fields.raw("mac")
            if not isinstance(mac_text, str):
                raise fields.error("mac", f"expected a MAC address as a quoted string, got {mac_text!r}")
            try:
                first_mac = parse_mac(mac_text)
            except ValueError:
                raise fields.error("mac", f"bad MAC address {mac_text!r} (expected aa:bb:cc:dd:ee:ff)") from None
            if first_mac + len(names) - 1 > _MAX_MAC:
                raise fields.error("mac", f"MAC range from {mac_text} overflows for {len(names)} nodes")
            if first_mac & (1 << 40):
                raise fields.error("mac", f"{mac_text} is a multicast MAC, not a network card's")
            last_mac = first_mac + len(names) - 1
            if last_mac >> 40 != first_mac >> 40:
                # The first octet's low bit is the multicast bit: a range that carries into the first
                # octet runs into multicast addresses (aa:ff:ff:ff:ff:ff + 1 is ab:00:00:00:00:00).
                raise fields.error("mac", f"MAC range from {mac_text} for {len(names)} nodes runs into multicast "
                                          f"addresses ({format_mac(last_mac)}); the first octet must stay the same")
            if first_mac == 0:
                raise fields.error("mac", f"{mac_text} is not a network card's MAC")
        wol_host = fields.string("wol_host", "255.255.255.255") or "255.255.255.255"
        try:
            ipaddress.ip_address(wol_host)
        except ValueError:
            raise fields.error("wol_host", f"not an IP address: {wol_host!r}") from None
        wol_port = fields.integer("wol_port", 9, minimum=1, maximum=65535)
        assert wol_port is not None
        ipmi_host = fields.string("ipmi_host")
        if ipmi_host is not None:
            _check_host(fields, "ipmi_host", ipmi_host)
        features, partitions = _words(fields, "features"), _words(fields, "partitions")
        for offset, name in enumerate(names):
            if name in seen_names:
                raise fields.error("name", f"duplicate node name {name!r} (also in {seen_names[name]})")
            seen_names[name] = _path_text(path)
            mac: str | None = None
            if first_mac is not None:
                value = first_mac + offset
                if value in seen_macs:
                    raise fields.error("mac", f"MAC {format_mac(value)} of {name} is also given to {seen_macs[value]}")
                seen_macs[value] = name
                mac = format_mac(value)
            nodes.append(
                Node(name=name, type_name=type_name, domain=domain, mac=mac, wol_host=wol_host,
                     wol_port=wol_port, ipmi_host=ipmi_host, features=features, partitions=partitions)
            )
    return tuple(nodes)


def _words(fields: Fields, key: str) -> frozenset[str]:
    """A list of names (`[ib, nvlink]`) or one comma-separated string (`"ib,nvlink"`, as Slurm writes them)."""
    if not fields.has(key):
        return frozenset()
    value = fields.raw(key)
    items = value if isinstance(value, list) else str(value).split(",") if isinstance(value, str) else None
    names = [item.strip() for item in items or () if isinstance(item, str)]
    if items is None or len(names) != len(items) or not all(names):
        raise fields.error(key, f"expected a list of names or a comma-separated string, got {value!r}")
    return frozenset(names)


def _check_host(fields: Fields, key: str, host: str) -> None:
    """An IP address or a DNS host name (it reaches ipmitool's argv: no spaces, no leading '-')."""
    try:
        ipaddress.ip_address(host)
        return
    except ValueError:
        pass
    if not _HOSTNAME_RE.match(host):
        raise fields.error(key, f"not an IP address or host name: {host!r}")


def _path_text(path: PathKey) -> str:
    from greengpu.config.yamlsource import format_path

    return format_path(path)


def _tenants(doc: YamlDocument, root: Fields, models: set[str]) -> dict[str, Tenant]:
    fields = root.sub("tenants")
    if fields is None:
        return {}
    tenants: dict[str, Tenant] = {}
    for name in fields.data:
        entry = fields.sub(name)
        if entry is None:
            entry = Fields(doc, (*fields.path, name), {})
        entry.reject_unknown(TENANT_KEYS)
        by_model: dict[str, float] = {}
        by_model_fields = entry.sub("quota_gpus_by_model")
        if by_model_fields is not None:
            for model in by_model_fields.data:
                if model not in models:
                    known = ", ".join(sorted(models))
                    raise by_model_fields.error(model, f"unknown GPU model {model!r} (inventory has: {known})")
                by_model[model] = by_model_fields.req_number(model, minimum=0.0)
        by_model_total = sum(by_model.values())
        quota = entry.number("quota_gpus", by_model_total, minimum=0.0)
        if by_model and entry.has("quota_gpus") and abs((quota or 0.0) - by_model_total) > 1e-9:
            raise entry.error("quota_gpus", f"is {quota:g} but quota_gpus_by_model adds up to {by_model_total:g}")
        weight = entry.number("weight", 1.0, minimum=0.0, exclusive_minimum=True)
        borrow = entry.number("borrow_limit_gpus", None, minimum=0.0)
        memory = entry.number("max_gpu_memory_gb", None, minimum=0.0)
        assert quota is not None and weight is not None
        tenants[name] = Tenant(
            name=name, quota_gpus=quota, weight=weight, borrow_limit_gpus=borrow,
            quota_gpus_by_model=by_model, max_gpu_memory_gb=memory,
        )
    return tenants


def build_cluster(doc: YamlDocument) -> Cluster:
    """Validate a loaded inventory document and build the Cluster."""
    root = Fields(doc, (), doc.value, what="a mapping with site, node_types, nodes and tenants")
    root.reject_unknown(TOP_KEYS)
    base_dir = Path(doc.file).parent
    site = _site(doc, root, base_dir)
    types_fields = root.sub("node_types", required=True)
    assert types_fields is not None
    if not types_fields.data:
        raise types_fields.error(None, "must define at least one node type")
    node_types: dict[str, NodeType] = {}
    for name in types_fields.data:
        entry = types_fields.sub(name, required=True)
        assert entry is not None
        node_types[name] = _node_type(entry, name)
    nodes = _nodes(doc, root, node_types)
    models = {t.gpu_model for t in node_types.values()}
    tenants = _tenants(doc, root, models)
    pools = parse_pools(doc, root, node_types, base_dir)
    check_cloud_names(doc, nodes, pools)
    return Cluster(site=site, node_types=node_types, nodes=nodes, tenants=tenants,
                   pools={pool.name: pool for pool, _ in pools})


def build_cloud_pools(doc: YamlDocument) -> dict[str, CloudPool]:
    """The inventory's cloud pools with their live settings (validated as build_cluster validates them)."""
    build_cluster(doc)
    root = Fields(doc, (), doc.value)
    types = {name: _node_type(Fields(doc, ("node_types", name), value), name)
             for name, value in Fields(doc, ("node_types",), root.data["node_types"]).data.items()}
    return {cloud.name: cloud for _, cloud in parse_pools(doc, root, types, Path(doc.file).parent)}


def load_cloud_pools(path: str | Path) -> dict[str, CloudPool]:
    """The cloud pools of the inventory at `path` (the Slurm resume and suspend programs). Raises ConfigError."""
    return build_cloud_pools(load_yaml_file(path))


def load_cluster(path: str | Path) -> Cluster:
    """Load, validate and build the cluster inventory at `path`. Raises ConfigError."""
    return build_cluster(load_yaml_file(path))


def load_cluster_text(text: str, file: str = "cluster.yaml") -> Cluster:
    """Like load_cluster, from text (tests, generated inventories)."""
    doc = load_yaml_text(text, file)
    if doc.value is None:
        raise ConfigError(file, None, "", "empty file")
    return build_cluster(doc)
