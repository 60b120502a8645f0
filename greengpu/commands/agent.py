"""`greengpu agent`: the node agent (wiring in greengpu.control.agent.agent_main)."""

from __future__ import annotations

import sys

import click

from greengpu.localtime import DAY_S  # the ceiling of interval and timeout flags (longer: a typo, or a timer overflow)


@click.command()
@click.option("--policy", "policy_name", default="default", show_default=True, metavar="P",
              help="Built-in policy name or policy YAML; its `capping` section is applied.")
@click.option("--backend", type=click.Choice(["real", "fake"]), default="real", show_default=True,
              help="real: NVML on this node's GPUs; fake: simulated GPUs (no GPU needed).")
@click.option("--classes", "classes_file", default=None, metavar="FILE",
              help="Class file: default_class, gpus {INDEX: CLASS}, partition_classes {PARTITION: CLASS}.")
@click.option("--class-source", type=click.Choice(["local", "slurm", "kubernetes"]), default="local",
              show_default=True, help="Where the job on each GPU comes from: the class file's GPU map, Slurm "
              "(scontrol), or the pod's greengpu.io/class annotation.")
@click.option("--node", default=None, metavar="NAME",
              help="This node's Slurm or Kubernetes name (default: the short hostname).")
@click.option("--kube-host", default=None, metavar="URL",
              help="Kubernetes API server URL without auth (default: in-cluster config, else kubeconfig).")
@click.option("--pod-resources-socket", default="/var/lib/kubelet/pod-resources/kubelet.sock", show_default=True,
              metavar="SOCKET", help="With --class-source kubernetes: the kubelet's PodResources API (GPU -> pod by "
              "UUID); when absent, the GPU processes' cgroups are read (needs hostPID).")
@click.option("--journal", default="/var/lib/greengpu/agent-journal.jsonl", show_default=True, metavar="FILE",
              help="JSON-lines record of every limit set; read at start-up to undo a crashed session.")
@click.option("--listen", default="127.0.0.1:9474", show_default=True, metavar="HOST:PORT",
              help="Where /metrics and /healthz are served (port 0: any free port). The shipped unit gives the "
              "node's address, so a central Prometheus can scrape it.")
@click.option("--stale-after-s", type=click.FloatRange(min=0, min_open=True), default=None, metavar="SECONDS",
              help="A last good tick older than this fails /healthz (503) and puts the GPUs back to default "
              "limits until ticks work again (default: 3 intervals, at least 30 s).")
@click.option("--interval-s", type=click.FloatRange(min=0.05, max=DAY_S), default=10.0, show_default=True,
              help="Seconds between control ticks.")
@click.option("--nonbinding-after-s", type=click.FloatRange(min=0), default=60.0, show_default=True,
              help="A busy GPU whose cap has not bound for this long moves to locked clocks (when allowed).")
@click.option("--once", is_flag=True, help="One tick, then restore the GPUs and exit (a test of the whole path).")
@click.option("--dry-run", is_flag=True, help="Decide and log; change nothing.")
@click.option("--fake-gpus", default="4xA100", show_default=True, metavar="SPEC",
              help="With --backend fake: GPUs such as 4xA100 or 2xH200,1xP100.")
@click.option("--fake-state", default=None, metavar="FILE",
              help="With --backend fake: keep the fake GPUs' settings in FILE, so they outlive the process.")
@click.option("--fake-busy", default="", metavar="INDEXES", help="With --backend fake: GPUs with work, e.g. 0,1.")
@click.option("--fake-not-root", is_flag=True, help="With --backend fake: refuse writes as NVML does without root.")
@click.option("--waiting-from", default=None, metavar="URL",
              help="The daemon (e.g. http://greengpu-daemon:9475): whether work waits comes from its /v1/waiting, "
              "not from each node asking the workload manager; unreachable or stale: caps lift (fail safe).")
@click.option("--cluster", "cluster_file", default=None, metavar="FILE",
              help="Cluster inventory YAML: the efficiency pick then counts this node's host power (one GPU's "
              "share of host_idle_w) exactly as greengpu simulate does; without it, GPU energy alone.")
@click.option("--suspend-token-file", default=None, metavar="FILE",
              help="Serve POST /v1/suspend for the daemon's node-local suspend, authenticated with the bearer token "
              "in FILE: refused while a GPU works, else the host is suspended (docs/SLEEP.md).")
@click.option("--host-suspend-command", default=None, metavar="COMMAND",
              help="What suspends this host for POST /v1/suspend. Default: logind's Suspend over the host's system "
              "D-Bus (dbus-send ... org.freedesktop.login1.Manager.Suspend).")
@click.option("--report-to", default=None, metavar="URL",
              help="The daemon (e.g. http://greengpu-daemon:9475): after each tick, POST this node's report (GPU "
              "utilisation, health, energy counters, jobs) to its /v1/report (docs/AGENT.md).")
@click.option("--report-token-file", default=None, metavar="FILE",
              help="With --report-to: the bearer token (the daemon's --agent-token-file, or its --token-file).")
def agent(policy_name: str, backend: str, classes_file: str | None, class_source: str, node: str | None,
          kube_host: str | None, pod_resources_socket: str, journal: str, listen: str,
          stale_after_s: float | None, interval_s: float,
          nonbinding_after_s: float, once: bool, dry_run: bool, fake_gpus: str, fake_state: str | None,
          fake_busy: str, fake_not_root: bool, waiting_from: str | None, cluster_file: str | None,
          suspend_token_file: str | None, host_suspend_command: str | None, report_to: str | None,
          report_token_file: str | None) -> None:
    """Run on a GPU node: cap each GPU for the job class running on it, restore everything on exit.

    Reads power, energy, limits and clocks through NVML, applies the policy's capping decision per
    job class, journals every change, restores the GPUs on SIGTERM/SIGINT and after a crash, and
    serves Prometheus metrics (docs/AGENT.md).
    """
    import logging

    from greengpu.config.policy import load_policy
    from greengpu.control.agent.agent_main import AgentOptions, parse_gpu_indexes, run_agent
    from greengpu.control.log_setup import install_handler

    busy = parse_gpu_indexes(fake_busy)
    cluster = None
    if cluster_file is not None:
        from greengpu.config.inventory import load_cluster

        cluster = load_cluster(cluster_file)
    install_handler(logging.StreamHandler(sys.stderr), logging.INFO, "greengpu agent: %(message)s")
    code = run_agent(AgentOptions(
        policy=load_policy(policy_name), backend=backend, fake_gpus=fake_gpus, fake_state=fake_state,
        fake_busy=busy, fake_not_root=fake_not_root, classes_file=classes_file, class_source=class_source,
        node=node, kube_host=kube_host, journal=journal, listen=listen, interval_s=interval_s, once=once,
        dry_run=dry_run, nonbinding_after_s=nonbinding_after_s, stale_after_s=stale_after_s,
        pod_resources_socket=pod_resources_socket, cluster=cluster, waiting_from=waiting_from,
        suspend_token_file=suspend_token_file, host_suspend_command=host_suspend_command, report_to=report_to,
        report_token_file=report_token_file))
    if code:
        raise click.exceptions.Exit(code)
