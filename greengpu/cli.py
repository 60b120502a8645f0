"""The `greengpu` command line.

Every command turns bad input into one line on stderr and exit code 2 (docs/INPUTS.md):
`BadInput` from our own validation and click's usage errors alike.
"""

from __future__ import annotations

import logging
import sys
from typing import TypeAlias

import click

from greengpu import __version__
from greengpu.commands.agent import agent
from greengpu.commands.check import check
from greengpu.commands.cloud import cloud
from greengpu.commands.common import EXIT_BAD_INPUT, EXIT_FAILURE, EXIT_OK, VERBOSITY, HelpFirstGroup
from greengpu.commands.daemon import daemon
from greengpu.commands.kube import kube
from greengpu.commands.node_suspend import node_suspend
from greengpu.commands.plan import plan
from greengpu.commands.report import report
from greengpu.commands.simulate import simulate
from greengpu.commands.slurm import slurm
from greengpu.commands.spot import spot
from greengpu.commands.sweep import sweep
from greengpu.control.log_setup import install_handler, restored_after
from greengpu.errors import BadInput

ENV_PREFIX = "GREENGPU"
EXTRA_OF_MODULE = {"pandas": "plan", "numpy": "plan", "statsmodels": "plan", "scipy": "plan", "matplotlib": "plan",
                   "jinja2": "plan", "kubernetes": "kube", "grpc": "kube", "psycopg": "fleet", "ray": "ray"}
"""The install extra (pyproject.toml) that brings each optional library: the slim core has none of them."""


@click.group(cls=HelpFirstGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="greengpu")
@click.option("-v", "--verbose", count=True, help="More log detail on stderr (-v info, -vv debug).")
@click.option("-q", "--quiet", is_flag=True, help="Only errors on stderr: no notes, no progress display.")
@click.pass_context
def cli(ctx: click.Context, verbose: int, quiet: bool) -> None:
    """greengpu cuts the energy, cost and CO2 of shared GPU clusters without hurting the jobs that matter.

    Exit codes: 0 success, 1 runtime failure, 2 bad input or usage. Every option can also be set
    from the environment: each option's help names its variable, GREENGPU_<COMMAND>_<OPTION>
    (e.g. GREENGPU_CHECK_CLUSTER, GREENGPU_SLURM_STATUS_JSON); a flag on the command line wins.
    """
    ctx.meta[VERBOSITY] = -1 if quiet else verbose
    # The log handler and levels this invocation sets (here or in its command) are undone when it ends, so one
    # invocation never leaks into the next, nor into the rest of a process that runs the command line.
    ctx.with_resource(restored_after())
    # Set every time (NOTSET: as the command's own logging says).
    level = logging.ERROR if quiet else logging.NOTSET if not verbose else logging.INFO if verbose == 1 \
        else logging.DEBUG
    logging.getLogger("greengpu").setLevel(level)
    if verbose and not logging.getLogger().handlers:
        install_handler(logging.StreamHandler(sys.stderr), level, "greengpu: %(message)s")


for _command in (check, report, simulate, sweep, agent, daemon, plan, slurm, kube, node_suspend, cloud, spot):
    cli.add_command(_command)


OptionValue: TypeAlias = "float | int | str | tuple[float | int | str, ...] | None"
"""A parsed click option: numeric ones are checked, the rest pass through."""


def _option_variable(path: str, option: click.Option) -> str:
    longest = max(option.opts, key=len).lstrip("-")
    return f"{path}_{longest}".upper().replace("-", "_")


def _check_bounded(ctx: click.Context, param: click.Parameter, value: OptionValue) -> OptionValue:
    """Refuse nan, inf and numbers beyond the input limits in a numeric option.

    click's FloatRange compares, and every comparison with nan is false, so `--target-utilisation nan`
    passed its range; `--growth inf` reached the plan and overflowed there.
    """
    import math

    from greengpu.config.limits import MAX_NUMBER

    for number in value if isinstance(value, tuple) else (value,):
        if isinstance(number, float) and not (math.isfinite(number) and abs(number) <= MAX_NUMBER):
            raise click.BadParameter(f"{number!r} is not a finite number of at most {MAX_NUMBER:g} in magnitude",
                                     ctx, param)
        if isinstance(number, int) and not isinstance(number, bool) and abs(number) > 2**63 - 1:
            raise click.BadParameter(f"{str(number)[:40]} is out of range", ctx, param)
    return value


def _bound_numbers(command: click.Command) -> None:
    """Every float and int option of `command` and its subcommands gets the _check_bounded callback."""
    for param in command.params:
        numeric = isinstance(param.type, (click.types.FloatParamType, click.types.IntParamType))
        if numeric and param.callback is None and not getattr(param, "count", False):
            param.callback = _check_bounded
    if isinstance(command, click.Group):
        for sub in command.commands.values():
            _bound_numbers(sub)


def name_environment_variables(command: click.Command, path: str = ENV_PREFIX) -> None:
    """Give every option its documented variable, GREENGPU_<COMMAND>_<OPTION>, named after the option as
    typed (GREENGPU_CHECK_CLUSTER for `check --cluster`), and show it in --help.

    Click's automatic names follow the Python parameter (`cluster_file`), not the option, so the names
    --help promised were never read; these are explicit.
    """
    for param in command.params:
        if isinstance(param, click.Option) and param.expose_value and param.envvar is None:
            param.envvar = _option_variable(path, param)
            param.show_envvar = True
    if isinstance(command, click.Group):
        for name, sub in command.commands.items():
            name_environment_variables(sub, f"{path}_{name}")


name_environment_variables(cli)
_bound_numbers(cli)


def _one_line(message: str) -> str:
    """The message on one line: a library's text (SQLite quotes a whole table definition) may hold newlines."""
    return " ".join(message.split()) if "\n" in message or "\r" in message else message


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; map bad input to exit 2 with one line on stderr."""
    try:
        # Without standalone mode click returns (not raises) the code of a click.exceptions.Exit.
        returned = cli.main(args=argv, prog_name="greengpu", standalone_mode=False)
    except BadInput as exc:
        click.echo(f"greengpu: {_one_line(str(exc))}", err=True)
        return EXIT_BAD_INPUT
    except click.exceptions.NoArgsIsHelpError as exc:
        click.echo(exc.ctx.get_help() if exc.ctx else str(exc))
        return EXIT_BAD_INPUT
    except click.UsageError as exc:
        command = exc.ctx.command_path if exc.ctx else "greengpu"
        click.echo(f"{command}: {_one_line(exc.format_message())} (try '{command} --help')", err=True)
        return EXIT_BAD_INPUT
    except click.exceptions.Exit as exc:
        return int(exc.exit_code)
    except ModuleNotFoundError as exc:
        extra = EXTRA_OF_MODULE.get((exc.name or "").split(".")[0])
        if extra is None:
            raise
        click.echo(f"greengpu: this command needs the '{extra}' extra ({exc.name} is not installed): "
                   f"python3 -m pip install '.[{extra}]' in the greengpu checkout", err=True)
        return EXIT_FAILURE
    except click.Abort:
        click.echo("greengpu: aborted", err=True)
        return EXIT_FAILURE
    except click.ClickException as exc:
        click.echo(f"greengpu: {exc.format_message()}", err=True)
        return exc.exit_code
    return returned if isinstance(returned, int) else EXIT_OK


def entry_point() -> None:
    """Console-script entry: exit with main()'s code."""
    sys.exit(main())


if __name__ == "__main__":
    entry_point()
