"""The policy's `spot:` section: keys read with their defaults; bad values give one located line and exit 2."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from greengpu.cli import main
from greengpu.config.policy import build_policy, load_policy
from greengpu.config.yamlsource import load_yaml_text
from greengpu.errors import BadInput
from greengpu.policy import SpotPolicy

SPOT_KEYS = ("enabled", "classes", "require_checkpointing", "notice_s", "checkpoint_cost_s", "restart_s")

CLUSTER = """\
node_types:
  a100x8: {gpus: 8, gpu_model: A100, gpu_idle_w: 55, gpu_max_w: 400, gpu_min_limit_w: 100, host_idle_w: 450,
           host_sleep_w: 8, boot_s: 180}
nodes:
  - {name: "gpu[1-2]", type: a100x8}
tenants:
  vision: {quota_gpus: 8}
"""


def test_keys_and_defaults() -> None:
    doc = load_yaml_text("spot:\n  notice_s: 30\n  checkpoint_cost_s: 45\n  restart_s: 900\n", "p.yaml")
    spot = build_policy(doc, "p").spot
    assert (spot.enabled, spot.notice_s, spot.checkpoint_cost_s, spot.restart_s) == (True, 30.0, 45.0, 900.0)
    assert spot.classes == SpotPolicy().classes
    absent = build_policy(load_yaml_text("name: x\n", "p.yaml"), "p").spot
    assert absent == SpotPolicy() and not absent.enabled
    assert load_policy("default").spot.enabled and not load_policy("always-on").spot.enabled


@pytest.mark.parametrize(("text", "key", "words"), [
    ("spot:\n  notice_s: -5\n", "spot.notice_s", "at least 0"),
    ("spot:\n  checkpoint_cost_s: .nan\n", "spot.checkpoint_cost_s", ""),
    ("spot:\n  restart_s: 1e400\n", "spot.restart_s", ""),
    ("spot:\n  notice_s: soon\n", "spot.notice_s", "expected a number"),
    ("spot:\n  classes: [training, gaming]\n", "spot.classes[1]", "unknown job class"),
    ("spot:\n  deadline_rule: strict\n", "spot.deadline_rule", "unknown key"),
])
def test_bad_spot_value_gives_one_located_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, key: str, words: str
) -> None:
    (tmp_path / "cluster.yaml").write_text(CLUSTER)
    (tmp_path / "mine.yaml").write_text(text)
    code = main(["check", "--cluster", str(tmp_path / "cluster.yaml"), "--policy", str(tmp_path / "mine.yaml")])
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1, err
    assert "mine.yaml:" in err and f"{key}: " in err, err
    assert words in err


ODD = st.one_of(st.none(), st.booleans(), st.integers(-10**6, 10**6), st.floats(allow_nan=True, allow_infinity=True),
                st.text(max_size=8), st.lists(st.integers(), max_size=2),
                st.dictionaries(st.text(max_size=4), st.integers(), max_size=2))


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(key=st.sampled_from(SPOT_KEYS), value=ODD)
def test_fuzzed_spot_values_load_or_fail_on_one_located_line(key: str, value: Any) -> None:
    text = yaml.safe_dump({"name": "fuzz", "spot": {"enabled": True, key: value}})
    try:
        spot = build_policy(load_yaml_text(text, "fuzz.yaml"), "fuzz").spot
    except BadInput as exc:
        message = str(exc)
        assert message.startswith("fuzz.yaml:"), message
        assert f"spot.{key}" in message, message
        assert "\n" not in message
        return
    for name in ("notice_s", "checkpoint_cost_s", "restart_s"):
        number = getattr(spot, name)
        assert number >= 0 and number < float("inf")
