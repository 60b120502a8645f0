"""`greengpu check`: validate an inventory (and policy, and slurm.conf timings) and summarise it."""

from __future__ import annotations

import json
from dataclasses import asdict, replace
from pathlib import Path
from typing import TYPE_CHECKING

import click

from greengpu.errors import BadInput
from greengpu.json_types import JsonObject

if TYPE_CHECKING:
    from greengpu.model import Cluster
    from greengpu.policy import Policy
    from greengpu.report.check import CheckSummary


@click.command()
@click.option("--cluster", "cluster_file", required=True, metavar="FILE",
              help="Cluster inventory YAML (docs/INVENTORY.md).")
@click.option("--policy", "policy_name", default=None, metavar="P",
              help="Built-in policy name (always-on, idle-timeout, default) or a policy YAML file.")
@click.option("--slurm-conf", "slurm_conf", default=None, metavar="FILE",
              help="slurm.conf: refuse a policy whose wake-up retries cannot finish inside its ResumeTimeout.")
@click.option("--slurm-live", is_flag=True,
              help="Ask the running slurmctld (scontrol show config) for SuspendExcNodes/SuspendExcParts.")
@click.option("--sharing-live", type=click.Choice(["kubernetes", "nvml"]), default=None,
              help="Compare the inventory's MIG and time-slicing with the GPU Operator's node labels (kubernetes) "
                   "or this node's GPUs (nvml), as warnings.")
@click.option("--kube-host", default=None, metavar="URL",
              help="With --sharing-live kubernetes: API server URL without auth (default: in-cluster, "
                   "else kubeconfig).")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as one JSON object.")
def check(cluster_file: str, policy_name: str | None, slurm_conf: str | None, slurm_live: bool,
          sharing_live: str | None, kube_host: str | None, as_json: bool) -> None:
    """Validate a cluster inventory and optionally a policy, then summarise them.

    Prints nodes and GPUs per model, idle and peak power, tenants and quotas, and warns when
    quotas promise more GPUs than are installed, or when the inventory and Slurm's SuspendExcNodes/
    SuspendExcParts disagree. Node types with MIG or time-slicing show their declared layout; with
    --sharing-live, where the live cluster disagrees with it. Any error is one line naming file, line and key.
    """
    from greengpu.config.inventory import load_cluster
    from greengpu.config.policy import load_policy
    from greengpu.report.check import policy_lines, summarize

    cluster = load_cluster(cluster_file)
    policy = load_policy(policy_name) if policy_name else None
    if policy is not None:
        from greengpu.report.check import wake_timing_problem

        problem = wake_timing_problem(cluster, policy, _resume_timeout_s(slurm_conf) if slurm_conf else None)
        if problem:
            raise BadInput(problem)
    summary = summarize(cluster)
    if slurm_conf or slurm_live:
        extra = _exclusion_warnings(cluster, policy, slurm_conf, slurm_live)
        summary = replace(summary, warnings=[*summary.warnings, *extra])
    if sharing_live:
        from greengpu.commands.check_sharing import live_sharing_warnings

        summary = replace(summary, warnings=[*summary.warnings,
                                             *live_sharing_warnings(cluster, sharing_live, kube_host)])
    if as_json:
        payload: JsonObject = asdict(summary)
        payload["policy"] = policy.name if policy else None
        click.echo(json.dumps(payload, indent=2, sort_keys=True))
        return
    _print_check(cluster_file, summary, policy_lines(policy) if policy else [])


def _exclusion_warnings(cluster: Cluster, policy: Policy | None, slurm_conf: str | None, live: bool) -> list[str]:
    """Where the inventory and Slurm's power-save exclusions (from slurm.conf, or the running slurmctld) disagree."""
    from greengpu.backends import slurm
    from greengpu.backends.slurm_config import conf_nodes, disagreements, exclusions_from, read_exclusions

    if live:
        try:
            exclusions = read_exclusions()
            slurm_nodes = list(slurm.nodes())
        except slurm.SlurmError as error:
            raise BadInput(f"cannot read Slurm's power-save exclusions: {error}") from None
    else:
        assert slurm_conf is not None
        try:
            text = Path(slurm_conf).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as error:
            raise BadInput(f"{slurm_conf}: cannot read: {error}") from None
        try:
            exclusions = exclusions_from(text, text)
            slurm_nodes = conf_nodes(text)
        except ValueError as error:
            raise BadInput(f"{slurm_conf}: {error}") from None
    sleeps = policy is None or policy.sleep.enabled
    return disagreements([node.name for node in cluster.nodes], exclusions, sleeps, slurm_nodes)


def _resume_timeout_s(slurm_conf: str) -> float:
    from greengpu.backends.slurm import resume_timeout_s

    try:
        text = Path(slurm_conf).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise BadInput(f"{slurm_conf}: cannot read: {error}") from None
    try:
        return resume_timeout_s(text)
    except ValueError as error:
        raise BadInput(f"{slurm_conf}: {error}") from None


def _print_check(cluster_file: str, summary: CheckSummary, policy_text: list[str]) -> None:
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
    for line in summary.sharing:
        console.print(line, highlight=False)
    for line in policy_text:
        console.print(line, highlight=False)
    for warning in summary.warnings:
        console.print(f"[yellow]warning:[/yellow] {warning}")
