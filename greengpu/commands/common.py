"""Shared pieces of the command modules: exit codes, verbosity and notes, progress displays, event echoing."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import click

from greengpu.errors import BadInput

if TYPE_CHECKING:
    from rich.progress import Progress

    from greengpu.accounting.ledger_url import Ledger

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_BAD_INPUT = 2
VERBOSITY = "greengpu.verbosity"
"""Key in click's shared context meta: -1 quiet, 0 normal, 1 and more verbose."""


class HelpFirstGroup(click.Group):
    """A group whose subcommands answer --help before the group's own setup runs.

    Click runs a group's callback before it parses the subcommand's arguments; the `slurm` and `kube`
    groups load the cluster inventory there, so `greengpu slurm verify --help` failed on a machine
    without /etc/greengpu/cluster.yaml. Help needs no configuration file.
    """

    group_class = type  # subgroups (slurm, kube) are of this class too

    def invoke(self, ctx: click.Context) -> object:
        protected = getattr(ctx, "_protected_args", None)
        args = [*(protected if protected is not None else ctx.protected_args), *ctx.args]
        rest = args[1:]
        if "--" in rest:
            rest = rest[: rest.index("--")]
        if args and any(arg in ctx.help_option_names for arg in rest):
            name, command, sub_args = self.resolve_command(ctx, args)
            if command is not None:
                with ctx:
                    command.make_context(name, sub_args, parent=ctx)  # prints the help and exits
        return super().invoke(ctx)


def verbosity() -> int:
    """-1 with -q, 0 by default, the number of -v otherwise."""
    ctx = click.get_current_context(silent=True)
    return int(ctx.meta.get(VERBOSITY, 0)) if ctx is not None else 0


def note(message: str) -> None:
    """A remark for the person at the terminal, on stderr (never mixed into --json stdout); -q silences it."""
    if verbosity() >= 0:
        click.echo(f"greengpu: {message}", err=True)


@dataclass
class _LineState:
    """What `phases` printed last on a pipe: the phase, when, and the line held back within the phase."""
    phase: str | None = None
    printed_s: float = 0.0
    first: bool = True
    pending: str | None = None


class ReportedEvent(Protocol):
    """A wake-verification event as the commands print it (greengpu's WakeEvent)."""

    @property
    def node(self) -> str: ...

    @property
    def kind(self) -> str: ...

    @property
    def message(self) -> str: ...


class phases:
    """Progress on stderr (never on stdout, so --json output stays clean; never with -q); yields a callback
    taking what is being done, as `phase` or `phase: detail`.

    On a terminal, a spinner with the current phase and the time spent. Elsewhere (a pipe, a log file, CI),
    plain lines: one when the phase changes, and one every `every_s` seconds within a phase, so a long
    backtest is not silent. On a pipe the first phase (reading the inputs) is not announced: a bad input
    then gets its one error line alone."""

    def __init__(self, label: str, every_s: float = 5.0) -> None:
        self.label = label
        self.every_s = every_s
        self.bar: Progress | None = None
        self.flush: Callable[[], None] | None = None

    def __enter__(self) -> Callable[[str], None] | None:
        if verbosity() < 0:
            return None
        if not sys.stderr.isatty():
            return self._lines()
        from rich.console import Console
        from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

        bar = self.bar = Progress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(),
                                  console=Console(stderr=True), transient=True)
        bar.start()
        task = bar.add_task(self.label, total=None)

        def phase(name: str) -> None:
            bar.update(task, description=f"{self.label}: {name}")

        return phase

    def _lines(self) -> Callable[[str], None]:
        import time

        state = _LineState()

        def say(text: str) -> None:
            state.printed_s, state.pending = time.monotonic(), None
            click.echo(f"{self.label}: {text}", err=True)

        def phase(text: str) -> None:
            key = text.split(":", 1)[0]
            changed = key != state.phase
            state.phase = key
            if state.first:  # reading the inputs: a bad one fails with its own line, alone
                state.first = False
                return
            if changed and state.pending is not None:
                say(state.pending)  # where the phase ended (the last count of its tasks)
            if changed or time.monotonic() - state.printed_s >= self.every_s:
                say(text)
            else:
                state.pending = text

        def flush() -> None:
            if state.pending is not None:
                say(state.pending)

        self.flush = flush
        return phase

    def __exit__(self, *exc: object) -> None:
        if self.bar is not None:
            self.bar.stop()
        if self.flush is not None and exc[0] is None:
            self.flush()


def echo_events(events: Sequence[ReportedEvent], as_json: bool) -> None:
    """Wake-verification events: one JSON array, or one line each for people."""
    if as_json:
        click.echo(json.dumps([{"node": e.node, "event": e.kind, "message": e.message} for e in events]))
        return
    for event in events:
        click.echo(event.message)


def echo_lines(lines: list[str], as_json: bool) -> None:
    if as_json:
        click.echo(json.dumps(lines))
        return
    for line in lines:
        click.echo(line)


def checked_ledger_path(name: str) -> Ledger:
    """A ledger that can be written, checked before any replay starts: an SQLite file (an existing one must be
    a ledger), or a PostgreSQL database (reachable, empty or a ledger; its schema made or migrated now)."""
    from greengpu.accounting.ledger import runs
    from greengpu.accounting.ledger_url import PostgresLedger, parse_ledger

    ledger = parse_ledger(name)
    if isinstance(ledger, PostgresLedger):
        from greengpu.accounting.ledger_pg import open_for_writing

        open_for_writing(ledger).close()
        return ledger
    path = ledger
    if path.is_dir() or not path.parent.is_dir():
        raise BadInput(f"--ledger: cannot write a ledger at {name}")
    if path.exists():
        runs(path)  # an existing file must be a ledger of this schema: fail now, not after the replay
    return path
