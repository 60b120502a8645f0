"""The shapes of JSON documents as greengpu reads and writes them, so that a parsed document is typed
(`JsonValue`) rather than `Any` until a reader checks it and turns it into a dataclass."""

from __future__ import annotations

from typing import TypeAlias

JsonScalar: TypeAlias = str | int | float | bool | None
"""A JSON leaf as `json.loads` returns it."""
JsonValue: TypeAlias = "JsonScalar | list[JsonValue] | dict[str, JsonValue]"
"""Any JSON value as `json.loads` returns it (a recursive alias: mypy checks every level)."""
JsonObject: TypeAlias = "dict[str, JsonValue]"
"""A JSON object as `json.loads` returns it: what readers receive before they check it."""
JsonArray: TypeAlias = "list[JsonValue]"
"""A JSON array as `json.loads` returns it."""
