"""The node agent: applies the capping decision to this node's GPUs, safely (`greengpu agent`).

Each tick: read every GPU, ask the class source which job runs where and whether work waits, build
the tick's observation of each GPU (`gpu_observation`) and ask the tick's capping lever
(`greengpu.capping.gpu_power.gpu_setting`) what it should run at, then change only what differs. The
simulator asks the same lever with observations of the same shape (built from the inventory), so
what `plan` and `simulate` promise is what the agent does.

Safety rules, in the order they matter:
1. Every write is journalled (with the value it replaced) before the agent goes on; a session that
   dies leaves a `start` without a `stop`, and the next agent restores those GPUs before anything else.
2. On stop (SIGTERM, SIGINT, end of `--once`) every GPU the agent touched goes back to the limit it
   had before greengpu, and locked clocks are reset.
3. A limit that changed behind the agent's back (an admin, a driver reload) is drift: set again
   and journalled as such. Locked clocks cannot be read back through NVML; a busy GPU clocking above
   its lock is drift too.
4. A power cap that never binds while the GPU is busy (SwPowerCap never set and power under 95% of
   the limit for `nonbinding_after_s`) saves nothing: the decision is asked again with
   `cap_not_binding`, which moves efficiency classes to locked clocks when the policy allows.
5. Not root: the backend turns read-only after one message; the agent keeps serving metrics.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from greengpu.backends.nvml import GpuReading, NvmlBackend
from greengpu.capping.cap_decision import CapDecision, cap_binds
from greengpu.capping.gpu_power import LIMIT_TOLERANCE_W, GpuObservation, PowerAction, gpu_setting, setting_actions
from greengpu.control.agent.jobclass import ClassSource, GpuJob
from greengpu.control.agent.journal import Journal
from greengpu.policy import CappingPolicy
from greengpu.sleep.work_waiting import NOTHING_WAITS, WorkWaiting

log = logging.getLogger("greengpu.agent")

"""NVML stores limits in mW; a difference under this is not drift."""
BUSY_UTILIZATION = 0.5
"""Only samples at or above this utilisation count when deciding whether a cap binds."""
CLOCK_DRIFT_MARGIN = 1.02


@dataclass
class GpuControl:
    """What the agent has set on one GPU, and what it has learnt about the job there."""

    job: GpuJob | None = None
    decision: CapDecision | None = None
    locked_clock_mhz: int | None = None
    limit_since_s: float | None = None
    cap_bound: bool = False
    busy_samples: int = 0
    cap_not_binding: bool = False
    original_limit_w: float | None = None
    """The limit found before greengpu's first write this session (restored on stop)."""
    touched: bool = False


@dataclass
class TickReport:
    readings: list[GpuReading] = field(default_factory=list)
    changes: list[str] = field(default_factory=list)
    actions: list[PowerAction] = field(default_factory=list)
    """What the tick's capping lever asked for each GPU this tick (applied where it differed)."""


def gpu_observation(node: str, reading: GpuReading, job: GpuJob | None, cap_not_binding: bool,
                    host_share_w: float) -> GpuObservation:
    """The tick's view of one GPU as NVML reads it (the simulator builds the same from the inventory)."""
    return GpuObservation(node=node, gpu_index=reading.index, job_class=job.job_class if job else None,
                          constraints=reading.constraints, max_clock_mhz=reading.max_sm_clock_mhz,
                          host_share_w=host_share_w, cap_not_binding=cap_not_binding,
                          job_id=job.job_id if job else None)


class Agent:
    def __init__(self, backend: NvmlBackend, policy: CappingPolicy, classes: ClassSource, journal: Journal,
                 dry_run: bool = False, nonbinding_after_s: float = 60.0,
                 clock: Callable[[], float] = time.monotonic, node: str = "", host_share_w: float = 0.0) -> None:
        """`node`: this node's name (in the actions); `host_share_w`: one GPU's share of the node's idle host
        power from the inventory (`--cluster`), which the efficiency pick counts as the simulator does;
        0 without an inventory (the pick then weighs GPU energy alone, as Zeus does)."""
        self.backend = backend
        self.policy = policy
        self.classes = classes
        self.journal = journal
        self.dry_run = dry_run
        self.nonbinding_after_s = nonbinding_after_s
        self._clock = clock
        self.node = node
        self.host_share_w = host_share_w
        self.gpus: dict[int, GpuControl] = {}
        self.last_readings: list[GpuReading] = []
        self.waiting: WorkWaiting = NOTHING_WAITS
        """The GPU work that waited for capacity at the last tick (caps lift with `relax_when_queued`)."""

    @property
    def relaxed_for_queue(self) -> bool:
        """Whether the last tick lifted a cap because GPU work waited for capacity or the cluster had no slack
        (`relax_when_queued`): on every GPU's job when the per-job verdict is unknown, else on the jobs the
        slack rule names (`WorkWaiting.lifts_cap`)."""
        if not self.policy.relaxes_when_queued:
            return False
        if self.waiting.uncapped is None:
            return self.waiting.lifts_every_cap
        return any(control.job is not None and self.waiting.lifts_cap(control.job.job_id)
                   for control in self.gpus.values())

    # --- life cycle ------------------------------------------------------------------------

    def start(self) -> list[str]:
        """Open NVML, restore what a crashed session left changed, open a journal session."""
        count = self.backend.open()
        if count == 0:
            raise RuntimeError("NVML sees no GPU on this node; refusing to run an agent with nothing to manage")
        restored = self._recover()
        self.journal.append("start", gpus=count, dry_run=self.dry_run, read_only=self.backend.read_only)
        self.gpus = {index: GpuControl() for index in range(count)}
        return restored

    def _recover(self) -> list[str]:
        lines = []
        for touched in self.journal.left_changed():
            if touched.index >= self.backend.gpu_count:
                continue
            reading = self.backend.read(touched.index)
            if reading.uuid != touched.uuid:
                lines.append(f"GPU {touched.index}: journal names {touched.uuid}, found {reading.uuid}; not touched")
                continue
            target_w = touched.original_limit_w or reading.constraints.default_w
            if self.dry_run:
                lines.append(f"GPU {touched.index}: would restore {target_w:g} W after an unclean exit")
                continue
            if abs(reading.limit_w - target_w) > LIMIT_TOLERANCE_W:
                done = self.backend.set_power_limit_w(touched.index, target_w)
                self.journal.append("reset_limit", gpu=touched.index, uuid=reading.uuid, limit_w=done,
                                    previous_w=reading.limit_w, reason="recovery after an unclean exit")
            if touched.clocks_locked:
                self.backend.reset_clocks(touched.index)
                self.journal.append("reset_clocks", gpu=touched.index, uuid=reading.uuid,
                                    reason="recovery after an unclean exit")
            lines.append(f"GPU {touched.index}: restored {target_w:g} W and unlocked clocks after an unclean exit")
        for line in lines:
            log.warning(line)
        return lines

    def stop(self) -> list[str]:
        """Put back every GPU the agent touched, close the journal session and NVML."""
        lines = self.release("agent stopping")
        self.journal.append("stop")
        self.backend.close()
        return lines

    def release(self, reason: str) -> list[str]:
        """Put back every GPU the agent touched (default limits, clocks unlocked); the agent keeps running
        and caps again at the next good tick. Fail safe when the loop cannot tell what runs where."""
        lines = []
        for index, control in self.gpus.items():
            if not control.touched:
                continue
            reading = self.backend.read(index)
            target_w = control.original_limit_w or reading.constraints.default_w
            done = []
            if abs(reading.limit_w - target_w) > LIMIT_TOLERANCE_W:
                set_w = self.backend.set_power_limit_w(index, target_w)
                self.journal.append("reset_limit", gpu=index, uuid=reading.uuid, limit_w=set_w,
                                    previous_w=reading.limit_w, reason=reason)
                done.append(f"limit back to {target_w:g} W")
            if control.locked_clock_mhz is not None:
                self.backend.reset_clocks(index)
                self.journal.append("reset_clocks", gpu=index, uuid=reading.uuid, reason=reason)
                done.append("clocks unlocked")
                control.locked_clock_mhz = None
            if done:
                lines.append(f"GPU {index}: " + ", ".join(done))
            # Forget the job: the next good tick decides afresh (and writes again) from the default limit.
            control.job, control.decision, control.cap_bound, control.busy_samples = None, None, False, 0
            control.cap_not_binding, control.limit_since_s = False, None
        return lines

    # --- one control tick ------------------------------------------------------------------

    def tick(self) -> TickReport:
        report = TickReport()
        now = self._clock()
        readings = [self.backend.read(index) for index in range(self.backend.gpu_count)]
        report.readings = readings
        self.last_readings = readings
        jobs = self.classes.jobs(readings)
        # Work waiting for GPUs anywhere: with relax_when_queued, running jobs go uncapped until it starts.
        self.waiting = self.classes.work_waiting()
        for reading in readings:
            control = self.gpus.setdefault(reading.index, GpuControl())
            job = jobs.get(reading.index)
            if job != control.job:
                # A new job: forget what was learnt about the last one's cap.
                control.job, control.cap_bound, control.busy_samples = job, False, 0
                control.cap_not_binding, control.limit_since_s = False, None
            self._learn_binding(control, reading, now)
            seen = gpu_observation(self.node, reading, job, control.cap_not_binding, self.host_share_w)
            decision = gpu_setting(seen, self.policy, self.waiting)
            report.actions.extend(setting_actions(seen, decision))
            report.changes.extend(self._apply(reading, control, decision, now))
        for line in report.changes:
            log.info(line)
        return report

    def _learn_binding(self, control: GpuControl, reading: GpuReading, now: float) -> None:
        decision = control.decision
        if decision is None or decision.limit_w is None or control.job is None or control.cap_bound:
            return
        if reading.utilization < BUSY_UTILIZATION:
            return
        control.busy_samples += 1
        if cap_binds([reading.power_w], decision.limit_w, reading.sw_power_cap):
            control.cap_bound = True
            return
        since = control.limit_since_s if control.limit_since_s is not None else now
        if now - since >= self.nonbinding_after_s and control.busy_samples >= 3:
            control.cap_not_binding = True

    def _apply(self, reading: GpuReading, control: GpuControl, decision: CapDecision, now: float) -> list[str]:
        changes = []
        index, job = reading.index, control.job
        who = f"job {job.job_id} ({job.job_class})" if job else "idle"
        target_w = decision.limit_w if decision.limit_w is not None else (
            control.original_limit_w if control.original_limit_w is not None else reading.constraints.default_w)
        if abs(reading.limit_w - target_w) > LIMIT_TOLERANCE_W:
            drift = (control.decision is not None and control.decision.limit_w == decision.limit_w
                     and control.touched)
            why = "drift: the limit was changed outside greengpu; " if drift else ""
            if self.dry_run:
                changes.append(f"GPU {index} [{who}]: would set {target_w:g} W (now {reading.limit_w:g} W): "
                               f"{decision.reason}")
            else:
                if control.original_limit_w is None:
                    control.original_limit_w = reading.limit_w
                if not self.backend.read_only:
                    # Journal first: if the agent dies between the write and the journal line, the
                    # next start still knows this GPU was changed.
                    self.journal.append("set_limit", gpu=index, uuid=reading.uuid,
                                        limit_w=reading.constraints.clamp(target_w), previous_w=reading.limit_w,
                                        job=job.job_id if job else None, job_class=job.job_class if job else None,
                                        reason=why + decision.reason)
                done = self.backend.set_power_limit_w(index, target_w)
                if done is not None:
                    control.touched = True
                    changes.append(f"GPU {index} [{who}]: {reading.limit_w:g} W -> {done:g} W: {why}{decision.reason}")
            control.limit_since_s = now
        elif control.limit_since_s is None:
            control.limit_since_s = now
        changes.extend(self._apply_clocks(reading, control, decision, who))
        control.decision = decision
        return changes

    def _apply_clocks(self, reading: GpuReading, control: GpuControl, decision: CapDecision, who: str) -> list[str]:
        index, wanted = reading.index, decision.locked_clock_mhz
        drifted = (wanted is not None and control.locked_clock_mhz == wanted
                   and reading.utilization >= BUSY_UTILIZATION
                   and reading.sm_clock_mhz > wanted * CLOCK_DRIFT_MARGIN)
        if wanted == control.locked_clock_mhz and not drifted:
            return []
        if self.dry_run:
            return [f"GPU {index} [{who}]: would " + (f"lock SM clocks at {wanted} MHz" if wanted else "unlock clocks")]
        if wanted is None:
            if self.backend.reset_clocks(index):
                self.journal.append("reset_clocks", gpu=index, uuid=reading.uuid, reason=decision.reason)
                control.locked_clock_mhz = None
                return [f"GPU {index} [{who}]: clocks unlocked: {decision.reason}"]
            return []
        if self.backend.read_only:
            return []
        # Journal first, as for limits.
        self.journal.append("lock_clocks", gpu=index, uuid=reading.uuid, clock_mhz=wanted,
                            reason=("drift: clocks above the lock; " if drifted else "") + decision.reason)
        if self.backend.lock_clocks_mhz(index, wanted):
            control.locked_clock_mhz = wanted
            control.touched = True
            return [f"GPU {index} [{who}]: SM clocks locked at {wanted} MHz: {decision.reason}"]
        self.journal.append("reset_clocks", gpu=index, uuid=reading.uuid, reason="lock refused")
        return []
