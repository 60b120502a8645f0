"""A pod reaches the spot webhook before the API server validates it, so greengpu.spot reads its JSON through
`json_get` and `json_items`: they fail exactly where `.get` and `for` fail (the webhook then allows the pod
unchanged), and read a well-formed pod's node affinity as before."""

from __future__ import annotations

import pytest

from greengpu.spot.admission import CAPACITY_LABEL, capacity_constrained
from greengpu.spot.pod_facts import json_get, json_items, pod_gpus


def test_json_get_and_json_items_fail_as_get_and_for_do() -> None:
    assert json_get({"a": 1}, "a") == 1
    assert json_get({}, "a", "x") == "x"
    assert list(json_items({"a": 1})) == ["a"]
    assert list(json_items("ab")) == ["a", "b"]
    for value in ([1], "text", 3, None):
        with pytest.raises(AttributeError):
            json_get(value, "a")
    for value in (3, 2.5, True, None):
        with pytest.raises(TypeError):
            json_items(value)


def _required(expressions: object, fields: object = None) -> dict[str, object]:
    term: dict[str, object] = {"matchExpressions": expressions}
    if fields is not None:
        term["matchFields"] = fields
    return {"spec": {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [term]}}}}}


def test_a_capacity_label_in_any_term_or_selector_counts() -> None:
    assert capacity_constrained(_required([{"key": CAPACITY_LABEL, "operator": "In", "values": ["spot"]}]))
    assert capacity_constrained(_required([], [{"key": CAPACITY_LABEL}]))
    assert capacity_constrained({"spec": {"nodeSelector": {CAPACITY_LABEL: "on-demand"}}})
    preferred = {"spec": {"affinity": {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 1, "preference": {"matchExpressions": [{"key": CAPACITY_LABEL}]}}]}}}}
    assert capacity_constrained(preferred)
    assert not capacity_constrained(_required([{"key": "zone"}]))
    assert not capacity_constrained({})


@pytest.mark.parametrize("pod", [
    {"spec": ["not", "a", "mapping"]},
    _required("a string", "another"),
    _required([{"key": "zone"}], {"key": "a mapping"}),
    {"spec": {"nodeSelector": 7}},
])
def test_a_malformed_pod_still_raises_where_it_did(pod: dict[str, object]) -> None:
    with pytest.raises((AttributeError, TypeError)):
        capacity_constrained(pod)


def test_gpu_count_of_containers_and_init_containers() -> None:
    pod = {"spec": {"containers": [{"resources": {"limits": {"nvidia.com/gpu": "2"}}},
                                   {"resources": {"requests": {"nvidia.com/gpu": 1}}}],
                    "initContainers": [{"resources": {"limits": {"nvidia.com/gpu": 4}}}]}}
    assert pod_gpus(pod) == 4.0
    with pytest.raises(AttributeError):
        pod_gpus({"spec": {"containers": [{"resources": {"limits": ["nvidia.com/gpu"]}}]}})
