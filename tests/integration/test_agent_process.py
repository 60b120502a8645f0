"""`greengpu agent --backend fake` as a real process: metrics over real HTTP on loopback, restore on
SIGTERM, and restore by the next agent after a kill -9 (the fake GPUs keep their state in a file,
as real GPUs keep a limit after the process that set it is gone)."""

from __future__ import annotations

import json
import os
import queue
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from greengpu.energy.curves import INFERENCE

TRAINING_LIMIT_W = 367.0  # the default policy's efficiency pick for an A100 (tests/unit/control/test_agent.py)
INFERENCE_CLOCK_MHZ = round(1410 * INFERENCE.clock_fraction_within(0.05, 0.8))  # the inference curve's clock


class AgentProcess:
    def __init__(self, tmp_path: Path, *extra: str, env: dict[str, str] | None = None) -> None:
        classes = tmp_path / "classes.yaml"
        classes.write_text("default_class: training\ngpus: {0: training, 1: inference}\n")
        self.state = tmp_path / "gpus.json"
        self.journal = tmp_path / "journal.jsonl"
        argv = [sys.executable, "-m", "greengpu", "agent", "--backend", "fake", "--fake-gpus", "3xA100",
                "--fake-state", str(self.state), "--fake-busy", "0,1", "--classes", str(classes),
                "--journal", str(self.journal), "--listen", "127.0.0.1:0", "--interval-s", "0.2", *extra]
        self.process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                        env={**os.environ, **(env or {})})
        self.lines: queue.Queue[str] = queue.Queue()
        self.stderr: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            self.stderr.append(line)
            self.lines.put(line)

    def wait_for(self, pattern: str, timeout_s: float = 30.0) -> re.Match[str]:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                line = self.lines.get(timeout=0.2)
            except queue.Empty:
                if self.process.poll() is not None and self.lines.empty():
                    break
                continue
            match = re.search(pattern, line)
            if match:
                return match
        raise AssertionError(f"no line matching {pattern!r}; stderr so far:\n{''.join(self.stderr)}")

    def gpus(self) -> list[dict]:
        """The GPUs as a GPU holds them: the fake's state file and its write log (a kill may leave writes
        only in the log)."""
        from greengpu.backends.fake_nvml import FakeNvml

        return [dict(vars(gpu)) for gpu in FakeNvml.stored_gpus(self.state)]

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(timeout=10)


def scrape(url: str) -> dict[str, object]:
    with urllib.request.urlopen(url, timeout=5) as response:
        assert response.status == 200
        assert response.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        text = response.read().decode()
    return {family.name: family for family in text_string_to_metric_families(text)}


def test_metrics_scrape_over_http_and_sigterm_restores(tmp_path: Path) -> None:
    agent = AgentProcess(tmp_path)
    try:
        url = agent.wait_for(r"serving metrics on (http://127\.0\.0\.1:\d+)/metrics").group(1)
        agent.wait_for(r"GPU 0 .*-> 367 W")
        agent.wait_for(r"GPU 1 .*SM clocks locked at (\d+) MHz")
        time.sleep(0.5)  # let the fake's energy counters advance
        families = scrape(url + "/metrics")
        with urllib.request.urlopen(url + "/healthz", timeout=5) as health:
            assert health.read() == b"ok\n"

        energy = families["greengpu_gpu_energy_joules"]
        assert energy.type == "counter"
        samples = {s.labels["gpu"]: s for s in energy.samples if s.name == "greengpu_gpu_energy_joules_total"}
        assert set(samples) == {"0", "1", "2"} and samples["0"].value > 0
        assert samples["0"].labels["uuid"] == "GPU-fake-0000"
        assert samples["0"].labels["model"] == "NVIDIA A100-SXM4-80GB"

        def gauge(name: str) -> dict[str, float]:
            family = families[name]
            assert family.type == "gauge", name
            return {s.labels["gpu"]: s.value for s in family.samples}

        assert gauge("greengpu_gpu_power_limit_watts") == {"0": TRAINING_LIMIT_W, "1": 400.0, "2": 100.0}
        assert gauge("greengpu_gpu_clock_locked_mhz") == {"0": 0.0, "1": float(INFERENCE_CLOCK_MHZ), "2": 0.0}
        power = gauge("greengpu_gpu_power_watts")
        assert 0 < power["2"] < power["1"] and power["0"] <= TRAINING_LIMIT_W
        assert 0 <= gauge("greengpu_gpu_utilization_ratio")["0"] <= 1
        # The fake's busy A100 draws 52 + 348 x 0.9 = 365.2 W, under the 367 W cap the model now picks (a
        # limit read against the uncapped draw): the gauge says the cap does not bind (the agent then
        # moves the GPU to locked clocks after its window); under the old 259 W pick it bound.
        assert gauge("greengpu_gpu_power_cap_binding")["0"] == 0.0
        assert "greengpu_gpu_temperature_celsius" in families and "greengpu_gpu_memory_used_bytes" in families
        relaxed = families["greengpu_agent_caps_relaxed_for_queue"]  # the local class source knows no queue
        assert relaxed.type == "gauge" and [s.value for s in relaxed.samples] == [0.0]
        [build] = families["greengpu_build_info"].samples
        assert build.name == "greengpu_build_info" and build.labels["version"] and build.value == 1.0
        [last_tick] = families["greengpu_agent_last_tick_timestamp_seconds"].samples
        assert abs(last_tick.value - time.time()) < 5
        [errors] = [s for s in families["greengpu_agent_tick_errors"].samples if s.name.endswith("_total")]
        assert errors.value == 0
        jobs = {s.labels["gpu"]: (s.labels["job"], s.labels["class"], s.labels["tenant"])
                for s in families["greengpu_gpu_job_info"].samples}
        assert jobs == {"0": ("local:0", "training", ""), "1": ("local:1", "inference", "")}  # GPU 2 is idle

        agent.process.send_signal(signal.SIGTERM)
        assert agent.process.wait(timeout=20) == 0
        assert [g["limit_w"] for g in agent.gpus()] == [400.0, 400.0, 400.0]
        assert all(g["locked_clock_mhz"] is None for g in agent.gpus())
        entries = [json.loads(line) for line in agent.journal.read_text().splitlines()]
        assert entries[-1]["event"] == "stop"
    finally:
        agent.kill()


def test_sigint_restores_too(tmp_path: Path) -> None:
    agent = AgentProcess(tmp_path)
    try:
        agent.wait_for(r"GPU 0 .*-> 367 W")
        agent.process.send_signal(signal.SIGINT)
        assert agent.process.wait(timeout=20) == 0
        assert [g["limit_w"] for g in agent.gpus()] == [400.0, 400.0, 400.0]
    finally:
        agent.kill()


def test_kill_9_then_restart_restores_from_the_journal(tmp_path: Path) -> None:
    first = AgentProcess(tmp_path)
    try:
        first.wait_for(r"GPU 1 .*SM clocks locked")
        first.wait_for(r"GPU 2 .*-> 100 W")
        os.kill(first.process.pid, signal.SIGKILL)
        assert first.process.wait(timeout=10) == -signal.SIGKILL
    finally:
        first.kill()
    left = first.gpus()
    assert [g["limit_w"] for g in left] == [TRAINING_LIMIT_W, 400.0, 100.0]  # the crash left them capped
    assert left[1]["locked_clock_mhz"] is not None

    # The next agent runs with capping off: all it may do is put the GPUs back.
    second = AgentProcess(tmp_path, "--policy", "always-on", "--once")
    try:
        assert second.process.wait(timeout=30) == 0
    finally:
        second.kill()
    assert [g["limit_w"] for g in second.gpus()] == [400.0, 400.0, 400.0]
    assert all(g["locked_clock_mhz"] is None for g in second.gpus())
    assert sum("after an unclean exit" in line for line in second.stderr) == 3
    reasons = [json.loads(line).get("reason") for line in first.journal.read_text().splitlines()]
    assert reasons.count("recovery after an unclean exit") == 3  # GPU 0 and 2 limits, GPU 1 clocks


def test_node_suspend_refuses_while_a_gpu_works_and_runs_the_command_when_idle(tmp_path: Path) -> None:
    marker = tmp_path / "suspended"
    command = f"{sys.executable} -c \"open('{marker}', 'w').write('zzz')\""
    busy = subprocess.run([sys.executable, "-m", "greengpu", "node-suspend", "--backend", "fake",
                           "--fake-gpus", "2xA100", "--fake-busy", "1", "--command", command],
                          capture_output=True, text=True, timeout=60)
    assert busy.returncode == 1
    assert busy.stderr.strip() == "greengpu node-suspend: not suspending: work on GPU 1 (pid 40001)"
    assert not marker.exists()
    idle = subprocess.run([sys.executable, "-m", "greengpu", "node-suspend", "--backend", "fake",
                           "--fake-gpus", "2xA100", "--command", command],
                          capture_output=True, text=True, timeout=60)
    assert idle.returncode == 0, idle.stderr
    assert marker.read_text() == "zzz"


def test_a_port_in_use_is_one_line_and_exit_1_with_the_gpus_untouched(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        agent = AgentProcess(tmp_path, "--listen", f"127.0.0.1:{port}")
        assert agent.process.wait(timeout=30) == 1
        agent.kill()
    err = "".join(agent.stderr)
    assert err == f"greengpu agent: cannot serve metrics on 127.0.0.1:{port}: Address already in use\n"
    assert [g["limit_w"] for g in agent.gpus()] == [400.0, 400.0, 400.0]  # nothing was capped
    assert not agent.journal.exists() or "set_limit" not in agent.journal.read_text()


def test_failing_ticks_fail_healthz_and_put_the_gpus_back_and_systemd_hears_from_the_loop(tmp_path: Path) -> None:
    """The Slurm class source works, then slurmctld goes away: ticks fail, /healthz turns 503 once the last
    good tick is stale, the GPUs go back to default limits, and they are capped again when Slurm returns.
    READY=1 and WATCHDOG=1 reach a real notify socket, as under systemd with Type=notify."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    listing = tmp_path / "scontrol.out"
    listing.write_text("JobId=7 JobName=train Account=physics Partition=gpu JobState=RUNNING NodeList=gpu01 "
                       "Nodes=gpu01 CPU_IDs=0-3 Mem=0 GRES=gpu:a100:1(IDX:0)\n")
    scontrol = bin_dir / "scontrol"  # answers from a recorded listing while "slurmctld" is up
    scontrol.write_text(f"#!/bin/sh\n[ -e {listing} ] && exec cat {listing}\n"
                        "echo 'slurm_load_jobs error: Unable to contact slurm controller (connect failure)' >&2\n"
                        "exit 1\n")
    scontrol.chmod(0o755)
    notify_path = tmp_path / "notify.sock"
    notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    notify.bind(str(notify_path))
    notify.settimeout(10)
    env = {"GREENGPU_SLURM_BIN": str(bin_dir), "NOTIFY_SOCKET": str(notify_path),
           "WATCHDOG_USEC": "400000"}
    agent = AgentProcess(tmp_path, "--class-source", "slurm", "--node", "gpu01", "--stale-after-s", "1",
                         env=env)
    try:
        url = agent.wait_for(r"serving metrics on (http://127\.0\.0\.1:\d+)/metrics").group(1)
        agent.wait_for(r"GPU 0 \[job 7 \(training\)\].*-> 367 W")
        messages = [notify.recv(4096).decode() for _ in range(3)]
        assert messages[0].startswith("READY=1\nSTATUS=capping 3 GPUs") and "WATCHDOG=1" in messages[1:]
        jobs = {s.labels["gpu"]: s.labels["tenant"] for s in scrape(url + "/metrics")["greengpu_gpu_job_info"].samples}
        assert jobs["0"] == "physics"

        listing.rename(tmp_path / "away")  # slurmctld goes away
        agent.wait_for(r"tick failed: scontrol -d -o show job: slurm_load_jobs error: Unable to contact")
        agent.wait_for(r"no good tick for 1 s: GPUs back to their default limits")
        agent.wait_for(r"GPU 0: limit back to 400 W")
        assert agent.gpus()[0]["limit_w"] == 400.0
        try:
            urllib.request.urlopen(url + "/healthz", timeout=5)
            raise AssertionError("/healthz answered 200 while ticks fail")
        except urllib.error.HTTPError as error:
            assert error.code == 503
            assert error.read().decode().startswith("unhealthy: last good control tick ")
        [errors] = [s for s in scrape(url + "/metrics")["greengpu_agent_tick_errors"].samples
                    if s.name.endswith("_total")]
        assert errors.value >= 1

        (tmp_path / "away").rename(listing)  # and comes back: capped again, healthy again
        agent.wait_for(r"GPU 0 \[job 7 \(training\)\].*-> 367 W")
        time.sleep(0.3)
        with urllib.request.urlopen(url + "/healthz", timeout=5) as health:
            assert health.read() == b"ok\n"
        agent.process.send_signal(signal.SIGTERM)
        assert agent.process.wait(timeout=20) == 0
    finally:
        agent.kill()
        notify.close()
