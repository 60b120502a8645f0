"""`greengpu node-suspend`: suspend this node when its GPUs are idle."""

from __future__ import annotations

import json

import click

from greengpu.commands.common import EXIT_FAILURE


@click.command("node-suspend")
@click.option("--command", "suspend_command", default="systemctl suspend", show_default=True,
              help="What puts this node to sleep.")
@click.option("--backend", type=click.Choice(["real", "fake"]), default="real", show_default=True)
@click.option("--fake-gpus", default="4xA100", show_default=True, metavar="SPEC")
@click.option("--fake-busy", default="", metavar="INDEXES")
@click.option("--util-threshold", type=click.FloatRange(0, 1), default=0.2, show_default=True,
              help="A GPU at or above this utilisation counts as busy (the policy's idle_util_threshold).")
@click.option("--dry-run", is_flag=True, help="Check and say what would run; suspend nothing.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object on stdout: suspended, dry_run, command, "
              "busy (the GPUs that kept the node awake).")
def node_suspend(suspend_command: str, backend: str, fake_gpus: str, fake_busy: str, util_threshold: float,
                 dry_run: bool, as_json: bool) -> None:
    """Run on a node: suspend it, but never while a GPU process runs or a GPU is busy (checked through NVML)."""
    import shlex
    import subprocess

    from greengpu.backends.nvml import NvmlBackend, NvmlUnavailable
    from greengpu.control.agent.agent_main import fake_backend, parse_gpu_indexes

    nvml = fake_backend(fake_gpus, parse_gpu_indexes(fake_busy)) if backend == "fake" else NvmlBackend()
    try:
        count = nvml.open()
    except NvmlUnavailable as error:
        click.echo(f"greengpu node-suspend: {error}", err=True)
        raise click.exceptions.Exit(EXIT_FAILURE) from None
    readings = [nvml.read(i) for i in range(count)]
    nvml.close()
    working = [f"GPU {r.index} (pid {', '.join(map(str, r.pids))})" for r in readings if r.pids]
    working += [f"GPU {r.index} ({r.utilization:.0%} busy)" for r in readings
                if not r.pids and r.utilization >= util_threshold]
    decision = {"suspended": False, "dry_run": dry_run, "command": suspend_command, "busy": working}
    if working:
        if as_json:
            click.echo(json.dumps(decision))
        click.echo(f"greengpu node-suspend: not suspending: work on {', '.join(working)}", err=True)
        raise click.exceptions.Exit(EXIT_FAILURE)
    if dry_run:
        click.echo(json.dumps(decision) if as_json else f"would run: {suspend_command}")
        return
    # With --json, stdout holds the one JSON object: the command's own output goes to file descriptor 2.
    result = subprocess.run(shlex.split(suspend_command), check=False, stdout=2 if as_json else None)
    if result.returncode:
        click.echo(f"greengpu node-suspend: {suspend_command!r} exited {result.returncode}", err=True)
        raise click.exceptions.Exit(EXIT_FAILURE)
    if as_json:
        click.echo(json.dumps({**decision, "suspended": True}))
