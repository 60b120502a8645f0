"""The spot webhook's answer to one AdmissionReview (admission.k8s.io/v1), pure (docs/SPOT-LIVE.md).

For a GPU pod being created, the decision picks its capacity; `spot` or `on-demand` becomes a required
node affinity on `karpenter.sh/capacity-type` (the label Karpenter, and node groups that copy it, put on
cloud nodes), added as a JSONPatch to every node-selector term the pod already has (terms are ORed, so
each must carry it). A pod that is not a GPU pod, that already constrains its capacity type (by node
selector or node affinity, with Karpenter's label or a cloud's own), or for which the decision has no
preference is allowed unchanged. Every answer allows the pod: this webhook places pods, it never
refuses one; an annotation it cannot read allows the pod unchanged, with a warning the user sees.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterable
from dataclasses import dataclass

from greengpu.json_types import JsonArray, JsonObject, JsonValue
from greengpu.spot.pod_facts import BadAnnotation, CapacityKind, Decide, json_get, json_items, pod_facts, pod_gpus

CAPACITY_LABEL = "karpenter.sh/capacity-type"
CAPACITY_LABELS = frozenset({CAPACITY_LABEL, "eks.amazonaws.com/capacityType", "cloud.google.com/gke-spot",
                             "cloud.google.com/gke-provisioning", "kubernetes.azure.com/scalesetpriority"})
"""Node labels that already say spot or on-demand: a pod that names one has chosen for itself."""
DECISION_ANNOTATION = "greengpu.io/capacity-type"
"""Written on the pods greengpu placed, so `kubectl get pod -o yaml` shows what was chosen."""


@dataclass(frozen=True)
class Verdict:
    """What the webhook did with one pod and why (for the log)."""

    patch: tuple[JsonObject, ...]
    capacity: CapacityKind | None
    reason: str
    warning: str | None = None


def capacity_constrained(pod: JsonValue) -> bool:
    """Whether the pod already names a capacity-type label in its node selector or node affinity."""
    spec = json_get(pod, "spec") or {}
    if CAPACITY_LABELS & set(json_items(json_get(spec, "nodeSelector") or {})):
        return True
    node_affinity = json_get(json_get(spec, "affinity") or {}, "nodeAffinity") or {}
    terms = list(json_items(json_get(json_get(node_affinity, "requiredDuringSchedulingIgnoredDuringExecution") or {},
                                     "nodeSelectorTerms") or []))
    terms += [json_get(p, "preference") or {} for p in json_items(
        json_get(node_affinity, "preferredDuringSchedulingIgnoredDuringExecution") or [])]
    return any(json_get(expression, "key") in CAPACITY_LABELS for term in terms
               for expression in _joined(json_get(term, "matchExpressions") or [], json_get(term, "matchFields") or []))


def _joined(first: JsonValue, second: JsonValue) -> Iterable[JsonValue]:
    """`first + second` walked, for two lists (or two strings); TypeError, as `+` raises, for other pairs."""
    if isinstance(first, list) and isinstance(second, list):
        return first + second
    if isinstance(first, str) and isinstance(second, str):
        return first + second
    raise TypeError(f"cannot add {type(first).__name__!r} and {type(second).__name__!r}")


def _mapping(value: JsonValue, where: str) -> JsonObject | None:
    """`value` when it is a mapping (or absent: None); BadAnnotation naming `where` otherwise, so the pod is
    left unchanged rather than answered with a patch that would not apply."""
    if value is not None and not isinstance(value, dict):
        raise BadAnnotation(f"{where}: expected a mapping")
    return value


def _list(value: JsonValue, where: str) -> JsonArray | None:
    """`value` when it is a list (or absent: None); BadAnnotation naming `where` otherwise."""
    if value is not None and not isinstance(value, list):
        raise BadAnnotation(f"{where}: expected a list")
    return value


def affinity_patch(pod: JsonValue, capacity: CapacityKind) -> list[JsonObject]:
    """JSONPatch operations that require nodes labelled `karpenter.sh/capacity-type: capacity`, keeping
    whatever affinity the pod has, and record the decision in an annotation. BadAnnotation when the
    pod's affinity or metadata is not shaped as a pod's (the API server has not validated it yet)."""
    expression: JsonObject = {"key": CAPACITY_LABEL, "operator": "In", "values": [capacity]}
    spec = _mapping(json_get(pod, "spec"), "spec") or {}
    affinity = _mapping(spec.get("affinity"), "spec.affinity")
    node_affinity = _mapping((affinity or {}).get("nodeAffinity"), "spec.affinity.nodeAffinity")
    required = _mapping((node_affinity or {}).get("requiredDuringSchedulingIgnoredDuringExecution"),
                        "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution")
    terms = _list((required or {}).get("nodeSelectorTerms"), "nodeSelectorTerms") or []
    base = "/spec/affinity/nodeAffinity/requiredDuringSchedulingIgnoredDuringExecution"
    new_required: JsonObject = {"nodeSelectorTerms": [{"matchExpressions": [expression]}]}
    ops: list[JsonObject]
    if not affinity:
        ops = [{"op": "add", "path": "/spec/affinity", "value": {"nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": new_required}}}]
    elif not node_affinity:
        ops = [{"op": "add", "path": "/spec/affinity/nodeAffinity",
                "value": {"requiredDuringSchedulingIgnoredDuringExecution": new_required}}]
    elif not terms:
        ops = [{"op": "add", "path": base, "value": new_required}]
    else:
        ops = []
        for index, term in enumerate(terms):
            _mapping(term, f"nodeSelectorTerms[{index}]")
            if _list(json_get(term, "matchExpressions"), f"nodeSelectorTerms[{index}].matchExpressions"):
                ops.append({"op": "add", "path": f"{base}/nodeSelectorTerms/{index}/matchExpressions/-",
                            "value": expression})
            else:
                ops.append({"op": "add", "path": f"{base}/nodeSelectorTerms/{index}/matchExpressions",
                            "value": [expression]})
    metadata = _mapping(json_get(pod, "metadata"), "metadata")
    annotations = _mapping((metadata or {}).get("annotations"), "metadata.annotations")
    if metadata is None:
        ops.append({"op": "add", "path": "/metadata", "value": {"annotations": {DECISION_ANNOTATION: capacity}}})
    elif annotations:
        ops.append({"op": "add", "path": "/metadata/annotations/" + _pointer(DECISION_ANNOTATION), "value": capacity})
    else:
        ops.append({"op": "add", "path": "/metadata/annotations", "value": {DECISION_ANNOTATION: capacity}})
    return ops


def _pointer(key: str) -> str:
    """A key as one JSON Pointer segment (RFC 6901: `~` is `~0`, `/` is `~1`)."""
    return key.replace("~", "~0").replace("/", "~1")


def decide_pod(request: JsonObject, decide: Decide, now_s: float) -> Verdict:
    """The verdict on one admission request (`AdmissionReview.request`)."""
    kind = json_get(request.get("kind") or {}, "kind")
    if kind != "Pod" or request.get("operation") != "CREATE":
        return Verdict((), None, f"not a pod creation ({kind} {request.get('operation')})")
    pod = request.get("object") or {}
    try:
        gpus = pod_gpus(pod)
    except BadAnnotation as error:
        return Verdict((), None, f"unreadable GPU count: {error}", warning=f"greengpu: {error}")
    if gpus <= 0:
        return Verdict((), None, "not a GPU pod")
    if capacity_constrained(pod):
        return Verdict((), None, "the pod already constrains its capacity type")
    try:
        facts = pod_facts(pod, now_s)
    except BadAnnotation as error:
        return Verdict((), None, f"left unchanged: {error}",
                       warning=f"greengpu: not placed on spot or on-demand capacity: {error}")
    capacity = decide(facts)
    if capacity not in ("spot", "on-demand"):
        return Verdict((), capacity, f"decision: {capacity or 'no preference'} (class {facts.job_class})")
    try:
        patch = affinity_patch(pod, capacity)
    except BadAnnotation as error:
        return Verdict((), capacity, f"left unchanged: {error}", warning=f"greengpu: not placed: {error}")
    return Verdict(tuple(patch), capacity, f"decision: {capacity} (class {facts.job_class}, "
                   f"interruptible {str(facts.interruptible).lower()}, {facts.gpus:g} GPUs)")


def review_response(review: JsonObject, verdict: Verdict | None) -> JsonObject:
    """The AdmissionReview answer: always allowed; the patch when there is one (None: unchanged)."""
    request = review.get("request") or {}
    response: JsonObject = {"uid": json_get(request, "uid", ""), "allowed": True}
    if verdict is not None and verdict.patch:
        response["patchType"] = "JSONPatch"
        response["patch"] = base64.b64encode(json.dumps(list(verdict.patch)).encode()).decode()
    if verdict is not None and verdict.warning:
        response["warnings"] = [verdict.warning[:240]]
    return {"apiVersion": review.get("apiVersion") or "admission.k8s.io/v1", "kind": "AdmissionReview",
            "response": response}
