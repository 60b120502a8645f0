"""Node names in an inventory: hostlist expressions expanded and checked (a name that starts with '-' would
reach ssh's or ipmitool's argv as an option), and file names shown as the user wrote them."""

from __future__ import annotations

import re
from pathlib import Path

import hostlist

from greengpu.config.fields import Fields

NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
"""A node name starts with a letter or digit: one starting with '-' would reach ssh's or ipmitool's argv
as an option."""
MAX_NODES_PER_EXPRESSION = 100_000


def expand_names(fields: Fields, key: str = "name") -> list[str]:
    expression = fields.string(key, required=True)
    assert expression is not None
    try:
        names: list[str] = hostlist.expand_hostlist(expression)
    except hostlist.BadHostlist as exc:
        raise fields.error(key, f"bad hostlist expression {expression!r}: {exc}") from None
    if not names:
        raise fields.error(key, f"hostlist expression {expression!r} names no node")
    if len(names) > MAX_NODES_PER_EXPRESSION:
        raise fields.error(key, f"expression names {len(names)} nodes, more than {MAX_NODES_PER_EXPRESSION}")
    for name in names:
        if not NAME_RE.match(name):
            raise fields.error(key, f"invalid node name {name!r} (letters, digits, '_', '.', '-'; starting with "
                                       "a letter or digit)")
    return names


def shown_path(base_dir: Path, name: str) -> str:
    path = Path(name)
    return str(path if path.is_absolute() else base_dir / path)
