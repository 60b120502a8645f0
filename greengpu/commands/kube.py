"""`greengpu kube`: Kubernetes node sleep and wake."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

import click

from greengpu.commands.common import EXIT_FAILURE, HelpFirstGroup, echo_events
from greengpu.localtime import DAY_S  # the ceiling of interval and timeout flags (longer: a typo, or a timer overflow)

if TYPE_CHECKING:
    from greengpu.control.hooks.kube_sleep import KubeSleep


@click.group(cls=HelpFirstGroup)
@click.option("--cluster", "cluster_file", default="/etc/greengpu/cluster.yaml", show_default=True, metavar="FILE")
@click.option("--state", "state_file", default="/var/lib/greengpu/state.db", show_default=True, metavar="FILE")
@click.option("--policy", "policy_name", default="default", show_default=True, metavar="P")
@click.option("--kube-host", default=None, metavar="URL",
              help="API server URL without auth (default: in-cluster config, else kubeconfig).")
@click.option("--suspend-command", default=None, metavar="TEMPLATE",
              help="Run per node to suspend it ({node}). Default: ssh NODE greengpu node-suspend.")
@click.pass_context
def kube(ctx: click.Context, cluster_file: str, state_file: str, policy_name: str, kube_host: str | None,
         suspend_command: str | None) -> None:
    """Kubernetes node sleep: cordon and drain (PodDisruptionBudgets respected), wake for pending GPU pods."""

    from greengpu.backends.wol import Waker
    from greengpu.config.inventory import load_cluster
    from greengpu.config.policy import load_policy
    from greengpu.control.hooks.kube_sleep import KUBE_SUSPEND_COMMAND, KubeSleep
    from greengpu.control.hooks.sleep_control import SleepControl, run_suspend
    from greengpu.control.hooks.state_store import StateStore

    cluster = load_cluster(cluster_file)
    policy = load_policy(policy_name)
    template = suspend_command or KUBE_SUSPEND_COMMAND

    with _kube_step():
        from greengpu.backends.kubernetes import KubeApi, make_api_client

        control = SleepControl(StateStore(state_file), Waker(cluster), policy.sleep)
        ctx.obj = KubeSleep(KubeApi(make_api_client(host=kube_host)), control, cluster, policy,
                            lambda node: run_suspend(template, node))


@contextmanager
def _kube_step() -> Iterator[None]:
    """An unreachable or refusing API server, or a missing client, is one line and exit 1."""
    import sqlite3

    from greengpu.backends.kubernetes import KubeError

    try:
        yield
    except KubeError as error:
        raise click.ClickException(f"kube: {error}") from None
    except (sqlite3.Error, OSError) as error:
        raise click.ClickException(f"kube: {error}") from None


@kube.command("sleep")
@click.argument("node")
@click.option("--reason", default="greengpu: idle", show_default=True)
@click.option("--force", is_flag=True,
              help="Also evict bare pods (nothing recreates them) and pods with emptyDir data, as kubectl drain "
              "--force --delete-emptydir-data.")
@click.option("--drain-timeout-s", type=click.FloatRange(min=0, max=DAY_S), default=300.0, show_default=True,
              help="How long evicted pods may take to terminate before the sleep is called off (uncordoned).")
@click.option("--json", "as_json", is_flag=True, help="One JSON object: node, slept, message.")
@click.pass_obj
def kube_sleep(sleeper: KubeSleep, node: str, reason: str, force: bool, drain_timeout_s: float, as_json: bool) -> None:
    """Cordon, drain and suspend NODE; refuses (exit 1) when GPU pods run there, a PDB blocks the drain,
    bare or emptyDir pods are there (without --force) or pods do not terminate in time."""
    sleeper.drain_timeout_s = drain_timeout_s
    with _kube_step():
        outcome = sleeper.sleep(node, reason, force=force)
    if as_json:
        click.echo(json.dumps({"node": outcome.node, "slept": outcome.slept, "message": outcome.message}))
    else:
        click.echo(outcome.message)
    if not outcome.slept:
        raise click.exceptions.Exit(EXIT_FAILURE)


@kube.command("sleep-idle")
@click.option("--drain-timeout-s", type=click.FloatRange(min=0, max=DAY_S), default=300.0, show_default=True,
              help="How long evicted pods may take to terminate before a sleep is called off (uncordoned).")
@click.option("--json", "as_json", is_flag=True, help="One JSON array: node, slept, message per node chosen.")
@click.pass_obj
def kube_sleep_idle(sleeper: KubeSleep, drain_timeout_s: float, as_json: bool) -> None:
    """Put to sleep the idle nodes the policy's sleep lever chooses now: idle past the timeout, inside a
    window, beyond the warm reserve, within the suspend rate; none while GPU pods wait. Run it every
    minute (a systemd timer or cron line, docs/SLEEP.md); it remembers when each node went idle."""
    import time

    sleeper.drain_timeout_s = drain_timeout_s
    with _kube_step():
        outcomes = sleeper.sleep_idle(time.time())
    if as_json:
        click.echo(json.dumps([{"node": o.node, "slept": o.slept, "message": o.message} for o in outcomes]))
        return
    for outcome in outcomes:
        click.echo(outcome.message)


@kube.command("wake-pending")
@click.option("--json", "as_json", is_flag=True, help="One JSON object: woken (the nodes a wake-up went to).")
@click.pass_obj
def kube_wake_pending(sleeper: KubeSleep, as_json: bool) -> None:
    """Wake the fewest sleeping nodes that let pending GPU pods run, and any the warm reserve lacks (within
    the policy's wake rate and minimum time asleep)."""
    import time

    with _kube_step():
        woken = sleeper.wake_for_pending(time.time())
    if as_json:
        click.echo(json.dumps({"woken": list(woken)}))
        return
    for node in woken:
        click.echo(f"{node}: wake-up sent")


@kube.command("verify")
@click.option("--json", "as_json", is_flag=True, help="One JSON array: node, event (send, up, timeout, failed, "
              "uncordoned), message.")
@click.pass_obj
def kube_verify(sleeper: KubeSleep, as_json: bool) -> None:
    """Close wake-ups of Ready nodes (and uncordon them), retry late ones, fail the lost ones."""
    with _kube_step():
        events = sleeper.verify_events()
    echo_events(events, as_json)
