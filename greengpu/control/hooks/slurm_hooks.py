"""`greengpu slurm ...`: Slurm's SuspendProgram and ResumeProgram, and greengpu driving Slurm's power saving.

Hooks run as SlurmUser with one argument (a hostlist), no PATH, stdin from /dev/null and stdout and
stderr closed; Slurm only logs their exit code, and they must return fast. So: log to a file (every
decision and every refusal: nobody reads their stderr), send the wake-up or start the suspend command
detached, persist what was done, exit.

Slurm's resume contract: after a power-up request slurmctld accepts a node only when its slurmd
registers with a boot time later than the request, within `ResumeTimeout`; otherwise the node is set
DOWN and its jobs are requeued. A powered-off node boots, so that holds. A node suspended to RAM keeps
its boot time: deploy/slurm/greengpu-slurmd-sleep-hook restarts slurmd after the resume telling it to
report a fresh boot (`slurmd -b`). The default suspend command therefore powers the node off
(docs/SLEEP.md says why).
"""

from __future__ import annotations

import json
import logging
import os
import sqlite3
import subprocess
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import hostlist

from greengpu.backends import slurm
from greengpu.backends.slurm_config import read_exclusions
from greengpu.backends.wol import Waker
from greengpu.control.hooks.sleep_control import SUSPEND_TIMEOUT_S, SleepControl
from greengpu.control.hooks.slurm_suspend import fork_watcher, watch_suspends
from greengpu.control.hooks.state_store import StateStore
from greengpu.control.log_setup import greengpu_handlers, install_handler
from greengpu.errors import BadInput
from greengpu.model import Cluster
from greengpu.policy import SleepPolicy
from greengpu.sleep.wake_verify import WakeEvent

log = logging.getLogger("greengpu.slurm")

# Power-off by default: it needs nothing on the node for Slurm's resume contract (a boot is a boot).
DEFAULT_SUSPEND_COMMAND = ("ssh -o BatchMode=yes -o ConnectTimeout=10 {node} /usr/local/bin/greengpu node-suspend "
                           "--command 'systemctl poweroff'")


@dataclass(frozen=True)
class HookContext:
    cluster: Cluster
    store_path: str
    policy: SleepPolicy
    suspend_command: str
    ipmi_command: str | None
    suspend_timeout_s: float = SUSPEND_TIMEOUT_S


class HookFailure(Exception):
    """A runtime failure of a `greengpu slurm` command (Slurm or the state file unreachable): exit 1."""


@contextmanager
def logged_outcome(what: str, logger: logging.Logger = log) -> Iterator[None]:
    """Every refusal and failure also goes to the log (Slurm discards the hooks' stderr).

    Bad input stays `BadInput` (exit 2); Slurm, state-file and OS failures become `HookFailure`
    (one line, exit 1). Without a log file the log is stderr, where the command's own line says it:
    the log then gets nothing, so stderr holds that one line.
    """
    to_file = any(isinstance(h, logging.FileHandler) for h in greengpu_handlers())
    try:
        yield
    except BadInput as error:
        if to_file:
            logger.error("%s refused: %s", what, error)
        raise
    except (slurm.SlurmError, sqlite3.Error, OSError, subprocess.SubprocessError) as error:
        if to_file:
            logger.error("%s failed: %s", what, error)
        raise HookFailure(f"{what.removeprefix('greengpu ')}: {error}") from None


def setup_logging(log_file: str | None) -> None:
    """Log to `log_file` (hooks have no stderr); to stderr when there is one and no file is given.

    The handler is greengpu's one on the root logger (greengpu.control.log_setup): set up again, it is replaced,
    never stacked."""
    handler: logging.Handler
    if log_file:
        Path(log_file).parent.mkdir(parents=True, exist_ok=True)
        handler = logging.FileHandler(log_file)
    elif sys.stderr is not None:
        handler = logging.StreamHandler(sys.stderr)
    else:
        handler = logging.NullHandler()
    install_handler(handler, logging.INFO, "%(asctime)s greengpu[%(process)d] %(message)s")


def expand(expression: str, cluster: Cluster) -> list[str]:
    """Hostlist -> node names, each of which must be in the inventory."""
    try:
        names: list[str] = hostlist.expand_hostlist(expression)
    except hostlist.BadHostlist as error:
        raise BadInput(f"bad hostlist {expression!r}: {error}") from None
    known = {node.name for node in cluster.nodes}
    unknown = [n for n in names if n not in known]
    if unknown:
        raise BadInput(f"{hostlist.collect_hostlist(unknown)}: not in the inventory")
    return names


def control(context: HookContext) -> SleepControl:
    return SleepControl(StateStore(context.store_path), Waker(context.cluster, context.ipmi_command), context.policy)


def suspend(context: HookContext, expression: str) -> int:
    """SuspendProgram: record why each node sleeps, start a detached watcher of the suspend commands, return.

    The watcher (`greengpu.control.hooks.slurm_suspend`) reads each command's exit code: a failed suspend is
    recorded and alerted with its real cause and the node is returned to service in Slurm.

    Nothing is suspended unless Slurm itself confirms the nodes are idle: when `scontrol` fails the
    hook refuses (a node greengpu cannot see stays awake). Slurm counts a refused node as powered
    down all the same; its next resume then ends in Slurm's own ResumeTimeout path (DOWN, jobs
    requeued, ResumeFailProgram alerts), which is safe, where suspending a busy node is not.
    """
    names = expand(expression, context.cluster)
    log.info("SuspendProgram called for %s", hostlist.collect_hostlist(names))
    try:
        states = slurm.nodes(names)
    except slurm.SlurmError as error:
        log.error("refusing to suspend %s: cannot read their states from Slurm (%s)",
                  hostlist.collect_hostlist(names), error)
        control(context).refused(names, f"cannot read node states: {error}")
        return 1
    busy = [n for n in names if n in states and states[n].busy]
    unknown = [n for n in names if n not in states]
    if busy:
        log.error("refusing to suspend %s: jobs are running there", hostlist.collect_hostlist(busy))
        control(context).refused(busy, "jobs are running there")
    if unknown:
        log.error("refusing to suspend %s: Slurm does not know them", hostlist.collect_hostlist(unknown))
        control(context).refused(unknown, "unknown to Slurm")
    chosen = [n for n in names if n not in busy and n not in unknown]
    control(context).suspended(chosen, "Slurm SuspendProgram (power saving)")
    if chosen:
        template = context.suspend_command
        pid = fork_watcher(lambda: watch_suspends(control(context), template, chosen, context.suspend_timeout_s))
        log.info("%s: suspend commands started (watcher pid %d): %s", hostlist.collect_hostlist(chosen), pid,
                 template)
    return 1 if busy or unknown else 0


def resume(context: HookContext, expression: str, resume_file: str | None) -> int:
    """ResumeProgram: send the wake-ups (verification continues in `greengpu slurm verify`), return."""
    names = expand(expression, context.cluster)
    reason = "Slurm ResumeProgram"
    jobs = _resume_jobs(resume_file)
    if jobs:
        reason += f" for job{'s' if len(jobs) > 1 else ''} {', '.join(jobs)}"
    log.info("%s: %s", reason, hostlist.collect_hostlist(names))
    events = control(context).wake(names, reason)
    return 1 if any(e.kind == "send_failed" for e in events) else 0


def resume_failed(context: HookContext, expression: str) -> list[str]:
    """ResumeFailProgram: Slurm gave up on these nodes (not up by ResumeTimeout; it set them DOWN and
    requeued their jobs). Close greengpu's wake-ups as failed and raise the alert."""
    names = expand(expression, context.cluster)
    return control(context).failed(names, "Slurm ResumeFailProgram: not registered by ResumeTimeout")


def _resume_jobs(resume_file: str | None) -> list[str]:
    """Job ids from SLURM_RESUME_FILE (`{"jobs": [{"job_id": 2, "nodes": "node[1-2]"}], ...}`)."""
    if not resume_file:
        return []
    try:
        document = json.loads(Path(resume_file).read_text())
        return [str(job["job_id"]) for job in document.get("jobs", [])]
    except (OSError, ValueError, KeyError, TypeError) as error:
        log.warning("SLURM_RESUME_FILE %s unreadable: %s", resume_file, error)
        return []


def verify(context: HookContext) -> list[str]:
    """One verification pass, as lines for people (`verify_events`)."""
    return [e.message for e in verify_events(context)]


def verify_events(context: HookContext) -> list[WakeEvent]:
    """One verification pass: Slurm says which nodes are up; retries go out; failed nodes are set DOWN."""
    sleep_control = control(context)
    tracked = [t.node for t in sleep_control.store.open_tracks()]
    states = slurm.nodes(tracked) if tracked else {}
    events = sleep_control.verify(name for name, node in states.items() if node.up)
    failed = [e.node for e in events if e.kind == "failed"]
    if failed:
        # Slurm then requeues their jobs elsewhere and stops scheduling there.
        slurm.update_nodes(failed, "down", reason="greengpu: did not wake")
    return list(events)


def power_down(cluster: Cluster, expression: str) -> list[str]:
    """greengpu's planner asks Slurm to power nodes down (Slurm then runs the SuspendProgram)."""
    names = expand(expression, cluster)
    states = slurm.nodes(names)
    busy = sorted(n for n, s in states.items() if s.busy)
    if busy:
        raise BadInput(f"{hostlist.collect_hostlist(busy)}: jobs are running there; a busy node is never "
                       "powered down")
    # Slurm's own exclusions: a node it keeps out of power saving is never powered down by greengpu either.
    exclusions = read_exclusions()
    if exclusions.sets or exclusions.partitions:
        counted = any(count is not None for _, count in exclusions.sets)
        up = {n for n, s in (slurm.nodes() if counted else states).items() if s.up and not s.busy}
        refused = sorted(set(names) - set(exclusions.may_suspend(names, up)))
        if refused:
            raise BadInput(f"{hostlist.collect_hostlist(refused)}: Slurm keeps them out of power saving "
                           "(SuspendExcNodes/SuspendExcParts in scontrol show config); not powered down")
    slurm.update_nodes(names, "power_down")
    return names


def power_up(cluster: Cluster, expression: str) -> list[str]:
    names = expand(expression, cluster)
    slurm.update_nodes(names, "power_up")
    return names


def resume_file_from_env() -> str | None:
    return os.environ.get("SLURM_RESUME_FILE")


def status_rows(store_path: str) -> Sequence[tuple[str, str, float, str]]:
    return [(r.node, r.state, r.since_s, r.reason) for r in StateStore(store_path).records()]


def status_text(rows: Sequence[tuple[str, str, float, str]], now_s: float) -> list[str]:
    """`greengpu slurm status` for people: UTC times and ages, and a plain line when there is nothing."""
    if not rows:
        return ["no node put to sleep or being woken by greengpu"]
    lines = []
    for node, state, since_s, reason in rows:
        when = datetime.fromtimestamp(since_s, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
        lines.append(f"{node:16s} {state:8s} since {when} ({_age(now_s - since_s)} ago)  {reason}")
    return lines


def _age(seconds: float) -> str:
    seconds = max(0.0, seconds)
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    if seconds < 172800:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} d"
