"""The `greengpu` command line.

Every command turns bad input into one line on stderr and exit code 2 (CONTRACTS.md section 8):
`BadInput` from our own validation and click's usage errors alike.
"""

from __future__ import annotations

import json
import sys
from dataclasses import asdict
from typing import Any

import click

from greengpu import __version__
from greengpu.errors import BadInput

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_BAD_INPUT = 2


@click.group(context_settings={"help_option_names": ["-h", "--help"], "auto_envvar_prefix": "GREENGPU"})
@click.version_option(__version__, prog_name="greengpu")
def cli() -> None:
    """greengpu cuts the energy, cost and CO2 of shared GPU clusters without hurting the jobs that matter.

    Exit codes: 0 success, 1 runtime failure, 2 bad input or usage. Every option can also be set
    from the environment as GREENGPU_<COMMAND>_<OPTION>.
    """


@cli.command()
@click.option("--cluster", "cluster_file", required=True, metavar="FILE",
              help="Cluster inventory YAML (CONTRACTS.md section 2).")
@click.option("--policy", "policy_name", default=None, metavar="P",
              help="Built-in policy name (always-on, idle-timeout, default) or a policy YAML file.")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as one JSON object.")
def check(cluster_file: str, policy_name: str | None, as_json: bool) -> None:
    """Validate a cluster inventory and optionally a policy, then summarise them.

    Prints nodes and GPUs per model, idle and peak power, tenants and quotas, and warns when
    quotas promise more GPUs than are installed. Any error is one line naming file, line and key.
    """
    from greengpu.config.inventory import load_cluster
    from greengpu.config.policy import load_policy
    from greengpu.report.check import policy_lines, summarize

    cluster = load_cluster(cluster_file)
    policy = load_policy(policy_name) if policy_name else None
    summary = summarize(cluster)
    if as_json:
        payload: dict[str, Any] = asdict(summary)
        payload["policy"] = policy.name if policy else None
        click.echo(json.dumps(payload, indent=2, sort_keys=True))
        return
    _print_check(cluster_file, summary, policy_lines(policy) if policy else [])


def _print_check(cluster_file: str, summary: Any, policy_text: list[str]) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    console.print(f"[bold]{cluster_file}[/bold]: OK, {summary.nodes} nodes, {summary.gpus} GPUs")
    models = Table(title="Nodes and GPUs by model")
    for column in ("GPU model", "nodes", "GPUs", "idle kW", "peak kW", "asleep kW"):
        models.add_column(column, justify="right" if column != "GPU model" else "left")
    for m in summary.models:
        models.add_row(m.gpu_model, str(m.nodes), str(m.gpus), f"{m.idle_w / 1000:.2f}", f"{m.peak_w / 1000:.2f}",
                       f"{m.sleep_w / 1000:.2f}")
    models.add_row("total (IT)", str(summary.nodes), str(summary.gpus), f"{summary.idle_kw:.2f}",
                   f"{summary.peak_kw:.2f}", "")
    models.add_row("facility (x PUE)", "", "", f"{summary.facility_idle_kw:.2f}", f"{summary.facility_peak_kw:.2f}", "")
    console.print(models)
    if summary.tenants:
        tenants = Table(title="Tenants")
        for column in ("tenant", "quota GPUs", "share", "weight", "borrow limit"):
            tenants.add_column(column, justify="left" if column == "tenant" else "right")
        for t in summary.tenants:
            borrow = "any idle" if t["borrow_limit_gpus"] is None else f"{t['borrow_limit_gpus']:g}"
            tenants.add_row(t["tenant"], f"{t['quota_gpus']:g}", f"{t['quota_share']:.0%}", f"{t['weight']:g}", borrow)
        tenants.add_row("total", f"{summary.quota_total_gpus:g}", "", "", "")
        console.print(tenants)
    for pool in summary.pools:
        kind = "spot" if pool["spot"] else "on-demand"
        console.print(f"pool {pool['pool']}: up to {pool['max_nodes']} x {pool['type']} ({kind}) "
                      f"at {pool['price_per_hour']:g}/node-hour")
    for line in policy_text:
        console.print(line, highlight=False)
    for warning in summary.warnings:
        console.print(f"[yellow]warning:[/yellow] {warning}")


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; map bad input to exit 2 with one line on stderr."""
    try:
        cli.main(args=argv, prog_name="greengpu", standalone_mode=False)
    except BadInput as exc:
        click.echo(f"greengpu: {exc}", err=True)
        return EXIT_BAD_INPUT
    except click.exceptions.NoArgsIsHelpError as exc:
        click.echo(exc.ctx.get_help() if exc.ctx else str(exc))
        return EXIT_BAD_INPUT
    except click.UsageError as exc:
        command = exc.ctx.command_path if exc.ctx else "greengpu"
        click.echo(f"{command}: {exc.format_message()} (try '{command} --help')", err=True)
        return EXIT_BAD_INPUT
    except click.exceptions.Exit as exc:
        return int(exc.exit_code)
    except click.Abort:
        click.echo("greengpu: aborted", err=True)
        return EXIT_FAILURE
    except click.ClickException as exc:
        click.echo(f"greengpu: {exc.format_message()}", err=True)
        return exc.exit_code
    return EXIT_OK


def entry_point() -> None:
    """Console-script entry: exit with main()'s code."""
    sys.exit(main())


if __name__ == "__main__":
    entry_point()
