"""Slurm adapter: node states, power_down/power_up and down through `scontrol`. Translates, never decides.

Slurm runs power-save hooks with almost no environment (no PATH), so commands are found by absolute
path: `$GREENGPU_SLURM_BIN` if set, else the usual install locations.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import hostlist

SEARCH_DIRS = ("/usr/bin", "/usr/local/bin", "/opt/slurm/bin", "/usr/sbin")
NOT_UP_FLAGS = frozenset({"POWERED_DOWN", "POWERING_UP", "POWERING_DOWN", "POWER_DOWN", "NOT_RESPONDING",
                          "DOWN", "FAIL", "FUTURE", "REBOOT_ISSUED"})
BUSY_FLAGS = frozenset({"ALLOCATED", "MIXED", "COMPLETING"})


class SlurmError(Exception):
    """A Slurm command failed; the message is Slurm's own last line."""


def command(name: str) -> str:
    """Absolute path of a Slurm command (hooks have no PATH)."""
    configured = os.environ.get("GREENGPU_SLURM_BIN")
    candidates = [Path(configured) / name] if configured else []
    candidates += [Path(d) / name for d in SEARCH_DIRS]
    for candidate in candidates:
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    found = shutil.which(name)
    if found:
        return found
    raise SlurmError(f"{name} not found (looked in {', '.join(str(c.parent) for c in candidates)}); "
                     "set GREENGPU_SLURM_BIN")


BUSY_CONTROLLER_MARKERS = ("Socket timed out on send/recv operation", "Zero Bytes were transmitted or received")
"""Slurm's own words when slurmctld was reached but did not answer within MessageTimeout: a busy controller
(scheduling, requeueing, forking a ResumeProgram), not a dead one, so the command is worth another try. A
controller nobody can connect to ("Unable to contact slurm controller") fails at once instead."""
BUSY_RETRY_DELAYS_S = (1.0, 3.0)
"""Pauses before the second and third try of a command slurmctld was too busy to answer."""


def run(name: str, *args: str, timeout_s: float = 20.0, retry_when_busy: bool = False) -> str:
    """Run a Slurm command and return its output; SlurmError with Slurm's last line when it fails.
    `retry_when_busy`: a busy controller gets two more tries, for a command that is safe to repeat and whose
    caller has the time (each try may take `MessageTimeout`): the hooks and the daemon tick run under time
    budgets of their own (systemd's, Slurm's, the watchdog's) and fail at once, safe side first."""
    delays = BUSY_RETRY_DELAYS_S if retry_when_busy else ()
    for delay_s in (*delays, None):
        try:
            return _run_once(name, args, timeout_s)
        except SlurmError as error:
            if delay_s is None or not any(marker in str(error) for marker in BUSY_CONTROLLER_MARKERS):
                raise
            time.sleep(delay_s)
    raise AssertionError("unreachable: the last try returns or raises")


def _run_once(name: str, args: tuple[str, ...], timeout_s: float) -> str:
    try:
        result = subprocess.run([command(name), *args], capture_output=True, text=True, timeout=timeout_s,
                                check=False)
    except subprocess.TimeoutExpired:
        raise SlurmError(f"{name} {' '.join(args)}: no answer within {timeout_s:g} s (is slurmctld up?)") from None
    except OSError as error:
        raise SlurmError(f"{name}: cannot run: {error}") from None
    if result.returncode != 0:
        lines = (result.stderr or result.stdout).strip().splitlines()
        raise SlurmError(f"{name} {' '.join(args)}: {lines[-1] if lines else f'exit {result.returncode}'}")
    return result.stdout


def json_reply(text: str, what: str) -> dict[str, object]:
    """The document a `--json` command printed. SlurmError when it is not Slurm's JSON or carries errors:
    `squeue --json` and `sinfo --json` exit 0 with an `errors` list and no jobs or nodes when slurmctld
    cannot be reached, which must not read as an empty cluster."""
    try:
        document = json.loads(text)
    except ValueError as error:
        raise SlurmError(f"{what}: not Slurm's JSON: {error}") from None
    if not isinstance(document, dict):
        raise SlurmError(f"{what}: not Slurm's JSON: a {type(document).__name__}, not an object")
    errors = document.get("errors")
    if errors:
        first = errors[0] if isinstance(errors, list) and errors else errors
        if isinstance(first, dict):
            said = first.get("description") or first.get("error") or first
            raise SlurmError(f"{what}: {said} ({first.get('source', 'slurmctld')})")
        raise SlurmError(f"{what}: {first}")
    return document


@dataclass(frozen=True)
class SlurmNode:
    name: str
    flags: frozenset[str]

    @property
    def up(self) -> bool:
        """Registered and responding: work can run there."""
        return not (self.flags & NOT_UP_FLAGS)

    @property
    def busy(self) -> bool:
        return bool(self.flags & BUSY_FLAGS)


def parse_nodes(text: str) -> dict[str, SlurmNode]:
    """`scontrol -o show node` output -> nodes with their state flags (`MIXED+NOT_RESPONDING+POWERING_UP`)."""
    nodes = {}
    for line in text.splitlines():
        fields = dict(part.split("=", 1) for part in line.split() if "=" in part)
        if "NodeName" in fields and "State" in fields:
            nodes[fields["NodeName"]] = SlurmNode(fields["NodeName"], frozenset(fields["State"].split("+")))
    return nodes


def nodes(names: Iterable[str] | None = None) -> dict[str, SlurmNode]:
    args = ["-o", "show", "node"]
    wanted = list(names) if names is not None else None
    if wanted:
        args.append(hostlist.collect_hostlist(wanted))
    return parse_nodes(run("scontrol", *args))


def update_nodes(names: Iterable[str], state: str, reason: str | None = None) -> None:
    """`scontrol update nodename=LIST state=STATE [reason=...]` (power_down, power_up, down, resume)."""
    args = ["update", f"nodename={hostlist.collect_hostlist(list(names))}", f"state={state}"]
    if reason:
        args.append(f"reason={reason}")
    run("scontrol", *args)


RESUME_TIMEOUT_DEFAULT_S = 60.0
"""Slurm's ResumeTimeout when slurm.conf does not set it."""


def resume_timeout_s(conf_text: str) -> float:
    """`ResumeTimeout` from slurm.conf text (keys are case-insensitive; `#` starts a comment)."""
    value = None
    for raw in conf_text.splitlines():
        line = raw.split("#", 1)[0].strip()
        key, sep, rest = line.partition("=")
        if sep and key.strip().lower() == "resumetimeout":
            value = rest.strip()
    if value is None:
        return RESUME_TIMEOUT_DEFAULT_S
    if not value.isdigit():
        raise ValueError(f"ResumeTimeout={value!r} is not a whole number of seconds")
    return float(value)
