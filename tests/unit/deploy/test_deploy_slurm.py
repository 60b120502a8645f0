"""The Slurm lines for daemon-driven power saving (deploy/slurm/slurm.conf.greengpu-daemon) against the
hooks' lines (slurm.conf.greengpu) and the default policy. Slurm itself runs them in
tests/integration/test_slurm_daemon_power_save.py."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from deploy_tools import DEPLOY, REPO

from greengpu.cli import main

SLURM = DEPLOY / "slurm"


def _settings(path: Path) -> dict[str, str]:
    """The active `Key=Value` lines (comments dropped), keys as Slurm reads them: case-insensitive."""
    settings = {}
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            key, _, value = line.partition("=")
            settings[key.lower()] = value
    return settings


DAEMON = _settings(SLURM / "slurm.conf.greengpu-daemon")
HOOKS = _settings(SLURM / "slurm.conf.greengpu")


def test_slurms_timer_is_off_per_partition_while_power_saving_stays_on() -> None:
    # A global INFINITE switches power saving off and Slurm refuses state=POWER_DOWN (tested on 22.05).
    assert DAEMON["suspendtime"].isdigit()
    examples = [line for line in (SLURM / "slurm.conf.greengpu-daemon").read_text().splitlines()
                if line.startswith("#PartitionName=")]
    assert examples and all(re.search(r"\bSuspendTime=INFINITE\b", line) for line in examples)
    assert "suspendexcnodes" not in DAEMON  # a site's own list: shown commented out, never a guess


def test_the_daemon_lines_keep_greengpus_hooks_and_agree_with_the_hook_lines() -> None:
    for key in ("suspendprogram", "resumeprogram", "resumefailprogram"):
        assert DAEMON[key] == HOOKS[key]
        assert (SLURM / Path(DAEMON[key]).name).exists(), key
    assert set(DAEMON) == set(HOOKS)
    differing = {key for key in DAEMON if DAEMON[key] != HOOKS[key]}
    assert differing <= {"suspendtime"}, differing


def test_slurms_rates_do_not_hold_back_the_policys() -> None:
    sleep = yaml.safe_load((REPO / "policies" / "default.yaml").read_text())["sleep"]
    assert int(DAEMON["suspendrate"]) >= sleep["max_suspends_per_min"]
    assert int(DAEMON["resumerate"]) >= sleep["max_wakes_per_min"]


def test_the_daemon_lines_pass_greengpus_check(capsys: pytest.CaptureFixture[str]) -> None:
    """The default policy's wake-up retries finish inside the shipped ResumeTimeout."""
    code = main(["check", "--cluster", str(REPO / "examples" / "lab-a100.cluster.yaml"), "--policy", "default",
                 "--slurm-conf", str(SLURM / "slurm.conf.greengpu-daemon"), "--json"])
    assert code == 0, capsys.readouterr().err
