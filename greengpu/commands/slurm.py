"""`greengpu slurm`: Slurm power-saving hooks and scontrol helpers."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

import click

from greengpu.commands.common import HelpFirstGroup, echo_events, echo_lines
from greengpu.localtime import DAY_S  # the ceiling of interval and timeout flags (longer: a typo, or a timer overflow)

if TYPE_CHECKING:
    from greengpu.control.hooks.slurm_hooks import HookContext


@click.group(cls=HelpFirstGroup)
@click.option("--cluster", "cluster_file", default="/etc/greengpu/cluster.yaml", show_default=True, metavar="FILE",
              help="Cluster inventory (MACs and wake targets of the nodes).")
@click.option("--state", "state_file", default="/var/lib/greengpu/state.db", show_default=True, metavar="FILE",
              help="SQLite state: which nodes greengpu put to sleep, and wake-ups under verification.")
@click.option("--policy", "policy_name", default="default", show_default=True, metavar="P",
              help="Policy whose sleep section gives wake timeout, retries and backoff.")
@click.option("--suspend-command", default=None, metavar="TEMPLATE",
              help="Run per node to suspend it ({node} is replaced). Default: ssh NODE greengpu node-suspend "
              "--command 'systemctl poweroff' (docs/SLEEP.md: why power-off).")
@click.option("--suspend-timeout", "suspend_timeout_s", type=click.FloatRange(min=1, max=DAY_S), default=120,
              show_default=True, metavar="SECONDS",
              help="A suspend command not finished by then counts as failed (the node stays awake and is returned "
              "to service).")
@click.option("--ipmi-command", default=None, metavar="TEMPLATE",
              help="Power on nodes with an ipmi_host this way ({node}, {ipmi_host}), e.g. "
              "'ipmitool -I lanplus -H {ipmi_host} -U admin -E chassis power on'.")
@click.option("--log", "log_file", default=None, metavar="FILE",
              help="Log here (Slurm closes the hooks' stdout and stderr).")
@click.pass_context
def slurm(ctx: click.Context, cluster_file: str, state_file: str, policy_name: str, suspend_command: str | None,
          suspend_timeout_s: float, ipmi_command: str | None, log_file: str | None) -> None:
    """Slurm power saving: SuspendProgram and ResumeProgram hooks, and greengpu driving scontrol.

    In slurm.conf (see deploy/slurm/): SuspendProgram and ResumeProgram point at wrappers that run
    `greengpu slurm suspend` and `greengpu slurm resume` with one hostlist argument.
    """
    from greengpu.config.inventory import load_cluster
    from greengpu.config.policy import load_policy
    from greengpu.control.hooks.slurm_hooks import DEFAULT_SUSPEND_COMMAND, HookContext, setup_logging

    try:
        setup_logging(log_file)
    except OSError as error:
        raise click.ClickException(f"greengpu slurm: cannot open the log {log_file}: {error}") from None
    with _slurm_step(ctx.invoked_subcommand or ""):
        ctx.obj = HookContext(cluster=load_cluster(cluster_file), store_path=state_file,
                              policy=load_policy(policy_name).sleep,
                              suspend_command=suspend_command or DEFAULT_SUSPEND_COMMAND, ipmi_command=ipmi_command,
                              suspend_timeout_s=suspend_timeout_s)


@contextmanager
def _slurm_step(name: str) -> Iterator[None]:
    """Refusals and failures of `greengpu slurm NAME` go to its log too; a runtime failure is one line, exit 1."""
    from greengpu.control.hooks.slurm_hooks import HookFailure, logged_outcome

    try:
        with logged_outcome(f"greengpu slurm {name}".strip()):
            yield
    except HookFailure as error:
        raise click.ClickException(str(error)) from None


@slurm.command("suspend")
@click.argument("hostlist")
@click.pass_obj
def slurm_suspend(context: HookContext, hostlist: str) -> None:
    """SuspendProgram: record why each node sleeps and start its suspend command (detached).

    Refuses (exit 1, logged) nodes Slurm reports busy, and everything when scontrol fails.
    """
    from greengpu.control.hooks.slurm_hooks import suspend

    with _slurm_step("suspend"):
        code = suspend(context, hostlist)
    if code:
        click.echo(f"greengpu slurm suspend: refused some of {hostlist} (the log says which and why)", err=True)
        raise click.exceptions.Exit(code)


@slurm.command("resume")
@click.argument("hostlist")
@click.pass_obj
def slurm_resume(context: HookContext, hostlist: str) -> None:
    """ResumeProgram: send wake-on-LAN (or IPMI power-on) to each node; `verify` follows them up."""
    from greengpu.control.hooks.slurm_hooks import resume, resume_file_from_env

    with _slurm_step("resume"):
        code = resume(context, hostlist, resume_file_from_env())
    if code:
        raise click.exceptions.Exit(code)


@slurm.command("resume-failed")
@click.argument("hostlist")
@click.option("--json", "as_json", is_flag=True, help="One JSON array of the alerts raised (strings).")
@click.pass_obj
def slurm_resume_failed(context: HookContext, hostlist: str, as_json: bool) -> None:
    """ResumeFailProgram: Slurm gave up on these nodes; close their wake-ups as failed and log an ALERT."""
    from greengpu.control.hooks.slurm_hooks import resume_failed

    with _slurm_step("resume-failed"):
        lines = resume_failed(context, hostlist)
    echo_lines(lines, as_json)


@slurm.command("verify")
@click.option("--json", "as_json", is_flag=True, help="One JSON array: node, event (send, up, timeout, failed), "
              "message.")
@click.pass_obj
def slurm_verify(context: HookContext, as_json: bool) -> None:
    """One verification pass: nodes up are done; late ones get another wake-up; failed ones go DOWN."""
    from greengpu.control.hooks.slurm_hooks import verify_events

    with _slurm_step("verify"):
        events = verify_events(context)
    echo_events(events, as_json)


@slurm.command("power-down")
@click.argument("hostlist")
@click.pass_obj
def slurm_power_down(context: HookContext, hostlist: str) -> None:
    """Ask Slurm to power idle nodes down now (greengpu's planner deciding, not SuspendTime)."""
    from greengpu.control.hooks.slurm_hooks import power_down

    with _slurm_step("power-down"):
        power_down(context.cluster, hostlist)


@slurm.command("power-up")
@click.argument("hostlist")
@click.pass_obj
def slurm_power_up(context: HookContext, hostlist: str) -> None:
    """Ask Slurm to power nodes up now (it runs the ResumeProgram)."""
    from greengpu.control.hooks.slurm_hooks import power_up

    with _slurm_step("power-up"):
        power_up(context.cluster, hostlist)


@slurm.command("status")
@click.option("--json", "as_json", is_flag=True, help="One JSON array: node, state, since_s (epoch), reason.")
@click.pass_obj
def slurm_status(context: HookContext, as_json: bool) -> None:
    """Nodes greengpu put to sleep or is waking, with why and since when (UTC)."""
    import time

    from greengpu.control.hooks.slurm_hooks import status_rows, status_text

    with _slurm_step("status"):
        rows = status_rows(context.store_path)
    if as_json:
        click.echo(json.dumps([dict(zip(("node", "state", "since_s", "reason"), row, strict=True)) for row in rows]))
        return
    for line in status_text(rows, time.time()):
        click.echo(line)
