"""The daemon's meter marks a node-hour measured only where measured GPU energy was handed in (or its counters
were read) for that node, and charges the measured energy, not the model's busy-at-the-default-limit figure
(issue 36: capping savings never appeared in a live bill)."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

from fleet_inputs import report_json, run_cli

from greengpu.config.inventory import load_cluster_text
from greengpu.control.bodies.body import Observation
from greengpu.control.daemon.daemon_meter import DaemonMeter
from greengpu.model import ClusterSnapshot
from greengpu.sleep.sleep_wake import SleepObservation

CLUSTER = """
site: {pue: 1.0, price_per_kwh: 0.5, carbon_g_per_kwh: 100}
node_types:
  g2: {gpus: 2, gpu_model: A100, gpu_idle_w: 50, gpu_max_w: 400, gpu_min_limit_w: 100, host_idle_w: 0,
       host_sleep_w: 0, boot_s: 60}
nodes:
  - {name: "n[1-2]", type: g2}
tenants:
  a: {quota_gpus: 4}
"""
START = dt.datetime(2024, 3, 4, tzinfo=dt.UTC).timestamp()


def look(cluster, time_s: float) -> Observation:  # type: ignore[no-untyped-def]
    return Observation(snapshot=ClusterSnapshot(time_s=time_s, cluster=cluster), gpus=(),
                       sleep=SleepObservation(now_s=time_s), gpu_energy_j={}, gpu_settings={})


def test_measured_energy_handed_in_is_charged_and_marks_only_its_node_measured(tmp_path: Path) -> None:
    cluster = load_cluster_text(CLUSTER)
    ledger = tmp_path / "ledger.db"
    meter = DaemonMeter.open(cluster, ledger, None, "default", "test")
    meter.record(look(cluster, START))
    # n1's GPUs drew 360 kJ in the 600 s (600 W), as counters measured; n2 has no figure: modelled at idle.
    meter.record(look(cluster, START + 600), measured_gpu_energy_j={"n1": 360_000.0})
    assert meter.measured_nodes == {"n1"}
    payload = report_json("--ledger", str(ledger), "--month", "2024-03", "--aggregate", "node")
    energy = {r["name"]: r["energy_kwh"] for r in payload["rows"]}
    assert energy == {"n1": 0.1, "n2": round(2 * 50 * 600 / 3.6e6, 3)}
    assert payload["basis"] == "partly measured (85%)"  # 0.1 of 0.1167 kWh measured
    assert {r["name"]: r["basis"] for r in payload["rows"]} == {"n1": "measured", "n2": "modelled"}
    code, csv_text, err = run_cli("report", "--ledger", str(ledger), "--month", "2024-03", "--aggregate", "node",
                                  "--format", "csv")
    lines = [line.split(",") for line in csv_text.splitlines()]
    basis = lines[0].index("basis")
    assert code == 0 and {line[1]: line[basis] for line in lines[1:]} == {
        "n1": "measured", "n2": "modelled", "TOTAL": "partly measured (85%)"}, err
    # A figure that is not a measurement (negative, NaN) is not taken: the node is modelled.
    meter.record(look(cluster, START + 1200), measured_gpu_energy_j={"n1": float("nan"), "n2": -1.0})
    assert meter.measured_nodes == set()
    assert report_json("--ledger", str(ledger), "--month", "2024-03")["basis"] == "modelled"


def test_every_node_measured_for_every_period_is_a_measured_run(tmp_path: Path) -> None:
    cluster = load_cluster_text(CLUSTER)
    ledger = tmp_path / "ledger.db"
    meter = DaemonMeter.open(cluster, ledger, None, "default", "test")
    for step in range(4):
        meter.record(look(cluster, START + 300 * step), measured_gpu_energy_j={"n1": 30_000.0, "n2": 60_000.0})
    payload = report_json("--ledger", str(ledger), "--month", "2024-03")
    assert payload["basis"] == "measured" and payload["measured_share"] == 1.0
    assert payload["totals"]["energy_kwh"] == round(3 * 90_000 / 3.6e6, 3)
