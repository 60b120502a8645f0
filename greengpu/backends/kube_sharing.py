"""A Kubernetes node's GPU sharing from what the NVIDIA GPU Operator publishes on it, and a pod's
`gpu_profile` from the resources it asks for.

What is read (the labels of GPU Feature Discovery and the MIG Manager, the device plugin's resources):

| published | meaning |
|---|---|
| label `nvidia.com/mig.strategy` | `none`, `single` (every GPU split alike) or `mixed` |
| label `nvidia.com/mig.config` | the MIG Manager's configuration: `all-disabled`, `all-1g.5gb`, `all-balanced`, ... |
| label `nvidia.com/mig.config.state` | `success`; `pending` or `rebooting` while a change waits; `failed` |
| resource `nvidia.com/mig-1g.5gb: "7"` | mixed strategy: MIG devices of each profile (node capacity) |
| label `nvidia.com/gpu.product` = `A100-SXM4-40GB-MIG-1g.5gb` | single strategy: the profile |
| label `nvidia.com/gpu.count` | single strategy: the MIG devices; otherwise the GPUs |
| label `nvidia.com/gpu.sharing-strategy` | `none`, `time-slicing` or `mps` |
| label `nvidia.com/gpu.replicas` | time-slicing: how many pods share each GPU |
| resource `nvidia.com/gpu` (or `nvidia.com/gpu.shared`) | time-slicing: GPUs x replicas |

A value that cannot be read is never a crash: it is one line in the reading's `unknown` (label, value,
why), and the value it would have given stays unknown (None). Pure: the API call is `read_nodes_sharing`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Protocol, TypeAlias, TypeVar

from greengpu.backends.gpu_sharing import TIMESLICE, NodeSharing, is_mig_profile

if TYPE_CHECKING:
    from kubernetes import client

T = TypeVar("T")


class KubeCalls(Protocol):
    """What reading the nodes needs of `greengpu.backends.kubernetes.KubeApi` (which imports this module's
    readers, so it is named by its shape here, not imported)."""

    api_client: client.ApiClient

    def call(self, what: str, call: Callable[..., T]) -> T: ...

STRATEGY = "nvidia.com/mig.strategy"
CONFIG = "nvidia.com/mig.config"
CONFIG_STATE = "nvidia.com/mig.config.state"
PRODUCT = "nvidia.com/gpu.product"
COUNT = "nvidia.com/gpu.count"
SHARING = "nvidia.com/gpu.sharing-strategy"
REPLICAS = "nvidia.com/gpu.replicas"
GPU = "nvidia.com/gpu"
SHARED_GPU = "nvidia.com/gpu.shared"
"""The time-sliced resource's name when the device plugin renames it (`renameByDefault: true`)."""
MIG_PREFIX = "nvidia.com/mig-"
_LABEL_VALUE = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?$")
_MAX_COUNT = 1_000_000


Quantities: TypeAlias = "Mapping[str, str | int]"
"""Labels, a node's capacity or a container's limits as the API gives them: names to strings (or counts)."""


class SharingReadError(ValueError):
    """A pod's GPU resources name no single `gpu_profile` (one line, naming the resource)."""


def sharing_from_node(name: str, labels: Quantities | None, capacity: Quantities | None) -> NodeSharing:
    """Node `name`'s reading from its labels and its capacity (either may be missing). Never raises."""
    labels, capacity = labels or {}, capacity or {}
    unknown: list[str] = []
    strategy = _choice(labels, STRATEGY, ("none", "single", "mixed"), unknown)
    config = _label(labels, CONFIG, unknown)
    state = _choice(labels, CONFIG_STATE, ("success", "pending", "rebooting", "failed"), unknown)
    if state == "failed":
        unknown.append(f"{CONFIG_STATE}=failed: the MIG Manager could not apply {config or 'its configuration'}")
    devices = _mig_devices(labels, capacity, strategy, unknown)
    mig_gpus: int | None = None
    if config == "all-disabled" or (strategy in (None, "none") and not devices):
        mig_gpus = 0
    sharing = _choice(labels, SHARING, ("none", "time-slicing", "mps"), unknown)
    replicas = _count(labels, REPLICAS, unknown, least=1)
    timeslice_gpus: int | None = 0
    timeslice_replicas: int | None = None
    if sharing == "time-slicing" or (sharing is None and replicas is not None and replicas > 1):
        timeslice_replicas = replicas
        timeslice_gpus = _sliced_gpus(labels, capacity, replicas, unknown)
    elif sharing is None and SHARING in labels:
        timeslice_gpus = None  # the label was there but unreadable
    return NodeSharing(node=name, mig_gpus=mig_gpus, mig_devices=devices, mig_strategy=strategy, mig_config=config,
                       mig_pending=state in ("pending", "rebooting"), timeslice_gpus=timeslice_gpus,
                       timeslice_replicas=timeslice_replicas, unknown=tuple(unknown))


def pod_gpu_profile(resources: Quantities) -> str | None:
    """The `gpu_profile` of a job that asks for these resources (a container's limits, or the pod's summed):
    `nvidia.com/mig-1g.5gb: 1` -> `1g.5gb`; `nvidia.com/gpu.shared` (time-slicing renamed) -> `timeslice`;
    a whole `nvidia.com/gpu` or no GPU -> None. Raises SharingReadError for a junk quantity or two kinds."""
    kinds = []
    for key, value in resources.items():
        key = str(key)
        if key.startswith(MIG_PREFIX):
            profile = key[len(MIG_PREFIX):]
            if not is_mig_profile(profile):
                raise SharingReadError(f"resource {key}: {profile!r} is not a MIG profile (like 1g.5gb)")
            kind: str | None = profile
        elif key == SHARED_GPU:
            kind = TIMESLICE
        elif key == GPU:
            kind = None
        else:
            continue
        amount = _quantity(value)
        if amount is None:
            raise SharingReadError(f"resource {key}: {str(value)[:40]!r} is not a whole number of devices")
        if amount > 0:
            kinds.append((key, kind))
    if len(kinds) > 1:
        raise SharingReadError("resources " + ", ".join(sorted(k for k, _ in kinds)) +
                               ": a pod gets one kind of GPU device (the device plugin serves only one)")
    return kinds[0][1] if kinds else None


def read_nodes_sharing(api: KubeCalls) -> list[NodeSharing]:
    """Every node's reading through a `greengpu.backends.kubernetes.KubeApi` (one list of the nodes)."""
    from kubernetes import client

    found = api.call("list nodes", client.CoreV1Api(api.api_client).list_node)
    readings = []
    for node in found.items:
        if node.metadata is None:
            continue
        capacity = node.status.capacity if node.status is not None else None
        readings.append(sharing_from_node(str(node.metadata.name), node.metadata.labels, capacity))
    return readings


def _label(labels: Quantities, key: str, unknown: list[str]) -> str | None:
    if key not in labels:
        return None
    value = str(labels[key])
    if not _LABEL_VALUE.match(value):
        unknown.append(f"{key}={value[:40]!r}: not a label value")
        return None
    return value


def _choice(labels: Quantities, key: str, allowed: tuple[str, ...], unknown: list[str]) -> str | None:
    value = _label(labels, key, unknown)
    if value is not None and value not in allowed:
        unknown.append(f"{key}={value!r}: unknown (expected {', '.join(allowed)})")
        return None
    return value


def _quantity(value: str | int) -> int | None:
    """A device count as the API gives it ("7", 7); None for anything else (devices come whole)."""
    text = str(value).strip()
    if not text.isascii() or not text.isdigit() or len(text) > 7:
        return None
    return int(text)


def _count(source: Quantities, key: str, unknown: list[str], least: int = 0) -> int | None:
    if key not in source:
        return None
    amount = _quantity(source[key])
    if amount is None or amount < least or amount > _MAX_COUNT:
        unknown.append(f"{key}={str(source[key])[:40]!r}: not a whole number >= {least}")
        return None
    return amount


def _mig_devices(labels: Quantities, capacity: Quantities, strategy: str | None,
                 unknown: list[str]) -> dict[str, int]:
    devices: dict[str, int] = {}
    for key in sorted(str(k) for k in capacity):
        if key.startswith(MIG_PREFIX):
            profile = key[len(MIG_PREFIX):]
            count = _count(capacity, key, unknown)
            if not is_mig_profile(profile):
                unknown.append(f"resource {key}: {profile[:40]!r} is not a MIG profile")
            elif count:
                devices[profile] = count
    if strategy == "single":
        product = _label(labels, PRODUCT, unknown)
        single = product.rpartition("-MIG-")[2] if product and "-MIG-" in product else None
        if single is None or not is_mig_profile(single):
            unknown.append(f"{PRODUCT}={product!r}: single MIG strategy but no MIG profile in the product")
        else:
            count = _count(labels, COUNT, unknown)
            if count:
                devices[single] = devices.get(single, 0) + count
    return devices


def _sliced_gpus(labels: Quantities, capacity: Quantities, replicas: int | None,
                 unknown: list[str]) -> int | None:
    """Physical GPUs shared by time-slicing: the advertised devices over the replicas, else the GPU count."""
    key = SHARED_GPU if SHARED_GPU in capacity else GPU
    advertised = _count(capacity, key, unknown)
    if advertised is not None and replicas:
        if advertised % replicas == 0:
            return advertised // replicas
        unknown.append(f"resource {key}={advertised}: not a multiple of {REPLICAS}={replicas}")
        return None
    return _count(labels, COUNT, unknown)
