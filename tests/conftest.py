"""Shared fixtures: paths to the repository, its examples and the public data it ships (data/)."""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PUBLIC_DATA = Path(os.environ.get("GREENGPU_PUBLIC_DATA", REPO / "data"))
"""Public data shipped with the repository (data/README.md gives sources, licences and citations); the
mutation job, which runs the tests from a copy, points GREENGPU_PUBLIC_DATA back at it."""


def public_data(relative: str) -> Path:
    """A file under data/; a missing one is a broken checkout, never a reason to skip."""
    path = PUBLIC_DATA / relative
    if not path.exists():
        pytest.fail(f"{path} is missing: the public data ships in the repository's data/ folder")
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
