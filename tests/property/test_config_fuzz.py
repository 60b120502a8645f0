"""Random mutations of a valid inventory never produce a traceback: a valid config or one clear line."""

from __future__ import annotations

import copy
from typing import Any

import yaml
from documents import key_paths
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from greengpu.config.inventory import load_cluster_text
from greengpu.errors import BadInput
from greengpu.model import Cluster

BASE: dict[str, Any] = yaml.safe_load("""
site: {pue: 1.3, price_per_kwh: 0.12, carbon_g_per_kwh: 380}
node_types:
  a100x8: {gpus: 8, gpu_model: A100, gpu_idle_w: 55, gpu_max_w: 400, gpu_min_limit_w: 100,
           host_idle_w: 450, host_sleep_w: 8, boot_s: 180}
  v100x4: {gpus: 4, gpu_model: V100, gpu_idle_w: 40, gpu_max_w: 300, gpu_min_limit_w: 150,
           host_idle_w: 300, host_sleep_w: 5, boot_s: 120, gpu_memory_gb: 32}
nodes:
  - {name: "gpu[001-004]", type: a100x8, domain: rack1, mac: "aa:bb:cc:00:00:01"}
  - {name: "old[1-2]", type: v100x4, domain: rack2}
tenants:
  vision: {quota_gpus: 16, weight: 2}
  nlp: {quota_gpus_by_model: {A100: 8, V100: 4}, weight: 3, borrow_limit_gpus: 8}
pools:
  spot: {type: a100x8, spot: true, price_per_hour: 12.5, interruptions_per_hour: 0.1, max_nodes: 4}
""")

ODD_VALUES = st.one_of(
    st.none(), st.booleans(), st.integers(-10**6, 10**6), st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12), st.lists(st.integers(), max_size=3), st.dictionaries(st.text(max_size=5), st.integers(),
                                                                                max_size=2),
    st.sampled_from(["gpu[1-", "a100x4", "zz:zz", "aa:bb:cc:dd:ee:ff", "-1", "1e400", "gpu[5-1]", "H100", ""]),
)


ALL_PATHS = key_paths(BASE)


def _mutate(doc: dict[str, Any], path: tuple[Any, ...], action: str, value: Any) -> dict[str, Any]:
    doc = copy.deepcopy(doc)
    parent: Any = doc
    for part in path[:-1]:
        parent = parent[part]
    last = path[-1]
    if action == "replace":
        parent[last] = value
    elif action == "delete":
        del parent[last]
    elif action == "add-key" and isinstance(parent[last], dict):
        parent[last]["unexpected_" + str(value)[:8]] = value
    return doc


def _assert_clean(text: str) -> None:
    try:
        cluster = load_cluster_text(text, "fuzz.yaml")
    except BadInput as exc:
        message = str(exc)
        assert message.startswith("fuzz.yaml"), message
        assert "\n" not in message, message
        return
    assert isinstance(cluster, Cluster)
    assert cluster.nodes


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(path=st.sampled_from(ALL_PATHS), action=st.sampled_from(["replace", "delete", "add-key"]), value=ODD_VALUES)
def test_structural_mutations_never_traceback(path: tuple[Any, ...], action: str, value: Any) -> None:
    mutated = _mutate(BASE, path, action, value)
    _assert_clean(yaml.safe_dump(mutated, sort_keys=False))


@settings(max_examples=250, deadline=None)
@given(position=st.integers(0, 2000), junk=st.text(max_size=6), cut=st.integers(0, 4))
def test_text_mutations_never_traceback(position: int, junk: str, cut: int) -> None:
    text = yaml.safe_dump(BASE, sort_keys=False)
    position %= len(text)
    _assert_clean(text[:position] + junk + text[position + cut :])
