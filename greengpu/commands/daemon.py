"""`greengpu daemon`: the live control loop (wiring in greengpu.control.daemon.daemon_main)."""

from __future__ import annotations

import sys

import click

from greengpu.localtime import DAY_S  # the ceiling of interval and timeout flags (longer: a typo, or a timer overflow)
from greengpu.model import Job


@click.command()
@click.option("--cluster", "cluster_file", default="/etc/greengpu/cluster.yaml", show_default=True, metavar="FILE",
              help="Cluster inventory YAML.")
@click.option("--policy", "policy_name", default="default", show_default=True, metavar="P",
              help="Built-in policy name or policy YAML: every lever's settings.")
@click.option("--source", type=click.Choice(["fake", "slurm", "kubernetes"]), default=None,
              help="Where jobs and node states come from: slurm or kubernetes with --backend real (required "
              "there); with --backend fake it is fake.")
@click.option("--backend", type=click.Choice(["real", "fake"]), required=True,
              help="Required, no default: real acts on the cluster --source names; fake runs a simulated "
              "cluster (fake GPUs, nodes that sleep and boot, a job stream), no cluster needed.")
@click.option("--once", is_flag=True, help="Reconcile, run one tick, print its actions as JSON and exit.")
@click.option("--dry-run", is_flag=True, help="Decide, journal and log every action; carry none out.")
@click.option("--listen", default="127.0.0.1:9475", show_default=True, metavar="HOST:PORT",
              help="Where /metrics, /healthz and /v1/status are served (port 0: any free port).")
@click.option("--state", "state_dir", default="/var/lib/greengpu/daemon", show_default=True, metavar="DIR",
              help="State: the action journal, the audit log, the lock (one daemon per directory).")
@click.option("--interval-s", type=click.FloatRange(min=1.0, max=DAY_S), default=60.0, show_default=True,
              help="Seconds between control ticks.")
@click.option("--token-file", default=None, metavar="FILE",
              help="Bearer token for POST /v1/pause, /v1/resume, /v1/exempt (without it they answer 403).")
@click.option("--webhook", "webhook_url", default=None, metavar="URL",
              help="Also POST each alert as JSON here (retried with backoff).")
@click.option("--trace", "trace_file", default=None, metavar="FILE",
              help="With --backend fake: replay this trace from now on instead of a generated job stream.")
@click.option("--trace-format", type=click.Choice(["csv", "philly", "sacct"]), default="csv", show_default=True)
@click.option("--seed", type=int, default=0, show_default=True, help="With --backend fake: the job stream's seed.")
@click.option("--lease-namespace", default=None, metavar="NS",
              help="With --source kubernetes: the namespace of the coordination.k8s.io Lease that elects the one "
              "replica that acts (default: the pod's own namespace).")
@click.option("--lease-name", default="greengpu-daemon", show_default=True, metavar="NAME",
              help="With --source kubernetes: the Lease's name.")
@click.option("--ledger", "ledger_file", default=None, metavar="FILE.db|postgresql://...",
              help="Meter energy, cost and CO2 per tenant, node and job into this ledger: an SQLite file (default: "
              "ledger.db in --state) or a PostgreSQL database a fleet shares (docs/FLEET.md); greengpu report "
              "bills it.")
@click.option("--kube-host", default=None, metavar="URL",
              help="With --source kubernetes: the API server URL (default: in-cluster config, else kubeconfig).")
@click.option("--tick-deadline-s", type=click.FloatRange(min=1.0, max=DAY_S), default=None, metavar="SECONDS",
              help="A tick that has not returned after this long is a failed one: alerted, GPUs back to their "
              "defaults (default: two intervals, at least 120 s; 600 s more with --source kubernetes).")
@click.option("--suspend-command", default=None, metavar="TEMPLATE",
              help="With --source kubernetes: run per node to suspend it ({node}); default: ask the node's agent "
              "(POST /v1/suspend with --agent-token-file), which suspends its own host.")
@click.option("--agent-token-file", default=None, metavar="FILE",
              help="The node agents' bearer token: what their POST /v1/suspend wants (with --source kubernetes and "
              "no --suspend-command: the agent suspends its own node; docs/SLEEP.md), and what the daemon takes "
              "for their POST /v1/report (reports only).")
@click.option("--agent-port", type=click.IntRange(1, 65535), default=9474, show_default=True,
              help="With --source kubernetes: the node agents' port (on each node's InternalIP).")
@click.option("--cloud-partition", default=None, metavar="NAME",
              help="With --source slurm and cloud pools: the Slurm partition of the cloud nodes, added to the "
              "partitions of a job the capacity lever steers (docs/SPOT-LIVE.md).")
def daemon(cluster_file: str, policy_name: str, source: str | None, backend: str, once: bool, dry_run: bool,
           listen: str, state_dir: str, interval_s: float, token_file: str | None, webhook_url: str | None,
           trace_file: str | None, trace_format: str, seed: int, lease_namespace: str | None,
           lease_name: str, ledger_file: str | None, kube_host: str | None, tick_deadline_s: float | None,
           suspend_command: str | None, agent_token_file: str | None, agent_port: int,
           cloud_partition: str | None) -> None:
    """Run the control loop on a cluster: observe, decide with the simulator's own tick, act, account.

    Every action is journalled before and after it is carried out and written to the audit log; when
    the cluster cannot be observed, GPUs go back to their default limits and no node is put to sleep
    (docs/DAEMON.md).
    """
    import logging

    from greengpu.commands.common import verbosity
    from greengpu.errors import BadInput

    if source is None and backend == "real":
        raise BadInput("--backend real needs --source slurm or --source kubernetes (the daemon never guesses "
                       "which cluster it acts on)")
    source = source or "fake"
    from greengpu.config.policy import load_policy
    from greengpu.control.daemon.daemon_main import DaemonOptions, run_daemon
    from greengpu.control.log_setup import install_handler
    from greengpu.report.monthly_main import write_scheduled_reports

    # A daemon logs what it does (info) unless -q asks for errors only; -vv adds debug. APScheduler's own
    # info lines ("Running job ...", "... executed successfully") come every tick and say nothing the
    # daemon's lines do not: they show from -vv on.
    level = {-1: logging.ERROR, 0: logging.INFO, 1: logging.INFO}.get(verbosity(), logging.DEBUG)
    install_handler(logging.StreamHandler(sys.stderr), level, "greengpu daemon: %(message)s")
    logging.getLogger("greengpu").setLevel(level)
    logging.getLogger("apscheduler").setLevel(level if level == logging.DEBUG else max(level, logging.WARNING))
    code = run_daemon(DaemonOptions(
        cluster_file=cluster_file, policy=load_policy(policy_name), source=source, backend=backend, once=once,
        dry_run=dry_run, listen=listen, state_dir=state_dir, interval_s=interval_s, token_file=token_file,
        webhook_url=webhook_url, trace_file=trace_file, trace_format=trace_format, seed=seed, kube_host=kube_host,
        suspend_command=suspend_command, agent_token_file=agent_token_file, agent_port=agent_port,
        lease_namespace=lease_namespace, lease_name=lease_name,
        ledger_file=ledger_file, tick_deadline_s=tick_deadline_s, cloud_partition=cloud_partition,
        trace_jobs=_trace_jobs, write_reports=write_scheduled_reports))
    if code:
        raise click.exceptions.Exit(code)


def _trace_jobs(path: str, trace_format: str) -> list[Job]:
    """The daemon's --trace reader (the simulator's), imported only when a trace is given."""
    from greengpu.sim.traces import read_trace

    return read_trace(path, trace_format).jobs
