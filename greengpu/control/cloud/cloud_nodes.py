"""`greengpu cloud resume|suspend|resume-failed`: Slurm cloud nodes launched and released through each pool's
provider commands (docs/SPOT-LIVE.md).

A cloud pool's nodes are Slurm nodes with `State=CLOUD` and a feature (`spot` or `on-demand`) that jobs ask
for (`sbatch --constraint=spot`). When Slurm schedules a job on one it runs the ResumeProgram: for each node
this runs the pool's `launch_command` (no shell, a timeout, the exit code checked), reads the new instance's
address from the last line it prints (`ADDRESS` or `ADDRESS HOSTNAME`) and tells Slurm with
`scontrol update nodename=NODE nodeaddr=ADDRESS [nodehostname=HOSTNAME]`, as Slurm's cloud documentation
asks; the instance's slurmd then registers. When the node has been idle for `SuspendTime`, the
SuspendProgram runs the pool's `release_command`. Every launch and release goes to the audit log (JSON
lines, as the daemon's actions) and the hook log.

Slurm has one ResumeProgram and one SuspendProgram for all nodes: names that are not cloud nodes are
handed, as one hostlist, to the program given with `--others` (the on-premises hook, deploy/slurm).

Failures, safe side first:
- a launch that fails (exit code, timeout, no address) is followed by the pool's release (a half-created
  instance must not keep billing) and `state=POWER_DOWN_FORCE` with a reason: Slurm requeues the job at
  once and the node goes back to the pool for a later try; an ALERT is raised;
- a release that fails raises an ALERT (an instance may still be billing) and exits 1;
- a node Slurm reports busy, or whose state Slurm cannot give, is not released (its jobs come first).
"""

from __future__ import annotations

import ipaddress
import json
import logging
import re
import subprocess
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import hostlist

from greengpu.backends import slurm
from greengpu.config.cloud_pools import CloudPool
from greengpu.control.daemon.audit import Alerts, AuditLog
from greengpu.errors import BadInput

log = logging.getLogger("greengpu.cloud")

MAX_PARALLEL_LAUNCHES = 16
"""Launches run side by side (each takes minutes at a provider); more nodes wait their turn."""
OTHERS_TIMEOUT_S = 120.0
"""How long the on-premises hook may take with the names that are not cloud nodes (it returns at once)."""
_HOST_RE = re.compile(r"^(?=.{1,253}$)[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
                      r"(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*\.?$")


@dataclass(frozen=True)
class CloudContext:
    pools: dict[str, CloudPool]
    audit: AuditLog
    alerts: Alerts
    others_program: str | None = None
    clock: Callable[[], float] = time.time


@dataclass(frozen=True)
class ProviderAnswer:
    """What one provider command did: whether it succeeded, its argv, its last output line or the failure."""

    ok: bool
    argv: tuple[str, ...]
    last_line: str
    message: str


def node_pools(pools: dict[str, CloudPool]) -> dict[str, CloudPool]:
    """Cloud node name -> its pool."""
    return {name: pool for pool in pools.values() for name in pool.node_names}


def split_names(expression: str, pools: dict[str, CloudPool]) -> tuple[list[str], list[str]]:
    """A hostlist -> (cloud node names, the other names), each in the hostlist's order."""
    try:
        names: list[str] = hostlist.expand_hostlist(expression)
    except hostlist.BadHostlist as error:
        raise BadInput(f"bad hostlist {expression!r}: {error}") from None
    if not names:
        raise BadInput(f"hostlist {expression!r} names no node")
    cloud = node_pools(pools)
    return [n for n in names if n in cloud], [n for n in names if n not in cloud]


def command_argv(template: Sequence[str], node: str, pool: CloudPool) -> list[str]:
    """The template's words with the placeholders filled in (one word stays one argument: no shell)."""
    values = {"node": node, "pool": pool.name, "instance_type": pool.instance_type, "region": pool.region,
              "zone": pool.zone}
    return [word.format(**values) for word in template]


def run_provider(argv: Sequence[str], timeout_s: float) -> ProviderAnswer:
    """Run one provider command without a shell; its exit code decides; stderr's last line says why not."""
    words = tuple(argv)
    try:
        result = subprocess.run(words, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout_s,
                                check=False)
    except subprocess.TimeoutExpired:
        return ProviderAnswer(False, words, "", f"no answer within {timeout_s:g} s (killed)")
    except OSError as error:
        return ProviderAnswer(False, words, "", f"cannot run {words[0]}: {error.strerror or error}")
    lines = [line.strip() for line in result.stdout.splitlines() if line.strip()]
    if result.returncode != 0:
        why = [line.strip() for line in (result.stderr or result.stdout).splitlines() if line.strip()]
        return ProviderAnswer(False, words, "", f"exit {result.returncode}" + (f": {why[-1]}" if why else ""))
    return ProviderAnswer(True, words, lines[-1] if lines else "", "exit 0")


def parse_address(line: str) -> tuple[str, str | None]:
    """`ADDRESS [HOSTNAME]` printed by a launch command; ValueError when it is not an address (and host name)."""
    words = line.split()
    if not 1 <= len(words) <= 2:
        raise ValueError(f"expected 'ADDRESS [HOSTNAME]' as the last line, got {line[:80]!r}")
    for word in words:
        if not _is_host(word):
            raise ValueError(f"{word[:80]!r} is not an IP address or host name")
    return words[0], words[1] if len(words) == 2 else None


def _is_host(word: str) -> bool:
    try:
        ipaddress.ip_address(word)
        return True
    except ValueError:
        return bool(_HOST_RE.match(word))


def _record(context: CloudContext, kind: str, node: str, pool: CloudPool, rule: str, outcome: str, detail: str,
            argv: Sequence[str], jobs: Sequence[str] = (), **extra: str) -> None:
    """One audit line, with the fields the daemon's action lines have, plus the pool's."""
    context.audit.write({"time_s": context.clock(), "kind": kind, "node": node, "gpu": None,
                         "job": ",".join(jobs) or None, "tenant": None, "rule": rule, "outcome": outcome,
                         "detail": detail, "pool": pool.name, "capacity": "spot" if pool.spot else "on-demand",
                         "instance_type": pool.instance_type, "region": pool.region, "zone": pool.zone,
                         "argv": list(argv), **extra})


def _forward_others(context: CloudContext, others: list[str], hook: str) -> int:
    """Hand the names that are not cloud nodes to the on-premises program; without one they are bad input."""
    if not others:
        return 0
    listed = hostlist.collect_hostlist(others)
    if context.others_program is None:
        raise BadInput(f"{listed}: not cloud nodes of any pool (give --others PROGRAM for the other nodes)")
    log.info("%s: %s handed to %s", hook, listed, context.others_program)
    answer = run_provider([context.others_program, listed], OTHERS_TIMEOUT_S)
    if not answer.ok:
        log.error("%s: %s for %s failed: %s", hook, context.others_program, listed, answer.message)
        return 1
    return 0


def _checked(context: CloudContext, names: list[str], key: str) -> None:
    """Refuse (bad input: nothing runs) names of a pool that has no command for this step."""
    pools = node_pools(context.pools)
    missing = sorted({pools[n].name for n in names if not getattr(pools[n], key)})
    if missing:
        raise BadInput(f"pool {missing[0]} has no {key} in the inventory: its nodes cannot be "
                       f"{'launched' if key == 'launch_command' else 'released'}")


def jobs_by_node(resume_file: str | None) -> dict[str, list[str]]:
    """Node -> the job ids it is resumed for, from SLURM_RESUME_FILE (`{"jobs": [{"job_id": 2, "nodes":
    "spot[1-2]"}, ...]}`); empty when there is none or it cannot be read (the launch goes on: it is only
    for the audit)."""
    if not resume_file:
        return {}
    try:
        document = json.loads(Path(resume_file).read_text())
        by_node: dict[str, list[str]] = {}
        for job in document.get("jobs", []):
            for node in hostlist.expand_hostlist(str(job.get("nodes", ""))):
                by_node.setdefault(node, []).append(str(job["job_id"]))
        return by_node
    except (OSError, ValueError, KeyError, TypeError, AttributeError, hostlist.BadHostlist) as error:
        log.warning("SLURM_RESUME_FILE %s unreadable: %s", resume_file, error)
        return {}


def resume(context: CloudContext, expression: str, jobs: dict[str, list[str]] | None = None) -> int:
    """ResumeProgram: launch each cloud node's instance and give Slurm its address; others to `--others`.
    `jobs`: node -> the jobs it is resumed for (jobs_by_node), for the log and the audit."""
    jobs = jobs or {}
    cloud, others = split_names(expression, context.pools)
    _checked(context, cloud, "launch_command")
    code = _forward_others(context, others, "resume")
    if not cloud:
        return code
    wanted = sorted({job for node in cloud for job in jobs.get(node, [])}, key=lambda j: (len(j), j))
    log.info("Slurm ResumeProgram%s: launching %s", f" for jobs {', '.join(wanted)}" if wanted else "",
             hostlist.collect_hostlist(cloud))
    with ThreadPoolExecutor(max_workers=min(MAX_PARALLEL_LAUNCHES, len(cloud))) as pool:
        results = list(pool.map(lambda node: _launch(context, node, jobs.get(node, [])), cloud))
    return max(code, *(0 if ok else 1 for ok in results))


def _launch(context: CloudContext, node: str, jobs: Sequence[str]) -> bool:
    pool = node_pools(context.pools)[node]
    argv = command_argv(pool.launch_command, node, pool)
    answer = run_provider(argv, pool.command_timeout_s)
    address: tuple[str, str | None] | None = None
    message = answer.message
    if answer.ok:
        try:
            address = parse_address(answer.last_line)
        except ValueError as error:
            message = f"launched, but no address: {error}"
    if address is not None:
        try:
            updates = [f"nodeaddr={address[0]}"] + ([f"nodehostname={address[1]}"] if address[1] else [])
            # The instance is up and billing: a busy slurmctld's late answer is worth two more tries before
            # it is released again (setting an address twice is harmless; the ResumeProgram has minutes).
            slurm.run("scontrol", "update", f"nodename={node}", *updates, retry_when_busy=True)
        except slurm.SlurmError as error:
            message = f"launched at {address[0]}, but Slurm was not told: {error}"
            address = None
    if address is not None:
        log.info("%s: %s instance %s launched at %s (%s)", node, pool.name, pool.instance_type, address[0],
                 " ".join(argv))
        _record(context, "cloud_launch", node, pool, "Slurm ResumeProgram", "done", f"address {address[0]}", argv,
                jobs, address=address[0])
        return True
    log.error("%s: launch of %s failed: %s (%s)", node, pool.name, message, " ".join(argv))
    _record(context, "cloud_launch", node, pool, "Slurm ResumeProgram", "failed", message, argv, jobs)
    if pool.release_command:
        _release(context, node, "launch failed")
    try:
        slurm.update_nodes([node], "power_down_force", reason=f"greengpu: launch failed: {message}"[:200])
    except slurm.SlurmError as error:
        log.error("%s: could not give the node back to Slurm's pool: %s", node, error)
    context.alerts.raise_alert("cloud_launch_failed", f"{node}: launch of {pool.name} ({pool.instance_type}) "
                               f"failed: {message}", context.clock(), node=node, pool=pool.name)
    return False


def _release(context: CloudContext, node: str, rule: str) -> bool:
    pool = node_pools(context.pools)[node]
    argv = command_argv(pool.release_command, node, pool)
    answer = run_provider(argv, pool.command_timeout_s)
    if answer.ok:
        log.info("%s: %s instance released (%s)", node, pool.name, " ".join(argv))
        _record(context, "cloud_release", node, pool, rule, "done", answer.message, argv)
        return True
    log.error("%s: release of %s failed: %s (%s)", node, pool.name, answer.message, " ".join(argv))
    _record(context, "cloud_release", node, pool, rule, "failed", answer.message, argv)
    context.alerts.raise_alert("cloud_release_failed", f"{node}: release of {pool.name} ({pool.instance_type}) "
                               f"failed, the instance may still be billing: {answer.message}", context.clock(),
                               node=node, pool=pool.name)
    return False


def suspend(context: CloudContext, expression: str) -> int:
    """SuspendProgram: release each idle cloud node's instance; others to `--others`.

    A node Slurm reports busy is refused (its jobs come first), and so is everything when Slurm cannot
    be asked: an instance left running costs money, a released busy node costs work.
    """
    cloud, others = split_names(expression, context.pools)
    _checked(context, cloud, "release_command")
    code = _forward_others(context, others, "suspend")
    if not cloud:
        return code
    listed = hostlist.collect_hostlist(cloud)
    log.info("Slurm SuspendProgram: releasing %s", listed)
    try:
        states = slurm.nodes(cloud)
    except slurm.SlurmError as error:
        log.error("refusing to release %s: cannot read their states from Slurm (%s)", listed, error)
        context.alerts.raise_alert("cloud_release_refused", f"{listed}: not released, Slurm cannot be asked: {error}",
                                   context.clock())
        return 1
    refused = [n for n in cloud if n not in states or states[n].busy]
    for node in refused:
        reason = "jobs are running there" if node in states else "unknown to Slurm"
        log.error("%s: refusing to release: %s", node, reason)
        pool = node_pools(context.pools)[node]
        _record(context, "cloud_release", node, pool, "Slurm SuspendProgram", "refused", reason, ())
    released = [_release(context, node, "Slurm SuspendProgram") for node in cloud if node not in refused]
    return 1 if code or refused or not all(released) else 0


def resume_failed(context: CloudContext, expression: str) -> int:
    """ResumeFailProgram: Slurm gave up on these nodes (no registration by ResumeTimeout; it set them DOWN and
    requeued their jobs). A cloud node's instance is released, so a launch that never came up stops billing."""
    cloud, others = split_names(expression, context.pools)
    code = _forward_others(context, others, "resume-failed")
    results = []
    for node in cloud:
        pool = node_pools(context.pools)[node]
        context.alerts.raise_alert("cloud_resume_failed", f"{node}: {pool.name} instance did not register with "
                                   "Slurm by ResumeTimeout; releasing it", context.clock(), node=node, pool=pool.name)
        results.append(_release(context, node, "Slurm ResumeFailProgram") if pool.release_command else True)
    return 1 if code or not all(results) else 0
