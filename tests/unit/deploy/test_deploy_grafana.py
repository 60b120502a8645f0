"""The Grafana dashboard (deploy/grafana/greengpu-daemon.json): valid JSON Grafana can import, every
panel's PromQL parses in the real `promtool` (each expression wrapped as a recording rule), and every
metric it names is one the daemon or the node agent serves."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import yaml
from deploy_tools import DAEMON_METRICS, DEPLOY, agent_metrics, known_metrics, metric_names, require_tool

DASHBOARD = DEPLOY / "grafana" / "greengpu-daemon.json"
GRAFANA_VARIABLES = {"$__rate_interval": "5m", "$__interval": "1m", "$__range": "1d"}
"""Grafana's own variables, replaced by what Grafana would put there before the query reaches Prometheus."""


def _dashboard() -> dict[str, Any]:
    return json.loads(DASHBOARD.read_text())


def _panels(panels: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every panel, those inside collapsed rows too."""
    found = []
    for panel in panels:
        found.append(panel)
        found += _panels(panel.get("panels", []))
    return found


def _queries() -> list[tuple[str, str]]:
    """(panel title / refId, expression as Prometheus receives it)"""
    dashboard = _dashboard()
    variables = {f"${v['name']}": v.get("allValue", ".+") for v in dashboard["templating"]["list"]
                 if v["type"] == "query"}
    queries = []
    for panel in _panels(dashboard["panels"]):
        for target in panel.get("targets", []):
            expr = target["expr"]
            for name, value in sorted({**GRAFANA_VARIABLES, **variables}.items(), key=lambda kv: -len(kv[0])):
                expr = expr.replace(name, value)
            assert "$" not in expr, (panel["title"], target["expr"])  # a variable nobody defines
            queries.append((f"{panel['title']} / {target['refId']}", expr))
    return queries


def test_the_dashboard_is_importable_json() -> None:
    dashboard = _dashboard()
    assert dashboard["uid"] == "greengpu-daemon" and dashboard["title"]
    panels = _panels(dashboard["panels"])
    ids = [panel["id"] for panel in panels]
    assert len(ids) == len(set(ids))
    for panel in panels:
        assert {"x", "y", "w", "h"} <= set(panel["gridPos"]) and panel["gridPos"]["x"] + panel["gridPos"]["w"] <= 24
        if panel["type"] != "row":
            assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, panel["title"]
            assert panel["targets"] and panel["description"], panel["title"]
    names = {v["name"] for v in dashboard["templating"]["list"]}
    assert "datasource" in names


def test_every_query_parses_in_promtool(tmp_path: Path) -> None:
    promtool = require_tool("promtool", "apt-get install prometheus")
    queries = _queries()
    rules = {"groups": [{"name": "greengpu-dashboard", "rules": [
        {"record": f"greengpu:dashboard:query{index}", "expr": expr} for index, (_, expr) in enumerate(queries)]}]}
    (tmp_path / "dashboard-rules.yaml").write_text(yaml.safe_dump(rules))
    result = subprocess.run([promtool, "check", "rules", str(tmp_path / "dashboard-rules.yaml")],
                            capture_output=True, text=True, timeout=30, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(queries)} rules found" in result.stdout


def test_the_parse_check_catches_a_broken_query(tmp_path: Path) -> None:
    promtool = require_tool("promtool", "apt-get install prometheus")
    broken = {"groups": [{"name": "g", "rules": [{"record": "greengpu:broken", "expr": "sum by (kind (x)"}]}]}
    (tmp_path / "broken.yaml").write_text(yaml.safe_dump(broken))
    result = subprocess.run([promtool, "check", "rules", str(tmp_path / "broken.yaml")],
                            capture_output=True, text=True, timeout=30, check=False)
    assert result.returncode != 0


def test_every_metric_is_one_greengpu_serves() -> None:
    known = known_metrics()
    named: set[str] = set()
    for where, expr in _queries():
        names = metric_names(expr)
        assert names, where
        assert names <= known, (where, names - known)
        named |= names
    # What the dashboard is for: savings, the loop, actions, nodes, waiting work, tenants, GPU power and limits.
    assert {"greengpu_daemon_ticks_total", "greengpu_daemon_tick_seconds_bucket", "greengpu_daemon_actions_total",
            "greengpu_daemon_nodes", "greengpu_daemon_jobs_waiting_for_capacity",
            "greengpu_daemon_energy_joules_total", "greengpu_gpu_power_watts", "greengpu_gpu_power_limit_watts",
            "greengpu_gpu_power_limit_default_watts"} <= named
    assert named & DAEMON_METRICS and named & agent_metrics()


def test_metric_names_finds_names_and_ignores_label_values() -> None:
    assert metric_names('sum by (kind) (rate(greengpu_daemon_actions_total{kind="wake"}[5m]))') == \
        {"greengpu_daemon_actions_total"}
    assert metric_names('up{job="greengpu_not_a_metric"}') == {"up"}
