"""`greengpu report`: a month of a ledger as text, JSON or CSV."""

from __future__ import annotations

from pathlib import Path

import click

from greengpu.errors import BadInput


@click.command()
@click.option("--ledger", "ledger_file", required=True, metavar="FILE.db", help="SQLite ledger written by "
              "greengpu simulate --ledger or greengpu daemon.")
@click.option("--month", required=True, metavar="YYYY-MM", help="UTC calendar month to report.")
@click.option("--run", "run_id", type=int, default=None, metavar="N",
              help="Which run of the ledger (needed when it holds several, e.g. one per simulated policy).")
@click.option("--format", "output_format", type=click.Choice(["text", "json", "csv"]), default="text",
              show_default=True)
@click.option("--json", "as_json", is_flag=True, help="The same as --format json.")
@click.option("--out", "out_file", default=None, metavar="FILE", help="Write the report here instead of stdout.")
def report(ledger_file: str, month: str, run_id: int | None, output_format: str, as_json: bool,
           out_file: str | None) -> None:
    """Monthly GPU-hours, energy, cost and CO2 per tenant, plus idle, from a ledger.

    Tenant rows plus idle add up to the totals to a cent and a gram; idle is what no tenant is
    charged for (idle GPUs and hosts, sleeping hosts). The ledger is opened read-only: a report
    never writes to its input, and a file that is not a greengpu ledger is refused.
    """
    from greengpu.accounting.ledger import month_report
    from greengpu.report.monthly import render

    if as_json:
        if output_format not in ("text", "json"):
            raise click.UsageError("--json and --format csv contradict each other")
        output_format = "json"
    if out_file is not None and Path(out_file).resolve() == Path(ledger_file).resolve():
        raise BadInput(f"--out: {out_file} is the ledger itself; a report never writes to its input")
    figures = month_report(Path(ledger_file), month, run_id)
    text = render(figures, output_format)
    if out_file is None:
        click.echo(text, nl=not text.endswith("\n"))
        return
    try:
        Path(out_file).write_text(text, encoding="utf-8")
    except OSError as error:
        raise BadInput(f"--out: cannot write {out_file}: {error.strerror}") from None
