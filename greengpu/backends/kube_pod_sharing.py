"""A pod's shared-GPU request: the `gpu_profile` of the job a pending pod becomes (docs/GPU-SHARING.md).

A pod asking for `nvidia.com/mig-<profile>` is a job of that MIG profile, one asking for `nvidia.com/gpu.shared`
(time-slicing with the device plugin's `renameByDefault`) a `timeslice` job; the containers' limits are summed
first (the device plugin serves the pod the sum). A pod asking for two kinds of device, a quantity that is not a
whole number, or more than one MIG instance or replica is not taken as demand: one line says why.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Protocol, TypeVar

from greengpu.backends.kube_sharing import MIG_PREFIX, SHARED_GPU, Quantities, SharingReadError, pod_gpu_profile

if TYPE_CHECKING:
    from kubernetes import client

log = logging.getLogger("greengpu.kubernetes")
_WARNED: dict[str, None] = {}
"""Pods already said to be skipped (one line each, not one a tick); the last thousand."""


class _Pod(Protocol):
    @property
    def uid(self) -> str: ...
    @property
    def namespace(self) -> str: ...
    @property
    def name(self) -> str: ...
    @property
    def gpus(self) -> int: ...
    @property
    def gpu_profile(self) -> str: ...
    @property
    def gpu_problem(self) -> str: ...


P = TypeVar("P", bound=_Pod)


def with_profile(info: P, pod: client.V1Pod) -> P:
    """The pod's info with the `gpu_profile` (or the problem) its containers' limits ask for."""
    containers = pod.spec.containers if pod.spec is not None and pod.spec.containers else []
    profile, problem = sharing_request((c.resources.limits if c.resources else None) or {} for c in containers)
    return replace(info, gpu_profile=profile, gpu_problem=problem) if profile or problem else info  # type: ignore[type-var]


def holds_gpu(pod: _Pod) -> bool:
    """Whether a pod on a node holds GPU devices: whole GPUs, a MIG instance or a replica (or devices of two
    kinds: it is not demand, but a node where it runs is not idle)."""
    return pod.gpus > 0 or bool(pod.gpu_profile) or bool(pod.gpu_problem)


def modelled(pods: Sequence[P]) -> list[P]:
    """The pods that are GPU demand greengpu models (whole GPUs, one MIG instance, one replica); each pod
    skipped for its GPU resources is said once, in one line naming it."""
    for pod in pods:
        if pod.gpu_problem and pod.uid not in _WARNED:
            log.warning("pod %s/%s skipped: %s", pod.namespace, pod.name, pod.gpu_problem)
            _WARNED[pod.uid] = None
            if len(_WARNED) > 1000:
                del _WARNED[next(iter(_WARNED))]
    return [p for p in pods if (p.gpus > 0 or p.gpu_profile) and not p.gpu_problem]


def summed_limits(containers: Iterable[Quantities]) -> dict[str, int | str]:
    """The containers' `nvidia.com/` limits added up; a quantity that is not a whole number is kept as written
    (the profile reader names it)."""
    summed: dict[str, int | str] = {}
    for limits in containers:
        for key, value in limits.items():
            key = str(key)
            if not key.startswith("nvidia.com/"):
                continue
            text = str(value).strip()
            before = summed.get(key, 0)
            if isinstance(before, int) and text.isascii() and text.isdigit() and len(text) <= 7:
                summed[key] = before + int(text)
            elif isinstance(before, int):
                summed[key] = text
    return summed


def sharing_request(containers: Iterable[Quantities]) -> tuple[str, str]:
    """(gpu_profile, problem) of a pod whose containers have these limits: ("", "") for whole GPUs or none."""
    summed = summed_limits(containers)
    try:
        profile = pod_gpu_profile(summed)
    except SharingReadError as error:
        return "", str(error)
    if profile is None:
        return "", ""
    key = SHARED_GPU if not any(k.startswith(MIG_PREFIX) and summed[k] for k in summed) else MIG_PREFIX + profile
    asked = summed.get(key, 0)
    if asked != 1:
        return "", (f"resource {key}: {asked} devices; greengpu takes one MIG instance or time-slice replica "
                    "per pod")
    return profile, ""
