"""Prometheus metrics of the node agent (`/metrics`, `/healthz`) on the address `--listen` gives (the
shipped unit: the node's own address, so a central Prometheus can scrape it).

`/healthz` is 200 only while the control loop works: 503 before the first good tick and when the last
good tick is older than the staleness bound (the loop is failing or stuck). Per-GPU job, class and
tenant come as an info metric (`greengpu_gpu_job_info`, value 1) to join on `gpu`, so the power
series do not change identity with every job.

NVML is read at scrape time by a custom collector (the exporter pattern for live state), so a scrape sees the
GPU as it is now, not as it was at the last control tick. Names follow Prometheus conventions:
base units (watts, joules, bytes, celsius, ratios), `_total` on counters; clocks stay in MHz because
that is the unit NVML and `nvidia-smi` speak and the issue names (`greengpu_gpu_clock_locked_mhz`).
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from greengpu import __version__
from greengpu.control.agent.health_watch import HealthWatch
from greengpu.control.agent.node_agent import Agent

log = logging.getLogger("greengpu.exporter")

PostHandler = Callable[[str | None], tuple[int, dict[str, object]]]
"""A POST endpoint: the request's Authorization header -> (HTTP status, JSON body)."""

DEFAULT_AGENT_LISTEN = "127.0.0.1:9474"
"""The agent's port; the daemon serves on 9475 (docs/DAEMON.md), so both fit on one host."""
LABELS = ["gpu", "uuid", "model"]


@dataclass
class LoopHealth:
    """What the control loop reports about itself: the last good tick and the failed ones."""

    stale_after_s: float
    clock: Callable[[], float] = time.time
    last_good_tick_s: float | None = None
    tick_errors: int = 0
    last_error: str = ""
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def tick_ok(self) -> None:
        with self._lock:
            self.last_good_tick_s = self.clock()

    def tick_failed(self, error: str) -> None:
        with self._lock:
            self.tick_errors += 1
            self.last_error = error

    def problem(self) -> str | None:
        """Why the agent is unhealthy now, or None."""
        with self._lock:
            if self.last_good_tick_s is None:
                return "no good control tick yet" + (f" (last error: {self.last_error})" if self.last_error else "")
            age_s = self.clock() - self.last_good_tick_s
            if age_s > self.stale_after_s:
                return (f"last good control tick {age_s:.0f} s ago (bound {self.stale_after_s:g} s)"
                        + (f"; last error: {self.last_error}" if self.last_error else ""))
            return None


class GpuCollector(Collector):
    """Reads every GPU through the agent's backend when Prometheus scrapes."""

    def __init__(self, agent: Agent, health: LoopHealth | None = None, watch: HealthWatch | None = None) -> None:
        self.agent = agent
        self.health = health
        self.watch = watch

    def collect(self) -> Iterable[Metric]:
        backend = self.agent.backend
        energy = CounterMetricFamily("greengpu_gpu_energy_joules", "Energy used by the GPU since the driver "
                                     "loaded (NVML counter, or integrated from power where there is none)",
                                     labels=LABELS)
        power = GaugeMetricFamily("greengpu_gpu_power_watts", "GPU power draw", labels=LABELS)
        limit = GaugeMetricFamily("greengpu_gpu_power_limit_watts", "Power limit the GPU enforces", labels=LABELS)
        default = GaugeMetricFamily("greengpu_gpu_power_limit_default_watts", "The GPU's default power limit",
                                    labels=LABELS)
        locked = GaugeMetricFamily("greengpu_gpu_clock_locked_mhz", "SM clock greengpu locked (0: unlocked)",
                                   labels=LABELS)
        clock = GaugeMetricFamily("greengpu_gpu_sm_clock_mhz", "Current SM clock", labels=LABELS)
        util = GaugeMetricFamily("greengpu_gpu_utilization_ratio", "GPU utilisation, 0 to 1", labels=LABELS)
        memory = GaugeMetricFamily("greengpu_gpu_memory_used_bytes", "GPU memory in use", labels=LABELS)
        temperature = GaugeMetricFamily("greengpu_gpu_temperature_celsius", "GPU temperature", labels=LABELS)
        capped = GaugeMetricFamily("greengpu_gpu_power_cap_binding", "1 when the SwPowerCap clock event reason "
                                   "is set: the power limit is holding the GPU back", labels=LABELS)
        ecc = CounterMetricFamily("greengpu_gpu_ecc_uncorrected_errors", "Uncorrected ECC errors since the "
                                  "driver loaded (volatile)", labels=LABELS)
        job_info = GaugeMetricFamily("greengpu_gpu_job_info", "The job on the GPU at the last tick, its workload "
                                     "class and tenant (value 1; join on gpu)",
                                     labels=["gpu", "uuid", "job", "class", "tenant"])
        for index in range(backend.gpu_count):
            reading = backend.read(index)
            labels = [str(index), reading.uuid, reading.name]
            on_gpu = self.agent.gpus.get(index)
            if on_gpu is not None and on_gpu.job is not None:
                job_info.add_metric([str(index), reading.uuid, on_gpu.job.job_id, on_gpu.job.job_class,
                                     on_gpu.job.tenant], 1.0)
            energy.add_metric(labels, reading.energy_j)
            power.add_metric(labels, reading.power_w)
            limit.add_metric(labels, reading.enforced_limit_w)
            default.add_metric(labels, reading.constraints.default_w)
            control = self.agent.gpus.get(index)
            locked.add_metric(labels, float(control.locked_clock_mhz or 0) if control else 0.0)
            clock.add_metric(labels, reading.sm_clock_mhz)
            util.add_metric(labels, reading.utilization)
            memory.add_metric(labels, reading.memory_used_bytes)
            if reading.temperature_c is not None:
                temperature.add_metric(labels, reading.temperature_c)
            capped.add_metric(labels, 1.0 if reading.sw_power_cap else 0.0)
            if reading.ecc_uncorrected_volatile is not None:
                ecc.add_metric(labels, reading.ecc_uncorrected_volatile)
        yield from (energy, power, limit, default, locked, clock, util, memory, temperature, capped, ecc, job_info)
        build = GaugeMetricFamily("greengpu_build_info", "greengpu's version (value 1)", labels=["version"])
        build.add_metric([__version__], 1.0)
        yield build
        if self.health is not None:
            last = GaugeMetricFamily("greengpu_agent_last_tick_timestamp_seconds",
                                     "Unix time of the last control tick that completed")
            last.add_metric([], self.health.last_good_tick_s or 0.0)
            yield last
            errors = CounterMetricFamily("greengpu_agent_tick_errors", "Control ticks that failed "
                                         "(class source or NVML unreachable)")
            errors.add_metric([], float(self.health.tick_errors))
            yield errors
        writes = CounterMetricFamily("greengpu_agent_nvml_writes", "Power limit and clock writes that NVML accepted")
        writes.add_metric([], backend.writes)
        yield writes
        read_only = GaugeMetricFamily("greengpu_agent_read_only", "1 when NVML refused writes (not root)")
        read_only.add_metric([], 1.0 if backend.read_only else 0.0)
        yield read_only
        relaxed = GaugeMetricFamily("greengpu_agent_caps_relaxed_for_queue", "1 when the last tick lifted caps "
                                    "because GPU work waited for capacity (relax_when_queued)")
        relaxed.add_metric([], 1.0 if self.agent.relaxed_for_queue else 0.0)
        yield relaxed
        if self.watch is not None:
            yield from health_metrics(self.watch)


def health_metrics(watch: HealthWatch) -> Iterable[Metric]:
    """The GPU health watch's last assessment of each GPU (docs/HEALTH.md): score, state, each signal's value
    and contribution, and the latched critical events. From the last tick, not read at scrape time: the score
    is a trend over a window, not a live value."""
    labels = ["gpu", "uuid"]
    score = GaugeMetricFamily("greengpu_gpu_health_score", "GPU fault-risk score, 0 to 1 (warning above 0.7 "
                              "by default)", labels=labels)
    state = GaugeMetricFamily("greengpu_gpu_health_state", "1 for the GPU's health state (healthy, warning, "
                              "failing), 0 for the others", labels=[*labels, "state"])
    value = GaugeMetricFamily("greengpu_gpu_health_signal", "A health signal's value over the window (unit in "
                              "the label)", labels=[*labels, "signal", "unit"])
    share = GaugeMetricFamily("greengpu_gpu_health_contribution", "A health signal's share of the score",
                              labels=[*labels, "signal"])
    critical = GaugeMetricFamily("greengpu_gpu_health_critical_events", "Critical events seen (uncorrectable "
                                 "ECC, critical Xid, failed row remap) since the agent started", labels=labels)
    for index, assessment in sorted(watch.assessments.items()):
        gpu = [str(index), watch.uuids.get(index, f"GPU-{index}")]
        score.add_metric(gpu, assessment.score)
        for name in ("healthy", "warning", "failing"):
            state.add_metric([*gpu, name], 1.0 if assessment.state.value == name else 0.0)
        for signal in assessment.signals:
            value.add_metric([*gpu, signal.signal, signal.unit], signal.value)
            share.add_metric([*gpu, signal.signal], signal.contribution)
        critical.add_metric(gpu, float(len(assessment.critical)))
    yield from (score, state, value, share, critical)


def parse_listen(listen: str) -> tuple[str, int]:
    """`HOST:PORT` (IPv6 as `[::1]:PORT`) -> (host, port). Raises ValueError with the reason."""
    host, sep, port = listen.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"{listen!r}: expected HOST:PORT, for example 127.0.0.1:9474")
    return host.strip("[]") or "127.0.0.1", int(port)


class _ThreadingHTTPServerV6(ThreadingHTTPServer):
    address_family = socket.AF_INET6


class MetricsServer:
    """`/metrics` and `/healthz` over HTTP in a background thread."""

    def __init__(self, registry: CollectorRegistry, host: str, port: int, health: LoopHealth | None = None,
                 post: Mapping[str, PostHandler] | None = None) -> None:
        """Binds at once (an address in use raises OSError here, before anything else happens). `post`: path ->
        handler of a POST (given the Authorization header, it returns the status and a JSON body)."""
        registry_ref = registry
        posts = dict(post or {})

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (the http.server API)
                path = self.path.split("?", 1)[0]
                if path == "/metrics":
                    try:
                        body, status = generate_latest(registry_ref), 200
                    except Exception as error:  # a GPU fell off the bus: say so, keep serving
                        log.error("metrics scrape failed: %s", error)
                        body, status = f"scrape failed: {error}\n".encode(), 500
                    content_type = "text/plain; version=0.0.4; charset=utf-8"
                elif path == "/healthz":
                    problem = health.problem() if health is not None else None
                    body, status = (b"ok\n", 200) if problem is None else (f"unhealthy: {problem}\n".encode(), 503)
                    content_type = "text/plain; charset=utf-8"
                else:
                    body, status, content_type = b"not found\n", 404, "text/plain; charset=utf-8"
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_POST(self) -> None:  # noqa: N802 (the http.server API)
                handler = posts.get(self.path.split("?", 1)[0])
                length = int(self.headers.get("Content-Length") or 0)
                if 0 < length <= 65536:
                    self.rfile.read(length)  # the body says nothing; read so the client sees its answer
                document: dict[str, object]
                if handler is None:
                    status, document = 404, {"error": "not found"}
                else:
                    status, document = handler(self.headers.get("Authorization"))
                body = (json.dumps(document) + "\n").encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:  # scrapes are not news
                return

        server_class = _ThreadingHTTPServerV6 if ":" in host else ThreadingHTTPServer
        self._server = server_class((host, port), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="greengpu-metrics", daemon=True)

    @property
    def address(self) -> tuple[str, int]:
        host, port = self._server.server_address[:2]
        return str(host), int(port)

    def start(self) -> MetricsServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and close; safe before `start()` (shutdown() alone would wait forever then)."""
        if self._thread.is_alive():
            self._server.shutdown()
        self._server.server_close()

    def close(self) -> None:
        """Close a server that was bound but never started."""
        self._server.server_close()


def agent_metrics_server(agent: Agent, host: str, port: int, health: LoopHealth | None = None,
                         watch: HealthWatch | None = None,
                         post: Mapping[str, PostHandler] | None = None) -> MetricsServer:
    """The agent's metrics server, bound but not serving yet (`start()`); `post`: its POST endpoints."""
    registry = CollectorRegistry(auto_describe=True)
    registry.register(GpuCollector(agent, health, watch))
    return MetricsServer(registry, host, port, health, post)


def sd_notify(message: str) -> bool:
    """Send `message` (READY=1, WATCHDOG=1, STATUS=...) to systemd over $NOTIFY_SOCKET; False when not
    run by systemd with Type=notify. A few lines instead of a dependency (sd_notify(3))."""
    address = os.environ.get("NOTIFY_SOCKET")
    if not address:
        return False
    if address.startswith("@"):  # an abstract socket
        address = "\0" + address[1:]
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
            sock.connect(address)
            # Never block the control loop on a listener that does not read: a lost ping is the
            # watchdog's business, a stuck loop is not.
            sock.send(message.encode(), socket.MSG_DONTWAIT)
    except OSError as error:
        log.debug("systemd notification %r not sent: %s", message, error)
        return False
    return True


def watchdog_interval_s() -> float | None:
    """Half of systemd's WatchdogSec (WATCHDOG_USEC, for this process), or None without a watchdog."""
    usec = os.environ.get("WATCHDOG_USEC")
    pid = os.environ.get("WATCHDOG_PID")
    if not usec or not usec.isdigit() or (pid and pid != str(os.getpid())):
        return None
    return int(usec) / 2e6
