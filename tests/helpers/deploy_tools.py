"""Tools the deploy/ validation tests run: found, or a skip that says how to get them (never in CI).

.ci/run installs every one of them, so CI=true turns a missing tool into a failure, not a skip.
"""

from __future__ import annotations

import importlib
import os
import shutil
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"


def _missing(what: str, how: str) -> None:
    message = f"{what} is not installed ({how})"
    if os.environ.get("CI"):
        pytest.fail(f"{message}: .ci/run installs it, so CI never skips this test")
    pytest.skip(message)


def require_tool(name: str, how: str) -> str:
    """The path of the executable `name`; a skip (outside CI) or a failure (in CI) when it is missing."""
    path = shutil.which(name)
    if path is None:
        _missing(name, how)
    assert path is not None
    return path


def require_module(name: str, how: str) -> ModuleType:
    """The Python module `name`, imported; a skip (outside CI) or a failure (in CI) when it is missing."""
    try:
        return importlib.import_module(name)
    except ImportError:
        _missing(f"the Python module {name}", how)
        raise  # unreachable: _missing skips or fails
