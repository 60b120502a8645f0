"""Walking parsed YAML documents in the fuzz tests."""

from __future__ import annotations

from typing import Any


def key_paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every key and index path inside `value` (nested dicts and lists), the document itself left out."""
    found = [prefix] if prefix else []
    if isinstance(value, dict):
        for key, child in value.items():
            found += key_paths(child, (*prefix, key))
    elif isinstance(value, list):
        for index, child in enumerate(value):
            found += key_paths(child, (*prefix, index))
    return found
