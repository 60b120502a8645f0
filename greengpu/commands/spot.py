"""`greengpu spot`: the live side of the spot lever, on Kubernetes (webhook) and Slurm (steer) (docs/SPOT-LIVE.md)."""

from __future__ import annotations

import click

from greengpu.commands.common import HelpFirstGroup
from greengpu.localtime import DAY_S  # the ceiling of interval and timeout flags (longer: a typo, or a timer overflow)
from greengpu.model import Cluster
from greengpu.policy import Policy
from greengpu.spot.decide import CapacityKind, PoolPrice, SpotJobFacts, cloud_capacity_for
from greengpu.spot.pod_facts import Decide


@click.group(cls=HelpFirstGroup)
def spot() -> None:
    """Spot versus on-demand placement on a live cluster."""


@spot.command("webhook")
@click.option("--listen", default="127.0.0.1:8443", show_default=True, metavar="HOST:PORT",
              help="Where to serve HTTPS: loopback by default; 0.0.0.0:8443 in a pod behind its Service.")
@click.option("--cert", "cert_file", required=True, metavar="FILE", help="TLS certificate (PEM) naming the Service.")
@click.option("--key", "key_file", required=True, metavar="FILE", help="Its private key (PEM).")
@click.option("--cluster", "cluster_file", default="/etc/greengpu/cluster.yaml", show_default=True, metavar="FILE",
              help="Cluster inventory: the spot and on-demand pools and their prices.")
@click.option("--policy", "policy_name", default="default", show_default=True, metavar="P",
              help="Policy whose spot section says which classes may run on spot.")
@click.option("--daemon", "daemon_url", default=None, metavar="URL",
              help="Take the daemon's decision (GET URL/v1/capacity/NAMESPACE/NAME, its tick's capacity lever) "
              "instead of deciding here; no decision or no answer: the pod is admitted unchanged.")
def spot_webhook(listen: str, cert_file: str, key_file: str, cluster_file: str, policy_name: str,
                 daemon_url: str | None) -> None:
    """Mutating admission webhook: GPU pods get a required node affinity on karpenter.sh/capacity-type
    (spot or on-demand) as the spot decision says; every pod is allowed (fail open).

    POST /mutate takes an AdmissionReview (admission.k8s.io/v1); GET /healthz answers ok. Runs until
    SIGTERM or SIGINT. Exit 2 on bad input (inventory, policy, certificate files, --listen), 1 when the
    address cannot be bound.
    """
    import signal
    import ssl
    import threading

    from greengpu.config.inventory import load_cluster
    from greengpu.config.policy import load_policy
    from greengpu.control.agent.exporter import parse_listen
    from greengpu.control.cloud.spot_webhook import DaemonDecisions, WebhookServer, tls_context
    from greengpu.errors import BadInput

    try:
        daemon = DaemonDecisions(daemon_url) if daemon_url is not None else None
    except ValueError as error:
        raise BadInput(f"--daemon: {error}") from None

    try:
        host, port = parse_listen(listen)
    except ValueError as error:
        raise BadInput(f"--listen: {error}") from None
    cluster = load_cluster(cluster_file)
    policy = load_policy(policy_name)
    try:
        context = tls_context(cert_file, key_file)
    except (OSError, ssl.SSLError) as error:
        raise BadInput(f"--cert {cert_file} / --key {key_file}: cannot load the certificate and key: "
                       f"{getattr(error, 'strerror', None) or error}") from None
    import time

    from greengpu.control.cloud.spot_webhook import certificate_warning

    warning = certificate_warning(cert_file, time.time())
    if warning is not None:
        click.echo(f"greengpu: warning: {warning}", err=True)
    decide = bind_decision(cluster, policy)
    try:
        server = WebhookServer(host, port, context, decide, cert_file=cert_file, daemon=daemon).start()
    except OSError as error:
        raise click.ClickException(f"spot webhook: cannot listen on {listen}: {error.strerror or error}") from None
    click.echo(f"greengpu: spot webhook on https://{listen.rpartition(':')[0]}:{server.port}/mutate", err=True)
    stopping = threading.Event()
    for number in (signal.SIGTERM, signal.SIGINT):
        signal.signal(number, lambda *_: stopping.set())
    stopping.wait()
    server.stop()


@spot.command("steer")
@click.option("--cluster", "cluster_file", default="/etc/greengpu/cluster.yaml", show_default=True, metavar="FILE",
              help="Cluster inventory: the spot and on-demand pools and their prices.")
@click.option("--policy", "policy_name", default="default", show_default=True, metavar="P",
              help="Policy whose spot section says which classes may run on spot.")
@click.option("--cloud-partition", default=None, metavar="NAME",
              help="The Slurm partition of the cloud nodes, added to a steered job's partitions (leave it out "
              "when the cloud nodes share the jobs' partitions).")
@click.option("--min-wait", "min_wait_s", default=0.0, show_default=True, type=click.FloatRange(min=0.0),
              metavar="SECONDS", help="Steer only jobs eligible this long (give on-premises nodes time to free).")
@click.option("--every", "every_s", default=None, type=click.FloatRange(min=1.0, max=DAY_S), metavar="SECONDS",
              help="Repeat every SECONDS until SIGTERM (as a service) instead of one pass.")
@click.option("--dry-run", is_flag=True, help="Log what would be steered; change nothing.")
@click.option("--log", "log_file", default=None, metavar="FILE", help="Log here instead of stderr.")
def spot_steer(cluster_file: str, policy_name: str, cloud_partition: str | None, min_wait_s: float,
               every_s: float | None, dry_run: bool, log_file: str | None) -> None:
    """Slurm: give waiting GPU jobs that name no capacity the feature the spot decision chooses.

    A pending job that asks for GPUs, names neither `spot` nor `on-demand` in its constraint and waits
    for resources gets `scontrol update JobId=N Features=spot` (or `on-demand`; and the cloud partition
    with --cloud-partition). Its class, whether it is interruptible and its checkpoints come from its
    comment (`greengpu.class=training greengpu.interruptible=true greengpu.checkpoint-interval=30m`), its
    run time from --time, its deadline from --deadline. A job greengpu is unsure about is left unchanged,
    with a log line. Exit 1 when Slurm cannot be asked or refused an update (one pass), 2 on bad input.
    """
    import signal
    import threading

    from greengpu.backends.slurm import SlurmError
    from greengpu.config.inventory import load_cluster
    from greengpu.config.policy import load_policy
    from greengpu.control.cloud.spot_steer import SpotSteering
    from greengpu.control.hooks.slurm_hooks import setup_logging

    try:
        setup_logging(log_file)
    except OSError as error:
        raise click.ClickException(f"spot steer: cannot open the log {log_file}: {error.strerror or error}") from None
    steering = SpotSteering(load_cluster(cluster_file), load_policy(policy_name), cloud_partition=cloud_partition,
                            min_wait_s=min_wait_s, dry_run=dry_run)
    if every_s is None:
        try:
            outcomes = steering.steer_once()
        except SlurmError as error:
            raise click.ClickException(f"spot steer: {error}") from None
        if any(o.outcome == "failed" for o in outcomes):
            raise click.exceptions.Exit(1)
        return
    import logging

    stopping = threading.Event()
    for number in (signal.SIGTERM, signal.SIGINT):
        signal.signal(number, lambda *_: stopping.set())
    while not stopping.is_set():
        try:
            steering.steer_once()
        except SlurmError as error:  # a service keeps going: Slurm may be back at the next pass
            logging.getLogger("greengpu.spot.steer").error("cannot read Slurm's queue: %s", error)
        stopping.wait(every_s)


def bind_decision(cluster: Cluster, policy: Policy) -> Decide:
    """The spot decision (greengpu.spot.decide.cloud_capacity_for) with the inventory's prices and the
    policy bound: the cheapest spot pool and the cheapest on-demand pool with any nodes, per GPU-hour
    (Karpenter picks the cheapest offering that fits too); None for a kind the inventory has no pool of."""

    def cheapest(spot_pools: bool) -> PoolPrice | None:
        prices = [(pool.price_per_hour / cluster.node_types[pool.type_name].gpus, pool)
                  for pool in cluster.pools.values() if pool.spot == spot_pools and pool.max_nodes > 0]
        if not prices:
            return None
        per_gpu_hour, pool = min(prices, key=lambda item: item[0])
        return PoolPrice(price_per_gpu_hour=per_gpu_hour, interruptions_per_hour=pool.interruptions_per_hour,
                         notice_s=policy.spot.notice_s)

    spot_price, on_demand_price = cheapest(True), cheapest(False)

    def decide(facts: SpotJobFacts) -> CapacityKind | None:
        return cloud_capacity_for(facts, spot_price, on_demand_price, policy.spot)

    return decide
