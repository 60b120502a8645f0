"""The pace of the fake cluster's running jobs: each runs at the speed its GPUs' settings give it.

A capped GPU slows its job by the power model, as in a replay: the speed comes from the limit and the
locked clock the fake GPUs hold (what greengpu wrote through NVML), turned into a speed by the one pure
function the simulator uses too (`greengpu.energy.job_pace`), and the job's work is integrated over its
paces, so a capped job ends when the replay says it ends and a stopped one keeps the work its last
checkpoint saved (tests/integration/test_differential_one_brain.py). A job on several GPUs runs at the
pace of its slowest GPU. Mixed into `FakeCluster`.
"""

from __future__ import annotations

from dataclasses import replace

from greengpu.backends.fake_nvml import FakeNvml
from greengpu.energy import job_pace
from greengpu.energy.job_pace import Pace
from greengpu.model import Cluster, RunningJob


class FakePaces:
    """Every running job's paces (mixed into `FakeCluster`, which holds the attributes below)."""

    cluster: Cluster
    running: dict[str, RunningJob]
    fakes: dict[str, FakeNvml]
    paces: dict[str, list[Pace]]
    _retuned_gpus: set[tuple[str, int]]
    _retuned_at_s: float
    _type_of: dict[str, str]
    _changed: bool

    def _speed(self, running: RunningJob) -> float:
        """The speed the job's GPUs allow now: the slowest of them sets the pace."""
        speeds = []
        for slot in running.slots:
            gpu = self.fakes[slot.node].gpus[slot.gpu_index]
            node_type = self.cluster.node_types[self._type_of[slot.node]]
            speeds.append(job_pace.setting_speed(node_type, running.job.job_class, gpu.limit_w,
                                                 gpu.locked_clock_mhz, gpu.max_sm_clock_mhz))
        return min(speeds)

    def _pace_begin(self, job_id: str, now_s: float) -> None:
        """Job `job_id` starts (again) at `now_s`, with no work done in this run yet."""
        running = self.running[job_id]
        self.paces[job_id] = [(now_s, self._speed(running), 0.0)]
        self._pace_end(job_id)

    def _pace_end(self, job_id: str) -> None:
        running = self.running[job_id]
        end_s = job_pace.end_s(running.job.duration_s, self.paces[job_id][-1])
        if end_s != running.expected_end_s:
            self.running[job_id] = replace(running, expected_end_s=end_s)
            self._changed = True

    def _retuned(self, node: str, gpu_index: int, now_s: float) -> None:
        """GPU `gpu_index` of `node` was given a new setting at `now_s`: its jobs are repaced when the tick settles
        (`_repace_retuned`; a tick writes many GPUs, all at its one instant)."""
        self._retuned_gpus.add((node, gpu_index))
        self._retuned_at_s = now_s

    def _repace_retuned(self) -> None:
        """The jobs on GPUs given a new setting go on at the pace their GPUs now give, from then."""
        if not self._retuned_gpus:
            return
        retuned, self._retuned_gpus = self._retuned_gpus, set()
        now_s = self._retuned_at_s
        for running in [r for r in self.running.values() if any((s.node, s.gpu_index) in retuned for s in r.slots)]:
            job_id = running.job.job_id
            paces = self.paces.get(job_id)
            if paces is None:  # a job of a state written before paces were kept: it ran uncapped so far
                paces = self.paces[job_id] = [(running.start_time_s, 1.0, 0.0)]
            speed = self._speed(running)
            if speed != paces[-1][1]:
                paces.append(job_pace.next_pace(paces, now_s, speed))
                self._changed = True
                self._pace_end(job_id)

    def _work_done_s(self, running: RunningJob, at_s: float) -> float:
        """Uncapped seconds of work the job had done by `at_s` in this run."""
        paces = self.paces.get(running.job.job_id)
        if paces is None:
            return at_s - running.start_time_s
        return job_pace.work_done_s(paces, at_s)
