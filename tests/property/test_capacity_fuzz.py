"""The capacity lever's new inputs fuzzed through the command line's exit path (issue 36): the fake cluster's
`fake-cloud.json` state, the daemon's `--cloud-partition` and the spot webhook's `--daemon URL`. Exit 0 (or 1, a
runtime failure, in one line) or exactly one line and exit 2; never a traceback, never a wrong acceptance."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from hypothesis import given
from hypothesis import strategies as st
from inventories import SITE
from test_input_fuzz import ODD_VALUES, _text_edits, assert_clean, edit_text, fuzz, run_cli

NODE = ("{gpus: 2, gpu_model: A100, gpu_idle_w: 52, gpu_max_w: 400, gpu_min_limit_w: 100, host_idle_w: 300, "
        "host_sleep_w: 8, boot_s: 180, gpu_max_clock_mhz: 1410}")
POOLS = ("pools:\n  sp: {type: g2, spot: true, price_per_hour: 4.0, max_nodes: 2}\n"
         "  od: {type: g2, price_per_hour: 9.0, max_nodes: 1}\n")


@pytest.fixture(scope="module")
def cloud_site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """An inventory with cloud pools and a state directory whose good `--once` ticks sent work to the cloud."""
    root = tmp_path_factory.mktemp("capacity-fuzz")
    (root / "cluster.yaml").write_text(SITE + f"node_types:\n  g2: {NODE}\nnodes:\n  - {{name: \"n1\", type: g2}}\n"
                                       "tenants:\n  a: {quota_gpus: 8}\n" + POOLS)
    trace = root / "jobs.csv"
    trace.write_text("job_id,tenant,submit_time,gpus,duration_s,class,interruptible,checkpoint_interval_s\n"
                     "big,a,0,2,86400,inference,false,\nj1,a,0,2,7200,training,true,1800\n"
                     "j2,a,0,2,7200,training,true,1800\n")
    for _ in range(2):
        code, _, err = run_cli("daemon", "--backend", "fake", "--cluster", str(root / "cluster.yaml"), "--state",
                               str(root / "good"), "--once", "--listen", "127.0.0.1:0", "--trace", str(trace))
        assert code == 0, err
    saved = json.loads((root / "good" / "fake-cloud.json").read_text())
    assert saved["running"], "the good ticks sent nothing to the cloud: the fuzz would edit an empty state"
    yield root


def _daemon(site: Path, *extra: str) -> tuple[int, str, str]:
    return run_cli("-q", "daemon", "--backend", "fake", "--cluster", str(site / "cluster.yaml"), "--state",
                   str(site / "try"), "--once", "--listen", "127.0.0.1:0", "--trace", str(site / "jobs.csv"), *extra)


def _fresh(site: Path) -> Path:
    state = site / "try"
    shutil.rmtree(state, ignore_errors=True)
    shutil.copytree(site / "good", state, ignore=shutil.ignore_patterns("*-wal", "*-shm"))
    return state


@fuzz(20)
@given(edits=_text_edits(), whole=st.booleans(), raw=st.binary(max_size=64))
def test_fake_cloud_state(cloud_site: Path, edits: list[tuple[int, int, str]], whole: bool, raw: bytes) -> None:
    path = _fresh(cloud_site) / "fake-cloud.json"
    if whole:
        path.write_bytes(raw)
    else:
        path.write_bytes(edit_text(path.read_bytes().decode("latin-1"), edits).encode("latin-1", errors="replace"))
    code, _, err = _daemon(cloud_site)
    assert_clean(code, err, allowed=(0, 1, 2))
    if code == 2:
        assert "fake-cloud.json" in err, err
    else:
        json.loads(path.read_text())  # anything accepted was JSON


@fuzz(10)
@given(value=ODD_VALUES)
def test_cloud_partition_flag(cloud_site: Path, value: str) -> None:
    _fresh(cloud_site)
    code, _, err = _daemon(cloud_site, "--cloud-partition", value)
    assert_clean(code, err, allowed=(0, 1, 2))


def _is_url(value: str) -> bool:
    try:
        parts = urlsplit(value)
    except ValueError:
        return False
    return parts.scheme in ("http", "https") and bool(parts.netloc)


@fuzz(25)
@given(value=st.one_of(ODD_VALUES, st.sampled_from(["http://127.0.0.1:9475", "https://daemon:9475/", "ftp://x",
                                                    "http://", "127.0.0.1:9475"])))
def test_webhook_daemon_flag(cloud_site: Path, value: str) -> None:
    """A --daemon that is not an http(s) URL is refused before anything else; a good one goes on to the
    certificate (missing here: refused, naming --cert)."""
    code, _, err = run_cli("spot", "webhook", "--daemon", value, "--cert", str(cloud_site / "none.crt"), "--key",
                           str(cloud_site / "none.key"), "--cluster", str(cloud_site / "cluster.yaml"))
    assert_clean(code, err, allowed=(2,))
    if _is_url(value):
        assert "--daemon" not in err, err
    else:
        assert "--daemon" in err, err
