"""`greengpu spot`: the live side of the spot lever on Kubernetes (docs/SPOT-LIVE.md)."""

from __future__ import annotations

import click

from greengpu.commands.common import HelpFirstGroup
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
def spot_webhook(listen: str, cert_file: str, key_file: str, cluster_file: str, policy_name: str) -> None:
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
    from greengpu.control.exporter import parse_listen
    from greengpu.control.spot_webhook import WebhookServer, tls_context
    from greengpu.errors import BadInput

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
    decide = bind_decision(cluster, policy)
    try:
        server = WebhookServer(host, port, context, decide).start()
    except OSError as error:
        raise click.ClickException(f"spot webhook: cannot listen on {listen}: {error.strerror or error}") from None
    click.echo(f"greengpu: spot webhook on https://{listen.rpartition(':')[0]}:{server.port}/mutate", err=True)
    stopping = threading.Event()
    for number in (signal.SIGTERM, signal.SIGINT):
        signal.signal(number, lambda *_: stopping.set())
    stopping.wait()
    server.stop()


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
