"""`greengpu cloud`: Slurm's ResumeProgram and SuspendProgram for cloud nodes (docs/SPOT-LIVE.md)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import click

from greengpu.commands.common import HelpFirstGroup


@click.group(cls=HelpFirstGroup)
@click.option("--cluster", "cluster_file", default="/etc/greengpu/cluster.yaml", show_default=True, metavar="FILE",
              help="Cluster inventory: the cloud pools, their Slurm node names and launch and release commands.")
@click.option("--audit", "audit_file", default="/var/lib/greengpu/cloud-audit.jsonl", show_default=True,
              metavar="FILE", help="Audit log (JSON lines): every launch and release, with its outcome.")
@click.option("--others", "others_program", default=None, metavar="PROGRAM",
              help="Hand names that are not cloud nodes to this program, as one hostlist argument (the "
              "on-premises hook, e.g. /usr/local/sbin/greengpu-slurm-resume). Without it they are refused.")
@click.option("--alert-webhook", default=None, metavar="URL", help="POST alerts (failed launch or release) here.")
@click.option("--log", "log_file", default=None, metavar="FILE",
              help="Log here (Slurm closes the hooks' stdout and stderr).")
@click.pass_context
def cloud(ctx: click.Context, cluster_file: str, audit_file: str, others_program: str | None,
          alert_webhook: str | None, log_file: str | None) -> None:
    """Cloud pools as Slurm cloud nodes: launch and release their instances through each pool's commands.

    In slurm.conf (deploy/slurm/slurm.conf.greengpu-cloud): ResumeProgram, SuspendProgram and
    ResumeFailProgram point at wrappers that run `greengpu cloud resume|suspend|resume-failed HOSTLIST`.
    """
    from greengpu.config.inventory import load_cloud_pools
    from greengpu.control.cloud.cloud_nodes import CloudContext
    from greengpu.control.daemon.audit import Alerts, AuditLog
    from greengpu.control.hooks.slurm_hooks import setup_logging

    try:
        setup_logging(log_file)
    except OSError as error:
        raise click.ClickException(f"greengpu cloud: cannot open the log {log_file}: {error}") from None
    with _cloud_step(ctx.invoked_subcommand or ""):
        from greengpu.control.daemon.audit import check_webhook_url

        check_webhook_url(alert_webhook, "--alert-webhook")
        _check_writable(audit_file)
        audit = AuditLog(Path(audit_file))
        ctx.obj = CloudContext(pools=load_cloud_pools(cluster_file), audit=audit,
                               alerts=Alerts(audit, alert_webhook), others_program=others_program)


def _check_writable(audit_file: str) -> None:
    """The audit log can be appended to: checked before anything is launched, so no instance runs (and
    costs) without its record; nothing is created here. BadInput naming the file otherwise."""
    import os

    from greengpu.control.daemon.state_checks import VIRTUAL_ROOTS
    from greengpu.errors import BadInput

    path = Path(audit_file).absolute()
    if any(path.is_relative_to(root) for root in VIRTUAL_ROOTS):
        raise BadInput(f"--audit {audit_file}: under a virtual file system; give a file on a disk")
    if path.is_dir():
        raise BadInput(f"--audit {audit_file}: is a directory, expected the audit log (a file)")
    if path.exists():
        if not path.is_file() or not os.access(path, os.W_OK):
            raise BadInput(f"--audit {audit_file}: not a regular file this user can write")
        return
    parent = path.parent
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir() or not os.access(parent, os.W_OK | os.X_OK):
        raise BadInput(f"--audit {audit_file}: cannot be created ({parent} is not a directory this user can write)")


@contextmanager
def _cloud_step(name: str) -> Iterator[None]:
    """Refusals and failures go to the log file too (Slurm discards the hooks' stderr); bad input exits 2
    with one line, runtime failures (Slurm, the state of files) exit 1 with one line: as the Slurm hooks'."""
    import logging

    from greengpu.control.hooks.slurm_hooks import HookFailure, logged_outcome

    try:
        with logged_outcome(f"greengpu cloud {name}", logging.getLogger("greengpu.cloud")):
            yield
    except HookFailure as error:
        raise click.ClickException(str(error)) from None


@cloud.command("resume")
@click.argument("hostlist")
@click.pass_obj
def cloud_resume(context: Any, hostlist: str) -> None:
    """ResumeProgram: launch each cloud node's instance and tell Slurm its address (exit 1 if any failed)."""
    from greengpu.control.cloud.cloud_nodes import jobs_by_node, resume
    from greengpu.control.hooks.slurm_hooks import resume_file_from_env

    with _cloud_step("resume"):
        code = resume(context, hostlist, jobs_by_node(resume_file_from_env()))
    if code:
        click.echo(f"greengpu cloud resume: some of {hostlist} failed (the log says which and why)", err=True)
        raise click.exceptions.Exit(code)


@cloud.command("suspend")
@click.argument("hostlist")
@click.pass_obj
def cloud_suspend(context: Any, hostlist: str) -> None:
    """SuspendProgram: release each idle cloud node's instance (busy nodes refused, exit 1)."""
    from greengpu.control.cloud.cloud_nodes import suspend

    with _cloud_step("suspend"):
        code = suspend(context, hostlist)
    if code:
        click.echo(f"greengpu cloud suspend: some of {hostlist} were not released (the log says why)", err=True)
        raise click.exceptions.Exit(code)


@cloud.command("resume-failed")
@click.argument("hostlist")
@click.pass_obj
def cloud_resume_failed(context: Any, hostlist: str) -> None:
    """ResumeFailProgram: Slurm gave up on these nodes; release their instances and raise the alert."""
    from greengpu.control.cloud.cloud_nodes import resume_failed

    with _cloud_step("resume-failed"):
        code = resume_failed(context, hostlist)
    if code:
        raise click.exceptions.Exit(code)
