"""`greengpu report`: a month of a ledger as a bill (text, JSON, CSV or HTML), by tenant, node, class, job or
cluster (a fleet's shared ledger)."""

from __future__ import annotations

import click


@click.command()
@click.option("--ledger", "ledger_file", required=True, metavar="FILE.db|postgresql://...", help="Ledger written "
              "by greengpu simulate --ledger or greengpu daemon: an SQLite file, or a fleet's PostgreSQL database "
              "(the fleet extra).")
@click.option("--month", required=True, metavar="YYYY-MM", help="UTC calendar month to report; `last`: the month "
              "before this one (for a scheduled report).")
@click.option("--run", "run_id", type=int, multiple=True, metavar="N",
              help="Which run of the ledger (needed when it holds several, e.g. one per simulated policy); repeat "
                   "to bill several runs together.")
@click.option("--cluster-name", "cluster", default=None, metavar="NAME",
              help="Bill every run of this cluster in a shared ledger together (docs/FLEET.md).")
@click.option("--fleet", is_flag=True, help="Bill every run of the ledger together: one bill across the clusters "
              "(runs of one cluster that overlap, such as two policies of one replay, are refused).")
@click.option("--format", "output_format", type=click.Choice(["text", "json", "csv", "html"]), default="text",
              show_default=True, help="html: one self-contained page with charts (needs the plan extra).")
@click.option("--json", "as_json", is_flag=True, help="The same as --format json.")
@click.option("--out", "out_file", default=None, metavar="FILE", help="Write the report here instead of stdout "
              "({month} in the name becomes the month reported).")
@click.option("--aggregate", type=click.Choice(["tenant", "node", "class", "job", "cluster"]), default="tenant",
              show_default=True, help="What a row of the bill is; cluster: one row per cluster of the fleet "
                                      "(implies --fleet unless runs are named).")
@click.option("--share-idle", type=click.Choice(["none", "proportional", "even"]), default="none", show_default=True,
              help="Idle energy and its cost: its own row, or shared by allocated GPU-hours, or in equal parts.")
@click.option("--baseline", "baseline_run", type=int, default=None, metavar="RUN",
              help="Show the saving against this run of the ledger (e.g. the always-on run of the same replay).")
@click.option("--settings", "settings_file", default=None, metavar="FILE",
              help="Tariff, carbon (location- and market-based), PUE and embodied emissions (docs/REPORT.md).")
def report(ledger_file: str, month: str, run_id: tuple[int, ...], cluster: str | None, fleet: bool,
           output_format: str, as_json: bool, out_file: str | None, aggregate: str, share_idle: str,
           baseline_run: int | None, settings_file: str | None) -> None:
    """Monthly GPU-hours, energy, cost and CO2 by tenant, node, job class or job, plus idle, from a ledger.

    Rows plus idle add up to the totals to a cent and a gram under every idle-sharing rule. The ledger
    is opened read-only: a report never writes to its input, and a file that is not a greengpu ledger
    is refused. docs/REPORT.md gives the settings, the JSON keys and the CSV columns.
    """
    from greengpu.commands.common import note
    from greengpu.report.monthly_main import report_main

    if as_json:
        if output_format not in ("text", "json"):
            raise click.UsageError(f"--json and --format {output_format} contradict each other")
        output_format = "json"
    report_main(ledger_file, month, run_id, output_format, out_file, aggregate, share_idle, baseline_run,
                settings_file, note, cluster=cluster, fleet=fleet)
