"""`greengpu simulate`: replay a trace under policies, side by side."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypedDict

import click

from greengpu.accounting.ledger_url import cluster_name as name_of_cluster
from greengpu.commands.common import checked_ledger_path, note, verbosity
from greengpu.errors import BadInput
from greengpu.json_types import JsonObject
from greengpu.sim.replicas import MAX_REPLICAS, replica_jobs, summary
from greengpu.sim.results import SimResult

if TYPE_CHECKING:
    from rich.progress import Progress


@click.command()
@click.option("--trace", "trace_file", required=True, metavar="FILE", help="Job trace (docs/TRACES.md).")
@click.option("--trace-format", type=click.Choice(["csv", "philly", "sacct"]), default="csv", show_default=True,
              help="csv: canonical columns; philly: the public Philly CSV; sacct: sacct --parsable2 output.")
@click.option("--cluster", "cluster_file", required=True, metavar="FILE", help="Cluster inventory YAML.")
@click.option("--policy", "policies", multiple=True, required=True, metavar="P",
              help="Built-in policy name or policy file; repeat to compare policies side by side.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object on stdout (keys in docs/SIMULATOR.md).")
@click.option("--until", "until_s", type=click.FloatRange(min=0, min_open=True), default=None, metavar="SECONDS",
              help="Stop the virtual clock this many seconds after the first submit.")
@click.option("--skip-bad-rows", is_flag=True, help="Skip malformed trace rows and jobs that can never start on the "
              "cluster (counted) instead of stopping.")
@click.option("--seed", type=int, default=0, show_default=True,
              help="Seed for randomised events (spot interruptions); the same inputs and seed give the same results.")
@click.option("--replicas", type=click.IntRange(1, MAX_REPLICAS), default=1, show_default=True, metavar="N",
              help="Replay each policy N times: the trace as given, then with every submit time moved by under a "
                   "second (seeded by --seed); prints the median and range of each figure over the N. One replay of a "
                   "busy queue is one draw: compare policies on the medians (docs/SIMULATOR.md).")
@click.option("--ledger", "ledger_file", default=None, metavar="FILE.db|postgresql://...",
              help="Also record energy, cost and CO2 per job, tenant and node in this ledger: an SQLite file, or a "
                   "PostgreSQL database shared by a fleet (the fleet extra); one run per policy; read it with "
                   "greengpu report.")
@click.option("--cluster-name", default=None, metavar="NAME",
              help="The cluster the ledger's runs are recorded under (default: the inventory file's name without "
                   ".cluster.yaml).")
def simulate(trace_file: str, trace_format: str, cluster_file: str, policies: tuple[str, ...], as_json: bool,
             until_s: float | None, skip_bad_rows: bool, seed: int, replicas: int, ledger_file: str | None,
             cluster_name: str | None) -> None:
    """Replay a job trace under one or more policies and compare energy, cost, CO2, waits and safety.

    The replay runs the same scheduling core as the daemon on a virtual clock. Figures are facility
    energy (GPUs + hosts, x PUE), cost, CO2, waits per class, preemptions, node sleep and wakes, and
    invariant_violations, which must be 0.
    """
    from greengpu.config.inventory import load_cluster
    from greengpu.config.policy import load_policy
    from greengpu.sim.engine import Simulation
    from greengpu.sim.feasibility import split_never_fitting
    from greengpu.sim.traces import REPLAY_SPAN_S, read_trace

    recorded_cluster = name_of_cluster(cluster_file, cluster_name)
    cluster = load_cluster(cluster_file)
    loaded = [load_policy(p) for p in policies]
    trace = read_trace(trace_file, trace_format, skip_bad_rows=skip_bad_rows, max_span_s=REPLAY_SPAN_S)
    if trace.skipped:
        note(f"skipped {trace.skipped} bad row(s); first: {trace.first_error}")
    jobs, never = split_never_fitting(trace.jobs, cluster)
    if never and not skip_bad_rows:
        more = f" (and {len(never) - 1} more such jobs)" if len(never) > 1 else ""
        raise BadInput(f"{trace_file}: {never[0]} ({cluster_file}){more}; --skip-bad-rows leaves such jobs out")
    if never:
        note(f"left out {len(never)} job(s) that can never start on {cluster_file}; first: {never[0]}")
    if not jobs:
        raise BadInput(f"{trace_file}: no GPU jobs in the trace")
    runs: list[SimulateRun] = []
    ledger_path = checked_ledger_path(ledger_file) if ledger_file is not None else None
    written: list[str] = []
    for policy in loaded:
        with _progress(f"simulating {policy.name}", len(jobs)) as report:
            simulation = Simulation(cluster, policy, jobs, until_s=until_s, progress=report,
                                    attribute=ledger_path is not None, seed=seed)
            result = simulation.run()
        if result.unplaceable_jobs:
            note(f"{policy.name}: {len(result.unplaceable_jobs)} job(s) never started, no placement exists "
                 f"for them on this cluster (first: {result.unplaceable_jobs[0]})")
        run_id = None
        if ledger_path is not None and simulation.attribution is not None:
            from greengpu.accounting.ledger_write import write_run
            from greengpu.sim.ledger_rows import ledger_extras

            cloud_rows = ledger_extras(simulation, cluster_file, policy)
            run_id = write_run(ledger_path, simulation.attribution, kind="simulate", policy=policy.name,
                               source=str(trace_file), cluster=recorded_cluster, cloud=cloud_rows)
            written.append(f"{run_id} ({policy.name})")
        spread = None
        if replicas > 1:
            replayed = [result]
            for replica in range(1, replicas):
                with _progress(f"simulating {policy.name}, replica {replica + 1} of {replicas}", len(jobs)) as report:
                    replayed.append(Simulation(cluster, policy, replica_jobs(jobs, replica, seed), until_s=until_s,
                                           progress=report, seed=seed).run())
            spread = summary(replayed)
        runs.append(SimulateRun(result, run_id, trace.skipped + len(never), seed, spread))
    if ledger_path is not None:
        note(f"wrote run{'s' if len(written) > 1 else ''} {', '.join(written)} to {ledger_path}; read one with "
             f"greengpu report --ledger {ledger_path} --run N --month YYYY-MM")
    if as_json:
        click.echo(json.dumps({"results": [run.to_json() for run in runs]}, sort_keys=False))
        return
    _print_simulation([run.result for run in runs])
    if replicas > 1:
        _print_replicas(runs)


@dataclass(frozen=True)
class SimulateRun:
    """One policy's replay as `greengpu simulate` reports it: the figures, where the ledger put them, and the
    trace rows left out and the seed (JSON only when printed)."""
    result: SimResult
    ledger_run_id: int | None
    skipped_rows: int
    seed: int
    replicas: JsonObject | None = None
    """The median, least and most of each figure over `--replicas` replays (greengpu.sim.replicas.summary)."""

    def to_json(self) -> JsonObject:
        out = self.result.to_json()
        if self.ledger_run_id is not None:
            out["ledger_run_id"] = self.ledger_run_id
        out["skipped_rows"] = self.skipped_rows
        out["seed"] = self.seed
        if self.replicas is not None:
            out["replicas"] = self.replicas
        return out


class _progress:
    """A rich progress bar on stderr when it is a terminal; silent otherwise."""

    def __init__(self, label: str, total: int) -> None:
        self.label = label
        self.total = total
        self.bar: Progress | None = None

    def __enter__(self) -> Callable[[int, int], None] | None:
        if not sys.stderr.isatty() or verbosity() < 0:
            return None
        from rich.console import Console
        from rich.progress import Progress

        bar = self.bar = Progress(console=Console(stderr=True), transient=True)
        bar.start()
        task = bar.add_task(self.label, total=self.total)

        def report(done: int, total: int) -> None:
            bar.update(task, completed=done)

        return report

    def __exit__(self, *exc: object) -> None:
        if self.bar is not None:
            self.bar.stop()


def fmt(value: float | None, digits: int = 1) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.{digits}f}"
    return f"{value:,}"


def _print_simulation(results: list[SimResult]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title="Simulated policies")
    table.add_column("figure")
    for result in results:
        table.add_column(str(result.policy), justify="right")
    currency = results[0].currency
    rows: list[tuple[str, Callable[[SimResult], str]]] = [
        ("jobs completed", lambda r: f"{r.jobs_completed:,} / {r.jobs:,}"),
        ("facility energy (kWh)", lambda r: fmt(r.energy_kwh)),
        ("GPU energy (kWh)", lambda r: fmt(r.gpu_energy_kwh)),
        (f"cost ({currency})", lambda r: fmt(r.cost, 2)),
        ("CO2 (kg)", lambda r: fmt(r.co2_kg)),
        ("wait p50 / p95 (s)", lambda r: f"{fmt(r.wait_s.p50, 0)} / {fmt(r.wait_s.p95, 0)}"),
        ("wait mean (s)", lambda r: fmt(r.wait_s.mean)),
        ("GPU utilisation", lambda r: f"{r.gpu_hours_allocated / r.gpu_hours_capacity:.1%}"
         if r.gpu_hours_capacity else "-"),
        (f"cloud cost ({currency})", lambda r: fmt(r.cloud_cost, 2)),
        ("spot share", lambda r: f"{r.spot_share:.1%}"),
        ("spot interruptions", lambda r: fmt(r.interruptions)),
        ("deadline misses", lambda r: fmt(r.deadline_misses)),
        ("preemptions", lambda r: fmt(r.preemptions)),
        ("lost GPU-hours", lambda r: fmt(r.lost_gpu_hours)),
        ("node sleep hours", lambda r: fmt(r.node_sleep_hours)),
        ("wakes", lambda r: fmt(r.wakes)),
        ("SLA violations", lambda r: fmt(r.sla_violations)),
        ("invariant violations", lambda r: fmt(r.invariant_violations)),
        ("simulation wall time (s)", lambda r: fmt(r.sim_wall_s)),
    ]
    if any(r.mig_reconfigurations is not None for r in results):  # only with MIG GPUs (docs/GPU-SHARING.md)
        rows.insert(len(rows) - 2, ("MIG reconfigurations", lambda r: fmt(r.mig_reconfigurations)))
    for label, render in rows:
        table.add_row(label, *[render(r) for r in results])
    Console().print(table)
    base = results[0]
    for other in results[1:]:
        if base.energy_kwh:
            Console().print(headline(headline_figures(other), headline_figures(base)))


def _print_replicas(runs: list[SimulateRun]) -> None:
    """The median and range over the replicas of the figures a comparison of policies rests on."""
    from rich.console import Console
    from rich.table import Table

    first = runs[0].replicas
    count = first["count"] if first is not None else 1
    table = Table(title=f"Median (least - most) over {count} replicas: submit times moved by under a second")
    table.add_column("figure")
    for run in runs:
        table.add_column(str(run.result.policy), justify="right")
    figures = (("facility energy (kWh)", ("energy_kwh",), 1), ("wait p95 (s)", ("wait_s", "p95"), 0),
               ("wait p99 (s)", ("wait_s", "p99"), 0), ("preemptions", ("preemptions",), 0),
               ("lost GPU-hours", ("lost_gpu_hours",), 1), ("SLA violations", ("sla_violations",), 0),
               ("invariant violations", ("invariant_violations",), 0))
    for label, path, digits in figures:
        table.add_row(label, *[_replica_cell(run.replicas, path, digits) for run in runs])
    Console().print(table)


def _replica_cell(spread: JsonObject | None, path: tuple[str, ...], digits: int) -> str:
    if spread is None:
        return "-"
    values = []
    for name in ("median", "min", "max"):
        value: object = spread[name]
        for key in path:
            value = value.get(key) if isinstance(value, dict) else None
        values.append(fmt(float(value), digits) if isinstance(value, (int, float)) else "-")
    return f"{values[0]} ({values[1]} - {values[2]})"


class HeadlineFigures(TypedDict):
    policy: str
    energy_kwh: float
    co2_kg: float
    cost: float
    currency: str


def headline_figures(result: SimResult) -> HeadlineFigures:
    return {"policy": result.policy, "energy_kwh": result.energy_kwh, "co2_kg": result.co2_kg, "cost": result.cost,
            "currency": result.currency}


def _change(value: float, base: float) -> str:
    """'12.5% less' or '3.0% more' (never a saving when the figure rose), 'no change' when equal."""
    if value == base:
        return "no change"
    if not base:
        return "more" if value > base else "less"
    share = abs(value / base - 1)
    return f"{share:.1%} {'more' if value > base else 'less'}"


def headline(other: HeadlineFigures, base: HeadlineFigures) -> str:
    """One line: facility energy, CO2 and total cost (energy plus cloud) of `other` against `base`."""
    currency = other["currency"]
    return (f"{other['policy']} vs {base['policy']}: {_change(other['energy_kwh'], base['energy_kwh'])} facility "
            f"energy, {_change(other['co2_kg'], base['co2_kg'])} CO2, total cost (energy plus cloud) "
            f"{other['cost']:,.2f} {currency} against {base['cost']:,.2f}: {_change(other['cost'], base['cost'])}")
