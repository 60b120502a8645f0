"""The SuspendProgram's suspend commands, watched to their end, and a failed one undone in Slurm.

Slurm wants its hooks to return at once, so the hook forks one detached watcher: it runs each node's
suspend command (in parallel), reads its exit code and stderr, and acts on them. A node whose command
succeeded stays recorded asleep. A node whose command failed (ssh could not connect: 255; `greengpu
node-suspend` refused because a GPU process runs: 1; a hang) is awake: it is recorded `suspend_failed`,
never asleep, the alert names the exit code and stderr, and the node is returned to service in Slurm.

Returning it: once Slurm's SuspendTimeout has passed Slurm holds the node `IDLE+POWERED_DOWN` while its
slurmd runs, and the next job there would wait out ResumeTimeout and be requeued. `state=resume` is refused
for a powered-down node and `state=power_up` waits for a boot that never comes (both tried against
slurmctld 22.05); what slurmctld accepts is the running slurmd registering again, which `scontrol
reconfigure` makes every slurmd do ("Node X now responding", the node IDLE and schedulable). slurmctld 22.05
ignores such a registration for some seconds after the power-down, so the watcher repeats it until Slurm
reports the node up. A node that never answers within `RETURN_TIMEOUT_S` is most likely asleep or off after
all (a power-off can cut ssh short: 255): it is recorded asleep again and alerted, and Slurm's own resume
path wakes it when a job needs it (DOWN would keep a sleeping node out of service for good).
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor

import hostlist

from greengpu.backends import slurm
from greengpu.control.hooks.sleep_control import SleepControl, SuspendResult, run_suspend

log = logging.getLogger("greengpu.slurm")

RETURN_TIMEOUT_S = 120.0
"""How long a node whose suspend failed may take to be back in service (Slurm's SuspendTimeout, 30 s by
default, comes first) before it is set DOWN instead."""
RECONFIGURE_EVERY_S = 5.0
"""Between two `scontrol reconfigure` (a cluster-wide request: not more often than this)."""
MAX_PARALLEL_SUSPENDS = 16


def fork_watcher(run: Callable[[], object]) -> int:
    """Run `run` in a detached child (new session) and return its pid at once; the child never returns."""
    pid = os.fork()
    if pid:
        return pid
    code = 0
    try:
        os.setsid()  # out of the hook's process group: slurmctld reaping the hook leaves the watcher alone
        run()
    except BaseException:  # noqa: BLE001 - a child must never return into the hook's code
        log.exception("suspend watcher failed")
        code = 1
    finally:
        logging.shutdown()
        os._exit(code)


def watch_suspends(control: SleepControl, template: str, nodes: Sequence[str], timeout_s: float,
                   return_timeout_s: float = RETURN_TIMEOUT_S) -> list[SuspendResult]:
    """Run each node's suspend command, then record and alert every failure and return those nodes to service."""
    workers = max(1, min(MAX_PARALLEL_SUSPENDS, len(nodes)))
    with ThreadPoolExecutor(max_workers=workers) as pool:
        results = list(pool.map(lambda node: run_suspend(template, node, timeout_s), nodes))
    failed = []
    for result in results:
        if result.ok:
            log.info("%s", result.describe())
        else:
            control.suspend_failed(result)
            failed.append(result)
    if failed:
        return_to_service({r.node: r.describe() for r in failed}, control, return_timeout_s)
    return results


def return_to_service(causes: dict[str, str], control: SleepControl, timeout_s: float = RETURN_TIMEOUT_S,
                      wait: Callable[[float], None] = time.sleep,
                      monotonic: Callable[[], float] = time.monotonic) -> list[str]:
    """Bring nodes whose suspend failed (still awake, slurmd running) back into service; returns those that never
    answered (recorded asleep again: see the loop's end)."""
    pending = set(causes)
    deadline = monotonic() + timeout_s
    last_reconfigure = float("-inf")
    while pending and monotonic() < deadline:
        try:
            states = slurm.nodes(sorted(pending))
        except slurm.SlurmError as error:
            log.warning("cannot read node states to return %s to service: %s", hostlist.collect_hostlist(
                sorted(pending)), error)
            states = {}
        for node in sorted(pending):
            if node in states and states[node].up:
                pending.discard(node)
                log.info("%s: back in service in Slurm after its failed suspend", node)
                control.store.add_event(control.clock(), node, "returned", f"{node}: back in service in Slurm")
        settled = [n for n in pending if n in states and "POWERING_DOWN" not in states[n].flags]
        if settled and monotonic() - last_reconfigure >= RECONFIGURE_EVERY_S:
            try:
                slurm.run("scontrol", "reconfigure")  # every running slurmd registers again
            except slurm.SlurmError as error:
                log.warning("scontrol reconfigure failed: %s", error)
            last_reconfigure = monotonic()
        if pending:
            wait(1.0)
    for node in sorted(pending):
        # The running slurmd of an awake node answered the reconfigure within seconds in every try; one that
        # never did is most likely asleep or off after all (a power-off can cut ssh before its exit status
        # arrives: 255). Setting it DOWN would keep it out of service for good; recorded asleep, Slurm's own
        # resume path (ResumeProgram, wake-up verification, ResumeTimeout) takes it from here.
        message = (f"{node}: suspend command failed but the node did not answer Slurm within {timeout_s:g} s: "
                   f"treated as asleep, Slurm resumes it when needed ({causes[node]})")
        control.store.record_suspend(node, control.clock(), message)
        control.alerts.append(message)
        log.error("ALERT %s", message)
    return sorted(pending)
