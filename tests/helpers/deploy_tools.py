"""Tools the deploy/ validation tests run: found, or a skip that says how to get them (never in CI).

.ci/run installs every one of them, so CI=true turns a missing tool into a failure, not a skip.
"""

from __future__ import annotations

import importlib
import os
import re
import shutil
from pathlib import Path
from types import ModuleType

import click
import pytest

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"


def _missing(what: str, how: str) -> None:
    message = f"{what} is not installed ({how})"
    if os.environ.get("CI"):
        pytest.fail(f"{message}: .ci/run installs it, so CI never skips this test")
    pytest.skip(message)


def require_tool(name: str, how: str) -> str:
    """The path of the executable `name`; a skip (outside CI) or a failure (in CI) when it is missing."""
    path = shutil.which(name)
    if path is None:
        _missing(name, how)
    assert path is not None
    return path


def require_module(name: str, how: str) -> ModuleType:
    """The Python module `name`, imported; a skip (outside CI) or a failure (in CI) when it is missing."""
    try:
        return importlib.import_module(name)
    except ImportError:
        _missing(f"the Python module {name}", how)
        raise  # unreachable: _missing skips or fails


DAEMON_METRICS = frozenset({
    "greengpu_daemon_ticks_total",
    "greengpu_daemon_tick_seconds_bucket", "greengpu_daemon_tick_seconds_sum", "greengpu_daemon_tick_seconds_count",
    "greengpu_daemon_last_good_tick_timestamp_seconds",
    "greengpu_daemon_actions_total",
    "greengpu_daemon_nodes",
    "greengpu_daemon_jobs",
    "greengpu_daemon_jobs_waiting_for_capacity",
    "greengpu_daemon_paused",
    "greengpu_daemon_alerts_total",
    "greengpu_daemon_energy_joules_total",
    "greengpu_daemon_queue_wait_seconds", "greengpu_daemon_job_failure_ratio",
    "greengpu_daemon_checkpoint_duration_seconds_bucket", "greengpu_daemon_checkpoint_duration_seconds_sum",
    "greengpu_daemon_checkpoint_duration_seconds_count", "greengpu_daemon_agent_report_age_seconds",
    "greengpu_daemon_agent_reports_total", "greengpu_daemon_stalled_jobs", "greengpu_daemon_drained_nodes",
})
"""The series `greengpu daemon` serves on /metrics (docs/DEPLOY.md lists them with their labels)."""

PROMETHEUS_SERIES = frozenset({"up"})
"""What Prometheus itself records for every target."""


def agent_metrics() -> frozenset[str]:
    """The series the node agent serves, read from its exporter (a counter family gains `_total`)."""
    source = (REPO / "greengpu" / "control" / "agent" / "exporter.py").read_text()
    names = set()
    for kind, name in re.findall(r'(Counter|Gauge)MetricFamily\(\s*"([a-z_]+)"', source):
        names.add(f"{name}_total" if kind == "Counter" else name)
    return frozenset(names)


def metric_names(promql: str) -> set[str]:
    """The greengpu series and `up` an expression names (label values and strings left out)."""
    without_strings = re.sub(r'"(?:[^"\\]|\\.)*"', '""', promql)
    return {name for name in re.findall(r"\b([a-z_][a-z0-9_]*)\b", without_strings)
            if name.startswith("greengpu_") or name == "up"}


def known_metrics() -> frozenset[str]:
    return DAEMON_METRICS | agent_metrics() | PROMETHEUS_SERIES


def greengpu_command(name: str) -> click.Command:
    """`greengpu NAME` as the command line builds it (with its GREENGPU_<COMMAND>_<OPTION> variables).

    The daemon's command and its deploy files land together; a tree with only one of them skips here,
    and fails in CI, which never runs such a tree."""
    from greengpu.cli import cli

    command = cli.commands.get(name)
    if command is None:
        message = f"this tree has no `greengpu {name}` yet"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    assert command is not None
    return command


def option_names(command: click.Command) -> set[str]:
    return {opt for param in command.params for opt in getattr(param, "opts", [])}


def option_variable(command: click.Command, option: str) -> str | None:
    """The environment variable that sets `option` of `command`."""
    param = next(p for p in command.params if option in getattr(p, "opts", []))
    return param.envvar if isinstance(param.envvar, str) else None
