"""`greengpu check --sharing-live`: where the live GPU sharing disagrees with the inventory, as warnings.

`kubernetes`: the GPU Operator's labels and resources on every node (greengpu.backends.kube_sharing);
`nvml`: this node's GPUs (greengpu.backends.nvml_mig), compared as the inventory node of this host's name.
A source that cannot be read is one line and exit 2 (BadInput), never a traceback.
"""

from __future__ import annotations

import socket
from urllib.parse import urlsplit

from greengpu.backends.gpu_sharing import NodeSharing, sharing_disagreements
from greengpu.backends.sharing_live import declared_sharing
from greengpu.errors import BadInput
from greengpu.model import Cluster


def live_sharing_warnings(cluster: Cluster, source: str, kube_host: str | None) -> list[str]:
    """One warning per node whose live sharing disagrees with the inventory."""
    declared = declared_sharing(cluster)
    if not declared:
        return ["--sharing-live: no node type declares mig or time_slicing; nothing to compare"]
    readings = _kubernetes(kube_host) if source == "kubernetes" else _nvml(cluster)
    missing = sorted(set(declared) - {r.node for r in readings})
    lines = [f"GPU sharing: {line}" for line in sharing_disagreements(declared, readings)]
    if missing and source == "kubernetes":
        lines.append(f"GPU sharing: {len(missing)} node(s) of the inventory not in the cluster: "
                     + ", ".join(missing[:5]) + (" ..." if len(missing) > 5 else ""))
    return lines


def _kubernetes(kube_host: str | None) -> list[NodeSharing]:
    from greengpu.backends.kube_sharing import read_nodes_sharing
    from greengpu.backends.kubernetes import KubeApi, KubeError, make_api_client

    if kube_host is not None:
        _check_url(kube_host)
    try:
        return read_nodes_sharing(KubeApi(make_api_client(host=kube_host)))
    except KubeError as error:
        raise BadInput(f"--sharing-live kubernetes: {error}") from None


def _check_url(url: str) -> None:
    """An API server URL is http(s)://host[:port][/path]; anything else is one line, exit 2."""
    try:
        parsed = urlsplit(url)
        port = parsed.port
    except ValueError as error:
        raise BadInput(f"--kube-host {url[:80]!r}: not a URL ({error})") from None
    if parsed.scheme not in ("http", "https") or not parsed.hostname or (port is not None and port == 0):
        raise BadInput(f"--kube-host {url[:80]!r}: not an http:// or https:// URL with a host")


def _nvml(cluster: Cluster) -> list[NodeSharing]:
    from greengpu.backends.nvml import NvmlBackend, NvmlUnavailable

    host = socket.gethostname().split(".")[0]
    if host not in {n.name for n in cluster.nodes}:
        raise BadInput(f"--sharing-live nvml: this host {host!r} is not a node of the inventory")
    backend = NvmlBackend()
    try:
        backend.open()
    except NvmlUnavailable as error:
        raise BadInput(f"--sharing-live nvml: {error}") from None
    return [backend.read_node_sharing(host)]
