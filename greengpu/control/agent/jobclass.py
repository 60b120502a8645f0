"""Which job, of which workload class, runs on each local GPU: the agent's input to the capping decision.

Three sources, one answer (`{gpu index: GpuJob}`; a GPU missing from it is idle), and whether GPU
work is waiting for capacity (`work_waiting`, the tick's typed answer, for the policy's `relax_when_queued`):
- `LocalMap`: a YAML file on the node (`gpus: {0: inference}`, `default_class: training`): for
  machines without a scheduler, and for `--backend fake`. It knows no queue: never short.
- `SlurmJobs`: `scontrol -d -o show job` lists the jobs on this node with the GPU indices each holds
  (`GRES=gpu:a100:2(IDX:0-1)`); the class comes from the job's comment (`greengpu.class=inference`),
  else from a partition -> class map, else the default class. The same listing holds the pending
  jobs: one that asks for GPUs and waits with `Reason=Resources` means capacity is short.
- `KubernetesPods`: the kubelet's PodResources API says which pod was allocated each GPU (by UUID,
  as NVML reports it): no access to other processes needed. Where its socket is not mounted, each
  GPU process's cgroup (`/proc/PID/cgroup`, which needs `hostPID` in a pod) names its pod's UID. The
  pod's `greengpu.io/class` annotation gives the class (pods listed once per tick, this node only).
  Capacity is short while a pod that requests `nvidia.com/gpu` is pending unscheduled (listed once
  per tick when a pending-pod lister is given).
A GPU with running processes that no job claims gets the default class: something is using it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import hostlist

from greengpu.backends.kubernetes import CLASS_ANNOTATION, PodInfo
from greengpu.backends.nvml import GpuReading
from greengpu.config.fields import Fields
from greengpu.config.yamlsource import load_yaml_file
from greengpu.model import JOB_CLASSES
from greengpu.sleep.work_waiting import NOTHING_WAITS, WorkWaiting

CLASS_COMMENT = re.compile(r"greengpu\.class=(\w+)")


@dataclass(frozen=True)
class GpuJob:
    job_id: str
    job_class: str
    tenant: str = ""
    """Who runs it: the Slurm account, the pod's namespace ("" when the source does not say)."""


class ClassSource(Protocol):
    def jobs(self, readings: Sequence[GpuReading]) -> dict[int, GpuJob]:
        """The job on each busy GPU of this node."""
        ...

    def work_waiting(self) -> WorkWaiting:
        """The GPU work that waited for capacity at the last `jobs()` call (the whole cluster's queue)."""
        ...


def _unclaimed_busy(readings: Sequence[GpuReading], claimed: Mapping[int, GpuJob],
                    default_class: str) -> dict[int, GpuJob]:
    return {r.index: GpuJob(f"pid:{r.pids[0]}", default_class)
            for r in readings if r.pids and r.index not in claimed}


class LocalMap:
    """Classes per GPU index from a YAML file; processes decide whether a GPU is busy."""

    def __init__(self, classes_by_gpu: Mapping[int, str], default_class: str = "training") -> None:
        self.classes_by_gpu = dict(classes_by_gpu)
        self.default_class = default_class

    @classmethod
    def load(cls, path: str | Path) -> LocalMap:
        """Read a class file (`load_class_file`) as a local map."""
        classes, _, default_class = load_class_file(path)
        return cls(classes, default_class)

    def jobs(self, readings: Sequence[GpuReading]) -> dict[int, GpuJob]:
        claimed = {r.index: GpuJob(f"local:{r.index}", self.classes_by_gpu[r.index])
                   for r in readings if r.pids and r.index in self.classes_by_gpu}
        return {**claimed, **_unclaimed_busy(readings, claimed, self.default_class)}

    def work_waiting(self) -> WorkWaiting:
        return NOTHING_WAITS  # no scheduler, no queue


def load_class_file(path: str | Path) -> tuple[dict[int, str], dict[str, str], str]:
    """(class per GPU index, class per Slurm partition, default class) from the agent's class file.

    ```yaml
    default_class: training        # a busy GPU no rule names
    gpus: {0: inference, 1: training}
    partition_classes: {gpu-inf: inference}
    ```
    Bad input raises ConfigError naming file, line and key.
    """
    doc = load_yaml_file(path)
    fields = Fields(doc, (), doc.value if doc.value is not None else {})
    fields.reject_unknown(("default_class", "gpus", "partition_classes"))
    default_class = fields.string("default_class", "training", choices=JOB_CLASSES) or "training"
    by_gpu: dict[int, str] = {}
    gpus = fields.sub("gpus")
    if gpus is not None:
        for key in list(gpus.data):
            if not str(key).isdigit():
                raise gpus.error(key, "must be a GPU index (0, 1, ...)")
            by_gpu[int(key)] = gpus.string(key, required=True, choices=JOB_CLASSES) or default_class
    by_partition: dict[str, str] = {}
    partitions = fields.sub("partition_classes")
    if partitions is not None:
        for key in list(partitions.data):
            by_partition[str(key)] = partitions.string(key, required=True, choices=JOB_CLASSES) or default_class
    return by_gpu, by_partition, default_class


_JOB_ID = re.compile(r"\bJobId=(\S+)")
_DETAIL = re.compile(r"\bNodes=(\S+) CPU_IDs=\S+ Mem=\S+ GRES=(\S*)")
_IDX = re.compile(r"\(IDX:([0-9,\-]+)\)")


def parse_scontrol_jobs(text: str, node: str, partition_classes: Mapping[str, str],
                        default_class: str) -> dict[int, GpuJob]:
    """GPU index -> job on `node`, from `scontrol -d -o show job` (one job per line, running jobs only)."""
    jobs: dict[int, GpuJob] = {}
    for line in text.splitlines():
        job_id = _JOB_ID.search(line)
        if not job_id or "JobState=RUNNING" not in line:
            continue
        comment = CLASS_COMMENT.search(line)
        partition = re.search(r"\bPartition=(\S+)", line)
        account = re.search(r"\bAccount=(\S+)", line)
        job_class = (comment.group(1) if comment and comment.group(1) in JOB_CLASSES
                     else partition_classes.get(partition.group(1) if partition else "", default_class))
        for nodes, gres in _DETAIL.findall(line):
            if node not in hostlist.expand_hostlist(nodes):
                continue
            for indices in _IDX.findall(gres):
                for index in hostlist.expand_hostlist(f"[{indices}]"):
                    jobs[int(index)] = GpuJob(job_id.group(1), job_class,
                                              account.group(1) if account and account.group(1) != "(null)" else "")
    return jobs


_GPU_REQUEST = re.compile(r"\b(?:TresPerNode|TresPerJob|TresPerTask|TresPerSocket|ReqTRES|Gres)=\S*\bgpu\b")


_JOB_ID = re.compile(r"\bJobId=(\S+)")


def gpu_jobs_waiting_for_resources(text: str) -> WorkWaiting:
    """The pending jobs that ask for GPUs and wait for resources, from `scontrol -d -o show job`.

    Slurm gives the first job that cannot start `Reason=Resources` and those queued behind it
    `Reason=Priority`; other reasons (limits, dependencies, held jobs) are not a shortage of GPUs.
    """
    waiting = []
    for line in text.splitlines():
        if "JobState=PENDING" in line and "Reason=Resources" in line and _GPU_REQUEST.search(line):
            found = _JOB_ID.search(line)
            waiting.append(found.group(1) if found else "?")
    return WorkWaiting(tuple(sorted(waiting)))


class SlurmJobs:
    """Jobs on this node as Slurm sees them, and whether GPU jobs wait for resources."""

    def __init__(self, node: str, partition_classes: Mapping[str, str] | None = None,
                 default_class: str = "training",
                 run: Callable[[list[str]], str] | None = None) -> None:
        self.node = node
        self.partition_classes = dict(partition_classes or {})
        self.default_class = default_class
        self._run = run or _scontrol
        self._waiting = NOTHING_WAITS

    def jobs(self, readings: Sequence[GpuReading]) -> dict[int, GpuJob]:
        text = self._run(["scontrol", "-d", "-o", "show", "job"])
        self._waiting = gpu_jobs_waiting_for_resources(text)
        claimed = parse_scontrol_jobs(text, self.node, self.partition_classes, self.default_class)
        return {**claimed, **_unclaimed_busy(readings, claimed, self.default_class)}

    def work_waiting(self) -> WorkWaiting:
        return self._waiting


_POD_UID = re.compile(r"pod([0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12})")


def pod_uid_of(pid: int, proc_root: Path = Path("/proc")) -> str | None:
    """The UID of the pod whose container runs `pid`, from its cgroup path; None outside Kubernetes.

    Covers the cgroupfs driver (`/kubepods/burstable/pod<uid>/<container>`) and the systemd driver
    (`kubepods-burstable-pod<uid with _>.slice`), cgroup v1 and v2.
    """
    try:
        text = (proc_root / str(pid) / "cgroup").read_text()
    except OSError:
        return None  # the process ended, or is not visible from this namespace
    match = _POD_UID.search(text)
    return match.group(1).replace("_", "-") if match else None


class KubernetesPods:
    """Jobs on this node as Kubernetes pods; the class is the pod's `greengpu.io/class` annotation."""

    def __init__(self, node: str, list_pods: Callable[[str], Sequence[PodInfo]], default_class: str = "training",
                 proc_root: Path = Path("/proc"),
                 list_pending: Callable[[], Sequence[PodInfo]] | None = None,
                 pods_by_gpu_uuid: Callable[[], Mapping[str, tuple[str, str]]] | None = None) -> None:
        """`list_pending`: the pods that request GPUs and are not scheduled yet (KubeApi.pending_gpu_pods).
        `pods_by_gpu_uuid`: GPU UUID -> (namespace, pod) from the kubelet (PodResources.pods_by_device);
        without it, the GPU processes' cgroups."""
        self._pods_by_gpu_uuid = pods_by_gpu_uuid
        self.node = node
        self._list_pods = list_pods
        self.default_class = default_class
        self.proc_root = proc_root
        self._list_pending = list_pending
        self._waiting = NOTHING_WAITS

    def work_waiting(self) -> WorkWaiting:
        return self._waiting

    def jobs(self, readings: Sequence[GpuReading]) -> dict[int, GpuJob]:
        busy = [r for r in readings if r.pids]
        if not busy:
            self._waiting = NOTHING_WAITS  # nothing here to uncap: spare the API server the cluster-wide list
            return {}
        if self._list_pending is not None:
            self._waiting = WorkWaiting(tuple(sorted(f"{p.namespace}/{p.name}" for p in self._list_pending())))
        listed = self._list_pods(self.node)
        claimed: dict[int, GpuJob] = {}
        if self._pods_by_gpu_uuid is not None:
            by_name = {(p.namespace, p.name): p for p in listed}
            allocated = self._pods_by_gpu_uuid()
            for reading in busy:
                pod = by_name.get(allocated.get(reading.uuid, ("", "")))
                if pod is not None:
                    claimed[reading.index] = self._job(pod)
        else:
            by_uid = {p.uid: p for p in listed}
            for reading in busy:
                for pid in reading.pids:
                    pod = by_uid.get(pod_uid_of(pid, self.proc_root) or "")
                    if pod is not None:
                        claimed[reading.index] = self._job(pod)
                        break
        return {**claimed, **_unclaimed_busy(readings, claimed, self.default_class)}

    def _job(self, pod: PodInfo) -> GpuJob:
        wanted = pod.annotations.get(CLASS_ANNOTATION, self.default_class)
        job_class = wanted if wanted in JOB_CLASSES else self.default_class
        return GpuJob(f"{pod.namespace}/{pod.name}", job_class, pod.namespace)


def _scontrol(argv: list[str]) -> str:
    """`scontrol ...` by absolute path (as the hooks find it); Slurm's own last line when it fails."""
    from greengpu.backends.slurm import run

    return run(argv[0], *argv[1:], timeout_s=10.0)


UNKNOWN_WAITING = WorkWaiting(("?",))
"""Whether work waits is not known (the daemon cannot be asked): taken as waiting, so caps lift (fail safe)."""


class DaemonWaiting:
    """A class source whose jobs come from `inner` and whose "work waits" comes from the daemon
    (`GET URL/v1/waiting`), instead of each node asking the workload manager. When the daemon cannot be
    reached, or its last good tick is older than `stale_after_s`, the answer is unknown, taken as
    waiting: the running jobs go uncapped until the daemon answers again."""

    def __init__(self, inner: ClassSource, url: str, stale_after_s: float = 180.0, timeout_s: float = 2.0,
                 clock: Callable[[], float] | None = None) -> None:
        import time

        self.inner = inner
        self.url = url.rstrip("/") + "/v1/waiting"
        self.stale_after_s = stale_after_s
        self.timeout_s = timeout_s
        self._clock = clock or time.time
        self._waiting = UNKNOWN_WAITING
        self.problem: str | None = None

    def jobs(self, readings: Sequence[GpuReading]) -> dict[int, GpuJob]:
        found = self.inner.jobs(readings)
        self._waiting = self._ask()
        return found

    def _ask(self) -> WorkWaiting:
        import json
        import urllib.error
        import urllib.request

        try:
            with urllib.request.urlopen(self.url, timeout=self.timeout_s) as answer:
                signal = json.loads(answer.read())
        except (urllib.error.URLError, OSError, ValueError) as error:
            self.problem = f"cannot ask the daemon at {self.url}: {error}"
            return UNKNOWN_WAITING
        tick_s = signal.get("tick_s")
        if not isinstance(tick_s, int | float) or self._clock() - tick_s > self.stale_after_s:
            self.problem = f"the daemon's last good tick is too old ({tick_s})"
            return UNKNOWN_WAITING
        self.problem = None
        # Absent from an old daemon: every cap lifts while work waits (as for a job in neither list).
        uncapped, capped = _job_ids(signal.get("uncapped_job_ids")), _job_ids(signal.get("capped_job_ids"))
        # Only the jobs named in a well-formed list are judged: any other lifts while work waits (fail safe).
        judged = uncapped | (capped or frozenset()) if uncapped is not None else None
        return WorkWaiting(tuple(str(j) for j in signal.get("job_ids", [])), no_slack=signal.get("no_slack") is True,
                           uncapped=uncapped, judged=judged)

    def work_waiting(self) -> WorkWaiting:
        return self._waiting


def _job_ids(found: object) -> frozenset[str] | None:
    """A list of job ids from the daemon's JSON; None when absent or not a list of ids."""
    if not isinstance(found, list) or not all(isinstance(j, str | int) and not isinstance(j, bool) for j in found):
        return None
    return frozenset(str(j) for j in found)
