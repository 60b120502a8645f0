"""A greengpu command's logging set-up owns one handler on the root logger and takes it back when it ends.

`logging.basicConfig(force=True)` in the hooks, the daemon and the agent dropped every handler of the process that
ran the command line and left greengpu's own behind, bound to the stream that was sys.stderr during the command:
after a test that ran `main` under pytest's capture (closed at the test's end), every warning logged later in the
run printed "--- Logging error ---" and a traceback to stderr (the spot webhook's test saw it)."""

from __future__ import annotations

import io
import logging
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from greengpu.cli import main
from greengpu.control.hooks.slurm_hooks import setup_logging


@pytest.fixture
def root_as_it_was() -> Iterator[logging.Logger]:
    """The root logger, put back after the test whatever the set-up under test did to it."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield root
    for handler in root.handlers:
        if handler not in handlers:
            handler.close()
    root.handlers[:] = handlers
    root.setLevel(level)


def _bad_slurm_invocation(tmp_path: Path, *log: str) -> list[str]:
    """`greengpu slurm ... status` on an inventory that is not YAML: the hooks' logging set up, exit 2 at once."""
    bad = tmp_path / "cluster.yaml"
    bad.write_text("nodes: [1")
    return ["slurm", "--cluster", str(bad), "--state", str(tmp_path / "state.db"), *log, "status"]


def test_setting_up_twice_leaves_one_greengpu_handler_and_the_callers_own(
        root_as_it_was: logging.Logger, tmp_path: Path) -> None:
    root = root_as_it_was
    callers = logging.StreamHandler(io.StringIO())
    root.addHandler(callers)
    before = list(root.handlers)
    setup_logging(None)
    setup_logging(str(tmp_path / "hooks.log"))
    added = [handler for handler in root.handlers if handler not in before]
    assert len(added) == 1 and isinstance(added[0], logging.FileHandler), root.handlers
    assert all(handler in root.handlers for handler in before)  # the caller's handlers (and pytest's) stay
    assert added[0].get_name() == "greengpu"


def test_the_command_line_run_twice_in_one_process_leaves_the_root_logger_as_it_was(
        root_as_it_was: logging.Logger, tmp_path: Path) -> None:
    root = root_as_it_was
    callers = logging.StreamHandler(io.StringIO())
    root.addHandler(callers)
    before, levels = list(root.handlers), (root.level, logging.getLogger("greengpu").level)
    for log in ([], ["--log", str(tmp_path / "hooks.log")], ["--log", str(tmp_path / "hooks.log")]):
        assert main(["-q", *_bad_slurm_invocation(tmp_path, *log)]) == 2
        assert root.handlers == before
        assert (root.level, logging.getLogger("greengpu").level) == levels
    assert "greengpu slurm status refused" in (tmp_path / "hooks.log").read_text()  # logged, then closed


def test_a_warning_after_the_command_ran_on_a_stderr_since_closed_is_no_logging_error(
        root_as_it_was: logging.Logger, tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """As under pytest: the command runs with a captured stderr that is closed when its test ends."""
    captured = io.StringIO()
    with monkeypatch.context() as patch:
        patch.setattr(sys, "stderr", captured)
        assert main(_bad_slurm_invocation(tmp_path)) == 2
    assert "invalid YAML" in captured.getvalue()
    captured.close()
    logging.getLogger("greengpu.spot").warning("spot webhook: connection from 127.0.0.1 failed")
    assert "Logging error" not in capsys.readouterr().err
