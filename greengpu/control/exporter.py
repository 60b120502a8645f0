"""Prometheus metrics of the node agent, served on loopback by default (`/metrics`, `/healthz`).

NVML is read at scrape time by a custom collector (FIELD-NOTES.md), so a scrape always sees the
GPU as it is now, not as it was at the last control tick. Names follow Prometheus conventions:
base units (watts, joules, bytes, celsius, ratios), `_total` on counters; clocks stay in MHz because
that is the unit NVML and `nvidia-smi` speak and the issue names (`greengpu_gpu_clock_locked_mhz`).
"""

from __future__ import annotations

import logging
import socket
import threading
from collections.abc import Iterable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from greengpu.control.agent import Agent

log = logging.getLogger("greengpu.exporter")

DEFAULT_AGENT_LISTEN = "127.0.0.1:9474"
"""The daemon has 9473 (CONTRACTS.md section 7); the agent on the same host takes the next port."""
LABELS = ["gpu", "uuid", "model"]


class GpuCollector(Collector):
    """Reads every GPU through the agent's backend when Prometheus scrapes."""

    def __init__(self, agent: Agent) -> None:
        self.agent = agent

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
        for index in range(backend.gpu_count):
            reading = backend.read(index)
            labels = [str(index), reading.uuid, reading.name]
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
        yield from (energy, power, limit, default, locked, clock, util, memory, temperature, capped, ecc)
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

    def __init__(self, registry: CollectorRegistry, host: str, port: int) -> None:
        registry_ref = registry

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
                    body, status, content_type = b"ok\n", 200, "text/plain; charset=utf-8"
                else:
                    body, status, content_type = b"not found\n", 404, "text/plain; charset=utf-8"
                self.send_response(status)
                self.send_header("Content-Type", content_type)
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
        self._server.shutdown()
        self._server.server_close()


def serve_agent_metrics(agent: Agent, host: str, port: int) -> MetricsServer:
    registry = CollectorRegistry(auto_describe=True)
    registry.register(GpuCollector(agent))
    return MetricsServer(registry, host, port).start()
