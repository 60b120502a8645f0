"""Shared fixtures: paths to the repository, its examples and the public data beside the checkout."""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = Path(os.environ.get("GREENGPU_SHARED_DATA", REPO.parent / "shared" / "data"))


def shared_data_or_skip(relative: str) -> Path:
    """A file under ../shared/data; skips (never in CI) when the public data is not beside the checkout."""
    path = SHARED_DATA / relative
    if not path.exists():
        if os.environ.get("CI"):
            pytest.fail(f"{path} is missing in CI: the public data must be beside the checkout")
        pytest.skip(f"public data {path} not present (it lives in ../shared/data beside a developer checkout)")
    return path


@pytest.fixture
def udp() -> Iterator[socket.socket]:
    """A UDP socket on loopback (port chosen by the system) that receives magic packets in tests."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("127.0.0.1", 0))
    sock.settimeout(5.0)
    yield sock
    sock.close()


@pytest.fixture
def repo() -> Path:
    return REPO

import sys  # noqa: E402

# Shared test helpers (tests/helpers/schedkit.py) are imported by name from every test folder.
sys.path.insert(0, str(Path(__file__).parent / "helpers"))
