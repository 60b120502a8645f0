"""The shipped alert rules on the agents' reports fire when they should and not before (`promtool test rules` on
synthetic series): a training job stalled, an agent that stopped reporting to the daemon."""

from __future__ import annotations

import subprocess
from pathlib import Path

import yaml
from deploy_tools import require_tool
from test_deploy_kubernetes import _rule_groups

PROMTOOL_TESTS = """
rule_files: [rules.yaml]
evaluation_interval: 1m
tests:
  - interval: 1m
    input_series:
      - series: 'greengpu_daemon_stalled_jobs{pod="daemon-a"}'
        values: '0x9 2x10 0x20'
      - series: 'greengpu_daemon_agent_report_age_seconds{pod="daemon-a",node="gpu1"}'
        values: '30x9 60+60x30'
      - series: 'greengpu_daemon_agent_report_age_seconds{pod="daemon-a",node="gpu2"}'
        values: '30x40'
    alert_rule_test:
      - eval_time: 5m
        alertname: GreengpuTrainingJobsStalled
        exp_alerts: []
      - eval_time: 12m
        alertname: GreengpuTrainingJobsStalled
        exp_alerts:
          - exp_labels: {severity: warning}
            exp_annotations:
              summary: 2 training job(s) below half their own GPU utilisation baseline
              description: >-
                Each has stayed under half its baseline for 15 minutes (a hung data loader, a dead rank,
                a deadlock). The daemon's job_stalled alert names the job, tenant, node and last checkpoint.
      - eval_time: 22m
        alertname: GreengpuTrainingJobsStalled
        exp_alerts: []
      - eval_time: 18m
        alertname: GreengpuAgentReportsStale
        exp_alerts: []
      - eval_time: 30m
        alertname: GreengpuAgentReportsStale
        exp_alerts:
          - exp_labels: {severity: warning, node: gpu1}
            exp_annotations:
              summary: No report from the agent of gpu1 for 21m 0s
              description: >-
                The daemon counts the node as unknown: it stays awake and its GPU health is not seen.
                Check the agent's pod or unit on that node and its --report-to URL and token.
"""


def test_the_report_alerts_fire_when_they_should_and_not_before(tmp_path: Path) -> None:
    promtool = require_tool("promtool", "apt-get install prometheus")
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump(_rule_groups()))
    (tmp_path / "tests.yaml").write_text(PROMTOOL_TESTS)
    result = subprocess.run([promtool, "test", "rules", "tests.yaml"], cwd=tmp_path, capture_output=True,
                            text=True, timeout=30, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout
