"""The node agents' reports to the daemon (`POST /v1/report`): one typed report per node, checked field by
field, and the daemon's store of the latest report per node with its age.

A report (JSON, at most `MAX_REPORT_BYTES`):

    {"node": "gpu-01", "time_s": 1700000000.0,
     "gpus": [{"index": 0, "utilization": 0.93, "health": "healthy", "score": 0.02,
               "energy_mj": 123456789, "pids": [4242], "jobs": ["812"]}],
     "jobs": {"812": {"tenant": "vision", "last_checkpoint_s": 1699999400.0, "checkpoint_duration_s": 42.0}}}

`energy_mj` is NVML's total energy counter (mJ; null where the GPU has none); `pids` the processes on the
GPU, `jobs` the jobs they belong to; `last_checkpoint_s` the last checkpoint the agent saw (null: none).
A report is judged by the daemon's clock when it arrives, never the agent's: one older than
`stale_after_s` is unknown, and unknown never makes a node look idle or unhealthy.
"""

from __future__ import annotations

import json
import math
import threading
from dataclasses import dataclass

from greengpu.health.score import HealthState
from greengpu.json_types import JsonObject, JsonValue
from greengpu.sleep.suspends import NodeUse

MAX_REPORT_BYTES = 256 * 1024
MAX_GPUS = 64
MAX_PIDS = 1024
MAX_JOBS = 1024
MAX_NAME = 256
STALE_AFTER_S = 120.0
MAX_CHAIN = 256
"""Measured periods kept per node for the meter (`energy_between`): hours of reports at the agents' pace."""


class ReportError(ValueError):
    """A report that is not one: the one line the daemon answers 400 with."""


@dataclass(frozen=True)
class GpuReport:
    index: int
    utilization: float
    health: HealthState
    score: float
    energy_mj: int | None
    pids: tuple[int, ...]
    jobs: tuple[str, ...]


@dataclass(frozen=True)
class JobReport:
    tenant: str
    last_checkpoint_s: float | None
    checkpoint_duration_s: float | None = None
    """How long that checkpoint took (s), where the agent saw it start and end."""


@dataclass(frozen=True)
class AgentReport:
    node: str
    time_s: float
    gpus: tuple[GpuReport, ...]
    jobs: dict[str, JobReport]

    def energy_j(self) -> float | None:
        """The node's GPU energy counters summed (J); None unless every GPU has one."""
        if not self.gpus or any(g.energy_mj is None for g in self.gpus):
            return None
        return sum(g.energy_mj or 0 for g in self.gpus) / 1000.0


@dataclass(frozen=True)
class EnergyPeriod:
    """Measured GPU energy of one node between two reports (the ledger's "measured per node per period")."""

    node: str
    start_s: float
    end_s: float
    energy_j: float


def _number(value: object, where: str, low: float, high: float) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or not (
            low <= value <= high):
        raise ReportError(f"{where}: expected a number in [{low:g}, {high:g}], got {json.dumps(value)[:40]}")
    return float(value)


def _integer(value: object, where: str, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ReportError(f"{where}: expected an integer in [{low}, {high}], got {json.dumps(value)[:40]}")
    return value


def _name(value: object, where: str) -> str:
    if not isinstance(value, str) or not value or len(value) > MAX_NAME or not value.isprintable():
        raise ReportError(f"{where}: expected a name of 1 to {MAX_NAME} printable characters")
    return value


def _list(value: object, where: str, most: int) -> list[JsonValue]:
    if not isinstance(value, list) or len(value) > most:
        raise ReportError(f"{where}: expected a list of at most {most} items")
    return value


def _mapping(value: object, where: str, keys: set[str], required: set[str]) -> JsonObject:
    if not isinstance(value, dict):
        raise ReportError(f"{where}: expected an object")
    unknown = sorted(set(value) - keys)
    if unknown:
        # Escaped: a key is anything a client sent, and the refusal stays one line (a newline in a key included).
        raise ReportError(f"{where}.{unknown[0][:40].encode('unicode_escape').decode('ascii')}: unknown key")
    missing = sorted(required - set(value))
    if missing:
        raise ReportError(f"{where}.{missing[0]}: missing")
    return value


def parse_report(body: bytes, gpus_of: dict[str, int]) -> AgentReport:
    """The report in `body`, checked against the inventory (`gpus_of`: each node's GPU count); ReportError
    with one line naming the field otherwise."""
    if len(body) > MAX_REPORT_BYTES:
        raise ReportError(f"report: larger than {MAX_REPORT_BYTES} bytes")
    try:
        raw = json.loads(body.decode("utf-8"), parse_constant=lambda name: math.nan)
    except (UnicodeDecodeError, ValueError, RecursionError) as error:
        raise ReportError(f"report: not JSON ({str(error).splitlines()[0][:80]})") from None
    top = _mapping(raw, "report", {"node", "time_s", "gpus", "jobs"}, {"node", "time_s", "gpus"})
    node = _name(top["node"], "report.node")
    if node not in gpus_of:
        raise ReportError(f"report.node: {node[:60]!r} is not a node of the inventory")
    time_s = _number(top["time_s"], "report.time_s", 0.0, 1e11)
    gpus: list[GpuReport] = []
    for i, item in enumerate(_list(top["gpus"], "report.gpus", MAX_GPUS)):
        where = f"report.gpus[{i}]"
        g = _mapping(item, where, {"index", "utilization", "health", "score", "energy_mj", "pids", "jobs"},
                     {"index", "utilization"})
        index = _integer(g["index"], f"{where}.index", 0, gpus_of[node] - 1)
        if any(seen.index == index for seen in gpus):
            raise ReportError(f"{where}.index: GPU {index} reported twice")
        health = g.get("health", "healthy")
        if not isinstance(health, str) or health not in {s.value for s in HealthState}:
            raise ReportError(f"{where}.health: expected healthy, warning or failing")
        energy = g.get("energy_mj")
        pids = _list(g.get("pids", []), f"{where}.pids", MAX_PIDS)
        on_gpu = _list(g.get("jobs", []), f"{where}.jobs", MAX_JOBS)
        gpus.append(GpuReport(
            index=index, utilization=_number(g["utilization"], f"{where}.utilization", 0.0, 1.0),
            health=HealthState(health), score=_number(g.get("score", 0.0), f"{where}.score", 0.0, 1.0),
            energy_mj=None if energy is None else _integer(energy, f"{where}.energy_mj", 0, 2**63 - 1),
            pids=tuple(_integer(p, f"{where}.pids[{k}]", 0, 2**31 - 1) for k, p in enumerate(pids)),
            jobs=tuple(_name(j, f"{where}.jobs[{k}]") for k, j in enumerate(on_gpu))))
    jobs_raw = top.get("jobs", {})
    if not isinstance(jobs_raw, dict) or len(jobs_raw) > MAX_JOBS:
        raise ReportError(f"report.jobs: expected an object of at most {MAX_JOBS} jobs")
    jobs: dict[str, JobReport] = {}
    for job_id, item in jobs_raw.items():
        where = f"report.jobs[{_name(job_id, 'report.jobs key')!r}]"
        j = _mapping(item, where, {"tenant", "last_checkpoint_s", "checkpoint_duration_s"}, set())
        tenant = j.get("tenant", "")
        if not isinstance(tenant, str) or len(tenant) > MAX_NAME:
            raise ReportError(f"{where}.tenant: expected a string of at most {MAX_NAME} characters")
        checkpoint = j.get("last_checkpoint_s")
        took = j.get("checkpoint_duration_s")
        jobs[job_id] = JobReport(tenant, None if checkpoint is None else _number(
            checkpoint, f"{where}.last_checkpoint_s", 0.0, 1e11), None if took is None else _number(
            took, f"{where}.checkpoint_duration_s", 0.0, 7 * 86400.0))
    return AgentReport(node, time_s, tuple(sorted(gpus, key=lambda g: g.index)), jobs)


@dataclass(frozen=True)
class Received:
    report: AgentReport
    received_s: float


class AgentReports:
    """The latest report per node, by the daemon's clock; safe to fill from the HTTP threads while the tick reads."""

    def __init__(self, idle_util_threshold: float, stale_after_s: float = STALE_AFTER_S) -> None:
        self.idle_util_threshold = idle_util_threshold
        self.stale_after_s = stale_after_s
        self._latest: dict[str, Received] = {}
        self._last_busy_s: dict[str, float] = {}
        self._energy: dict[str, EnergyPeriod] = {}
        self._chain: dict[str, list[EnergyPeriod]] = {}
        """Each node's unbroken run of measured periods (a reset or a report without counters breaks it)."""
        self._lock = threading.Lock()

    def put(self, report: AgentReport, received_s: float) -> None:
        with self._lock:
            before = self._latest.get(report.node)
            self._latest[report.node] = Received(report, received_s)
            if any(g.pids or g.jobs or g.utilization >= self.idle_util_threshold for g in report.gpus):
                self._last_busy_s[report.node] = received_s
            then = before.report.energy_j() if before is not None else None
            now = report.energy_j()
            if before is not None and then is not None and now is not None and now >= then:
                period = EnergyPeriod(report.node, before.received_s, received_s, now - then)
                self._energy[report.node] = period
                chain = self._chain.setdefault(report.node, [])
                chain.append(period)
                del chain[:-MAX_CHAIN]
            else:  # first sight, a GPU without a counter, or a counter reset by a reboot: no period
                self._energy.pop(report.node, None)
                self._chain.pop(report.node, None)

    def fresh(self, now_s: float) -> dict[str, Received]:
        """The reports no older than `stale_after_s` at `now_s`."""
        with self._lock:
            return {node: r for node, r in self._latest.items() if 0.0 <= now_s - r.received_s <= self.stale_after_s}

    def ages_s(self, now_s: float) -> dict[str, float]:
        """Each reporting node's report age (s)."""
        with self._lock:
            return {node: now_s - r.received_s for node, r in self._latest.items()}

    def node_use(self, now_s: float) -> dict[str, NodeUse]:
        """What the sleep lever needs of every node that ever reported (a stale report: use unknown)."""
        fresh = self.fresh(now_s)
        with self._lock:
            nodes = list(self._latest)
            busy = dict(self._last_busy_s)
        use: dict[str, NodeUse] = {}
        for node in nodes:
            got = fresh.get(node)
            if got is None or not got.report.gpus:
                use[node] = NodeUse(None, 0, busy.get(node))
                continue
            gpus = got.report.gpus
            use[node] = NodeUse(max(g.utilization for g in gpus), sum(len(g.pids) + len(g.jobs) for g in gpus),
                                busy.get(node))
        return use

    def gpu_health(self, now_s: float) -> dict[str, dict[int, HealthState]]:
        """Warning and failing GPUs from the fresh reports (a stale report says nothing: healthy as before)."""
        return {node: {g.index: g.health for g in r.report.gpus if g.health is not HealthState.HEALTHY}
                for node, r in self.fresh(now_s).items() if any(g.health is not HealthState.HEALTHY
                                                                 for g in r.report.gpus)}

    def last_checkpoints(self, now_s: float) -> dict[str, float]:
        """Each job's last checkpoint the fresh reports saw (the latest over its nodes)."""
        found: dict[str, float] = {}
        for received in self.fresh(now_s).values():
            for job_id, job in received.report.jobs.items():
                if job.last_checkpoint_s is not None:
                    found[job_id] = max(found.get(job_id, 0.0), job.last_checkpoint_s)
        return found

    def energy_period(self, node: str) -> EnergyPeriod | None:
        """The node's measured GPU energy between its last two reports (None: not measured)."""
        with self._lock:
            return self._energy.get(node)

    def energy_periods(self) -> dict[str, EnergyPeriod]:
        """Every node's last measured period (the ledger's measured GPU energy per node per period)."""
        with self._lock:
            return dict(self._energy)

    def energy_between(self, start_s: float, end_s: float) -> dict[str, float]:
        """Each node's GPU energy measured by its agent over [start_s, end_s) (J), for the ledger's meter.

        Within a period between two reports the power is taken as even. A node is measured only where its
        unbroken run of periods began by `start_s`, a report came within (start_s, end_s] or after, and the last
        one is fresh at `end_s`; the time since that report is charged at that last period's power (the counter
        is read again at the next report). Any other node is left out: the meter models it."""
        out: dict[str, float] = {}
        views: dict[str, tuple[float, list[EnergyPeriod]]] = {}
        with self._lock:  # only the periods from the one holding start_s on (a meter period spans a few)
            for node, whole in self._chain.items():
                tail: list[EnergyPeriod] = []
                for period in reversed(whole):
                    tail.append(period)
                    if period.start_s <= start_s:
                        break
                views[node] = (whole[0].start_s if whole else math.inf, tail[::-1])
        for node, (first_s, chain) in views.items():
            if not chain or first_s > start_s or chain[-1].end_s <= start_s \
                    or not 0 <= end_s - chain[-1].end_s <= self.stale_after_s:
                continue
            energy_j = 0.0
            for period in chain:
                length_s = period.end_s - period.start_s
                overlap_s = min(end_s, period.end_s) - max(start_s, period.start_s)
                if length_s > 0 and overlap_s > 0:
                    energy_j += period.energy_j * overlap_s / length_s
            last = chain[-1]
            tail_s = end_s - max(start_s, last.end_s)
            if tail_s > 0 and last.end_s > last.start_s:
                energy_j += last.energy_j / (last.end_s - last.start_s) * tail_s
            out[node] = energy_j
        return out

    def checkpoint_durations(self, now_s: float) -> dict[str, float]:
        """How long each job's last checkpoint took, as the fresh reports say (the longest over its nodes)."""
        found: dict[str, float] = {}
        for received in self.fresh(now_s).values():
            for job_id, job in received.report.jobs.items():
                if job.checkpoint_duration_s is not None:
                    found[job_id] = max(found.get(job_id, 0.0), job.checkpoint_duration_s)
        return found
