"""The fake cluster's MIG state file (`fake-mig.json`: the layouts greengpu made, kept across restarts) fuzzed
through the daemon's command line: any edit gives exit 0 (the layouts it holds made again, each a valid MIG
layout), or one line and exit 2 naming the file; never a traceback."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from inventories import SITE
from test_input_fuzz import _text_edits, assert_clean, edit_text, fuzz, run_cli

from greengpu.sched.mig import A100_40GB, layout_problem

MIG_TYPE = ("{gpus: 4, gpu_model: A100-SXM4-40GB, gpu_memory_gb: 40, gpu_idle_w: 52, gpu_max_w: 400, "
            "gpu_min_limit_w: 100, host_idle_w: 300, host_sleep_w: 8, boot_s: 180, "
            "mig: {gpus: 2, profiles: [1g.5gb, 3g.20gb, 7g.40gb], reconfigure_s: 60}}")
GOOD = {"layouts": [["n1", 0, ["3g.20gb@0", "3g.20gb@4"], 1.0e9], ["n1", 1, ["7g.40gb@0"], 0.0]]}


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    root = tmp_path_factory.mktemp("mig-fuzz")
    (root / "cluster.yaml").write_text(SITE + f"node_types:\n  m: {MIG_TYPE}\nnodes:\n  - {{name: n1, type: m}}\n"
                                       "tenants:\n  a: {quota_gpus: 4}\n")
    code, _, err = run_cli("-q", "daemon", "--backend", "fake", "--cluster", str(root / "cluster.yaml"), "--state",
                           str(root / "good"), "--once", "--listen", "127.0.0.1:0")
    assert code == 0, err
    (root / "good" / "fake-mig.json").write_text(json.dumps(GOOD))
    yield root


def _daemon(site: Path, state: Path) -> tuple[int, str, str]:
    return run_cli("-q", "daemon", "--backend", "fake", "--cluster", str(site / "cluster.yaml"), "--state",
                   str(state), "--once", "--listen", "127.0.0.1:0")


def test_the_good_state_is_made_again(site: Path) -> None:
    state = site / "again"
    shutil.rmtree(state, ignore_errors=True)
    shutil.copytree(site / "good", state, ignore=shutil.ignore_patterns("*-wal", "*-shm"))
    code, _, err = _daemon(site, state)
    assert code == 0, err
    assert json.loads((state / "fake-mig.json").read_text()) == GOOD


@fuzz(25)
@given(edits=_text_edits(), whole=st.booleans(), raw=st.binary(max_size=64))
def test_a_damaged_mig_state_is_one_line(site: Path, edits: list[tuple[int, int, str]], whole: bool,
                                         raw: bytes) -> None:
    state = site / "try"
    shutil.rmtree(state, ignore_errors=True)
    shutil.copytree(site / "good", state, ignore=shutil.ignore_patterns("*-wal", "*-shm"))
    path = state / "fake-mig.json"
    if whole:
        path.write_bytes(raw)
    else:
        path.write_text(edit_text(path.read_text(), edits), encoding="utf-8", errors="replace")
    code, _, err = _daemon(site, state)
    assert_clean(code, err, allowed=(0, 2))
    if code == 2:
        assert "fake-mig.json" in err
    else:  # accepted: every layout it holds is one a MIG GPU can have
        for _, _, instances, _ in json.loads(path.read_text())["layouts"]:
            assert layout_problem(A100_40GB, instances) is None
