"""Faults the daemon meets on a live cluster: the loop keeps running, backs off and alerts.

NVML refusing writes without root (pynvml's NoPermission through the fake NVML), Slurm commands that
time out, a Kubernetes API server answering 500 (the retries back off; a 429 from a PodDisruptionBudget
is test_daemon_kube.py's), a node that never comes back (test_daemon.py), lost magic packets (wake
verification, test_kube_sleep.py)."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
from fake_kube import FakeKube, node, pod
from manual_clock import ManualClock
from test_daemon import T0, make
from test_daemon_kube import make as make_kube

from greengpu.backends.slurm import SlurmError
from greengpu.config.policy import load_policy
from greengpu.control.bodies.slurm_body import SlurmBody
from greengpu.control.daemon.audit import Alerts, AuditLog
from greengpu.control.daemon.service import Daemon
from greengpu.control.daemon.store import DaemonStore

DATA = Path(__file__).parents[1] / "data" / "slurm"


def test_nvml_without_root_alerts_once_per_gpu_and_the_loop_goes_on(tmp_path: Path) -> None:
    clock = ManualClock(T0)
    daemon, body, _ = make(tmp_path, clock, jobs=[])
    for fake in body.fakes.values():
        fake.root = False  # every write answers NVMLError_NoPermission, as NVML does for a non-root process
    reports = []
    for _ in range(5):
        clock.now_s += 60
        reports.append(daemon.tick())
    assert all(r.ok for r in reports)
    alerts = [r for r in daemon.audit.records() if r.get("alert") == "action_failed"]
    assert len(alerts) == 12  # one per GPU, then left alone for a while (not 12 a tick)
    assert all(body.gpu_limit_w(n, i) == 400.0 for n in body.nodes for i in range(4))  # nothing changed


def test_slurm_timing_out_fails_the_tick_safely_until_it_answers_again(tmp_path: Path) -> None:
    from inventories import a100_type, write_inventory

    from greengpu.config.inventory import load_cluster

    cluster = load_cluster(write_inventory(tmp_path / "c.yaml", {"g": a100_type(gpus=4)},
                                           ['{name: "node[1-2]", type: g}']))
    answers = {"squeue": (DATA / "squeue-22.05.json").read_text(), "sinfo": (DATA / "sinfo-22.05.json").read_text()}
    down = {"left": 2}

    def run(name: str, *args: str) -> str:
        if down["left"] > 0:
            raise SlurmError(f"{name} {' '.join(args)}: no answer within 20 s (is slurmctld up?)")
        return answers.get(name, "")

    clock = ManualClock(T0)
    store = DaemonStore(tmp_path / "state")
    audit = AuditLog(tmp_path / "state" / "audit.jsonl")
    daemon = Daemon(SlurmBody(cluster, run=run), load_policy("default"), store, audit, Alerts(audit), clock=clock)
    outcomes = []
    for _ in range(4):
        clock.now_s += 60
        outcomes.append(daemon.tick().ok)
        down["left"] -= 1
    assert outcomes == [False, False, True, True]
    alerts = [r for r in audit.records() if r.get("alert") == "observe_failed"]
    assert len(alerts) == 2 and "no answer within 20 s" in alerts[0]["message"]
    assert store.open_entries() == []  # nothing half-done


def test_kubernetes_500s_are_retried_with_backoff_and_the_tick_succeeds(
        tmp_path: Path, udp: socket.socket) -> None:
    with FakeKube() as kube:
        kube.nodes = {name: node(name) for name in ("gpu1", "gpu2", "gpu3")}
        kube.pods = [pod("train-0", "u1", "gpu1", gpus=4)]
        daemon, _, clock, _ = make_kube(tmp_path, kube, udp.getsockname()[1])
        kube.server_errors = 3  # an API server restarting: three 500s in a row
        clock.now_s += 60
        assert daemon.tick().ok
        assert kube.server_errors == 0  # they were all met, and retried past
        api = daemon.body.sleeper.api  # type: ignore[attr-defined]
        assert api.retries_done >= 3
        assert not [r for r in daemon.audit.records() if r.get("alert")]


def test_a_release_that_fails_when_the_cluster_cannot_be_seen_is_an_error_not_a_note(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """GPUs may still be capped while nobody watches: that reaches stderr even under -q (errors only)."""
    import logging

    from inventories import a100_type, write_inventory

    from greengpu.config.inventory import load_cluster

    cluster = load_cluster(write_inventory(tmp_path / "c.yaml", {"g": a100_type(gpus=4)},
                                           ['{name: "node[1-2]", type: g}']))

    def run(name: str, *args: str) -> str:
        raise SlurmError(f"{name} {' '.join(args)}: Unable to contact slurm controller (connect failure)")

    class StuckBody(SlurmBody):
        def release_gpus(self, reason: str) -> list[str]:
            raise OSError("NVML: the driver is not loaded")

    clock = ManualClock(T0 + 60)
    audit = AuditLog(tmp_path / "state" / "audit.jsonl")
    daemon = Daemon(StuckBody(cluster, run=run), load_policy("default"), DaemonStore(tmp_path / "state"), audit,
                    Alerts(audit), clock=clock)
    with caplog.at_level(logging.WARNING, logger="greengpu"):
        assert not daemon.tick().ok
    failed = [r for r in caplog.records if "releasing the GPUs failed too" in r.getMessage()]
    assert len(failed) == 1 and failed[0].levelno == logging.ERROR
    assert "the driver is not loaded" in failed[0].getMessage()
