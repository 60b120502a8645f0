"""`greengpu sweep`: the replays of a policy grid (policies x months x seeds) in parallel, resumable."""

from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING, Any

import click

from greengpu.commands.common import note
from greengpu.errors import BadInput

if TYPE_CHECKING:
    from greengpu.sim.sweep import ReplaySpec


@click.command()
@click.option("--trace", "trace_file", required=True, metavar="FILE", help="Job trace (docs/TRACES.md).")
@click.option("--trace-format", type=click.Choice(["csv", "philly", "sacct"]), default="csv", show_default=True,
              help="As for greengpu simulate.")
@click.option("--cluster", "cluster_file", required=True, metavar="FILE", help="Cluster inventory YAML.")
@click.option("--policy", "policies", multiple=True, required=True, metavar="P",
              help="Built-in policy name or policy file; repeat for each policy of the grid.")
@click.option("--month", "months", multiple=True, metavar="YYYY-MM",
              help="Replay only the jobs submitted in this UTC month; repeat for months x policies (default: the "
                   "whole trace).")
@click.option("--seed", "seeds", type=int, multiple=True, metavar="N",
              help="Seed of randomised events (spot interruptions); repeat for a grid of seeds (default: 0).")
@click.option("--until", "until_s", type=click.FloatRange(min=0, min_open=True), default=None, metavar="SECONDS",
              help="Stop each replay's clock this many seconds after its first submit.")
@click.option("--skip-bad-rows", is_flag=True, help="As for greengpu simulate.")
@click.option("--workers", type=click.IntRange(min=1, max=4096), default=None, metavar="N",
              help="Local processes (default: every core; 1 runs the replays one after another in this process).")
@click.option("--ray", "ray_address", default=None, metavar="ADDRESS",
              help="Run the replays on this Ray cluster (HOST:PORT of its head, or ray://HOST:PORT; the ray extra); "
                   "its workers must see the same trace, inventory and policy files.")
@click.option("--store", "store_file", required=True, metavar="FILE",
              help="SQLite file the results are kept in as each replay finishes; a rerun skips the replays it holds.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object: the results in the grid's order.")
@click.option("--frontier", "show_frontier", is_flag=True,
              help="Print the Pareto frontier of the policies (facility energy, p95 and p99 wait) per month and seed, "
                   "and where --mark sits on it (docs/SIMULATOR.md).")
@click.option("--mark", default=None, metavar="POLICY",
              help="The policy whose place on the frontier is told (a built-in's name or a file's stem; default: "
                   "default, when the grid has it).")
@click.option("--plot", "plot_file", default=None, metavar="FILE.png",
              help="Write the frontier chart (energy against p95 and p99 wait) to this PNG (the plan extra).")
def sweep(trace_file: str, trace_format: str, cluster_file: str, policies: tuple[str, ...], months: tuple[str, ...],
          seeds: tuple[int, ...], until_s: float | None, skip_bad_rows: bool, workers: int | None,
          ray_address: str | None, store_file: str, as_json: bool, show_frontier: bool, mark: str | None,
          plot_file: str | None) -> None:
    """Replay a trace under every policy (x month x seed) of a grid, in parallel, each result identical to the
    serial replay's; results are kept in --store as they finish, so an interrupted sweep resumes where it was.

    Progress goes to stderr; docs/FLEET.md has the figures of a local pool and a Ray cluster.
    """
    from pathlib import Path

    from greengpu.accounting.ledger import month_bounds_s
    from greengpu.config.inventory import load_cluster
    from greengpu.config.policy import load_policy
    from greengpu.sim.sweep import grid, load_inputs
    from greengpu.sim.sweep_frontier import check_frontier_flags, frontier_groups, frontier_text, group_json
    from greengpu.sim.sweep_run import run_sweep
    from greengpu.sim.sweep_store import SweepStore

    if ray_address is not None and workers is not None:
        raise BadInput("--workers sizes the local pool; a Ray cluster runs as many replays as it has CPUs: give one")
    if ray_address is not None:
        from greengpu.sim.sweep_run import check_ray_address

        check_ray_address(ray_address)  # before any replay is planned: a mistyped address is one line at once
    for month in months:
        month_bounds_s(month)
    # Every input is read here first: a bad file is one line now, not a failure in a worker.
    load_cluster(cluster_file)
    for policy in policies:
        load_policy(policy)
    specs = grid(trace_file, trace_format, cluster_file, policies, months, seeds, until_s, skip_bad_rows)
    marked = check_frontier_flags(specs, mark, show_frontier, plot_file)
    if not load_inputs(specs[0]):
        raise BadInput(f"{trace_file}: no GPU jobs in the trace")
    store = SweepStore(Path(store_file))
    try:
        outcome = run_sweep(specs, store, workers or os.cpu_count() or 1, ray_address, note)
    finally:
        store.close()
    note(f"sweep: {len(specs)} replays ({outcome.ran} run, {outcome.from_store} from the store) in "
         f"{outcome.wall_s:.1f} s; results in {store_file}")
    groups = frontier_groups(specs, outcome.results, marked) if show_frontier or plot_file else []
    if plot_file is not None:
        from greengpu.sim.sweep_chart import write_chart

        write_chart([(g.title(), g.points, g.mark) for g in groups], Path(plot_file))
        note(f"sweep: frontier chart in {plot_file}")
    if as_json:
        doc = {"results": outcome.results, "replays": len(specs), "ran": outcome.ran,
               "from_store": outcome.from_store, "wall_s": round(outcome.wall_s, 3)}
        if show_frontier:
            doc["frontiers"] = [group_json(g) for g in groups]
        click.echo(json.dumps(doc))
        return
    for line in frontier_text(groups) if show_frontier else _replay_lines(specs, outcome.results):
        click.echo(line)


def _replay_lines(specs: list[ReplaySpec], results: list[dict[str, Any]]) -> list[str]:
    from greengpu.sim.sweep import timed_free

    lines = []
    for spec, result in zip(specs, results, strict=True):
        figures = timed_free(result)
        if figures.get("empty"):
            lines.append(f"{spec.label():<40} no jobs")
            continue
        lines.append(f"{spec.label():<40} energy {figures['energy_kwh']:>12,.1f} kWh  cost {figures['cost']:>12,.2f}  "
                     f"CO2 {figures['co2_kg']:>10,.1f} kg  wait p95 {figures['wait_s']['p95']:>9,.0f} s")
    return lines
