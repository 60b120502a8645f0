"""The one log handler a greengpu command puts on the root logger, and the root logger put back after it.

The daemon, the agent, the Slurm, cloud and spot hooks and `greengpu -v` each log through one handler on the
root logger, bound to the stream that is sys.stderr when the command starts (or to the hooks' log file). The
handler is named greengpu's (`HANDLER_NAME`): a second set-up replaces it rather than stacking a second one, and
leaves the handlers that are not greengpu's alone (`logging.basicConfig(force=True)` closed and dropped those of a
program that runs the command line in its own process). `restored_after` takes greengpu's handler off again when
the command ends, with the levels it set: left behind, it wrote to a stream its caller may since have closed (a
test's captured stderr), and every later warning of that process became a "--- Logging error ---" traceback.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager

HANDLER_NAME = "greengpu"
"""The name (`logging.Handler.get_name`) of the handler a greengpu command installs on the root logger."""

LEVELS_SET = ("", "greengpu", "apscheduler")
"""The loggers whose level a command sets (the root, greengpu's, APScheduler's): put back by `restored_after`."""


def greengpu_handlers() -> list[logging.Handler]:
    """The root logger's handlers that a greengpu command installed (at most one, but for a caller's own)."""
    return [handler for handler in logging.getLogger().handlers if handler.get_name() == HANDLER_NAME]


def install_handler(handler: logging.Handler, level: int, fmt: str) -> None:
    """Make `handler` greengpu's one handler on the root logger, at `level` with `fmt`.

    The handler greengpu installed before (an earlier set-up in this process) is removed and closed; other
    handlers stay."""
    root = logging.getLogger()
    for old in greengpu_handlers():
        root.removeHandler(old)
        old.close()
    handler.setFormatter(logging.Formatter(fmt))
    handler.set_name(HANDLER_NAME)
    root.addHandler(handler)
    root.setLevel(level)


@contextmanager
def restored_after() -> Iterator[None]:
    """Around one command: on the way out, greengpu's handlers installed within are removed and closed (a log
    file flushed) and the levels in `LEVELS_SET` are put back as they were."""
    root = logging.getLogger()
    before = set(root.handlers)
    levels = [(logging.getLogger(name), logging.getLogger(name).level) for name in LEVELS_SET]
    try:
        yield
    finally:
        for handler in greengpu_handlers():
            if handler not in before:
                root.removeHandler(handler)
                handler.close()
        for logger, level in levels:
            logger.setLevel(level)
