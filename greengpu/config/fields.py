"""Typed access to one YAML mapping with errors that name file, line and key path."""

from __future__ import annotations

from collections.abc import Iterable

from greengpu.config.limits import MAX_NUMBER, finite_number
from greengpu.config.yamlsource import PathKey, YamlDocument, YamlValue, shown

MAX_INTEGER = 1_000_000_000
"""Largest whole number a key without its own maximum takes (retries, counts, reservations)."""


def _type_name(value: YamlValue) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "a mapping"
    return type(value).__name__


class Fields:
    """A mapping at `path` inside a YamlDocument, read key by key with validation."""

    def __init__(self, doc: YamlDocument, path: PathKey, value: YamlValue, what: str = "a mapping") -> None:
        if not isinstance(value, dict):
            raise doc.error(path, f"expected {what}, got {_type_name(value)}")
        self.doc = doc
        self.path = path
        self.data: dict[str, YamlValue] = value

    def error(self, key: str | None, message: str) -> Exception:
        """A ConfigError at this mapping's `key` (or the mapping itself)."""
        return self.doc.error(self.path if key is None else (*self.path, key), message)

    def reject_unknown(self, allowed: Iterable[str]) -> None:
        """Fail on the first key not in `allowed`, listing what is allowed."""
        allowed_set = set(allowed)
        for key in self.data:
            if key not in allowed_set:
                choices = ", ".join(sorted(allowed_set))
                raise self.error(key, f"unknown key (allowed: {choices})")

    def has(self, key: str) -> bool:
        """Whether `key` is present (null counts as absent)."""
        return self.data.get(key) is not None

    def raw(self, key: str) -> YamlValue:
        """The raw value of `key` or None."""
        return self.data.get(key)

    def sub(self, key: str, required: bool = False) -> Fields | None:
        """The mapping under `key`, or None when absent and not required."""
        if not self.has(key):
            if required:
                raise self.error(key, "missing required key")
            return None
        return Fields(self.doc, (*self.path, key), self.data[key])

    def number(
        self,
        key: str,
        default: float | None = None,
        *,
        required: bool = False,
        minimum: float | None = None,
        maximum: float | None = None,
        exclusive_minimum: bool = False,
    ) -> float | None:
        """A finite number, range-checked."""
        if not self.has(key):
            if required:
                raise self.error(key, "missing required key")
            return default
        value = self.data[key]
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise self.error(key, f"expected a number, got {_type_name(value)} {shown(value)}")
        try:
            value = finite_number(value, maximum=MAX_NUMBER if maximum is None else max(abs(maximum), MAX_NUMBER))
        except ValueError as exc:
            raise self.error(key, f"{exc}: {shown(value)}") from None
        if minimum is not None:
            if exclusive_minimum and value <= minimum:
                raise self.error(key, f"must be greater than {minimum:g}, got {value:g}")
            if not exclusive_minimum and value < minimum:
                raise self.error(key, f"must be at least {minimum:g}, got {value:g}")
        if maximum is not None and value > maximum:
            raise self.error(key, f"must be at most {maximum:g}, got {value:g}")
        return float(value)

    def req_number(self, key: str, *, minimum: float | None = None, maximum: float | None = None,
                   exclusive_minimum: bool = False) -> float:
        """A required finite number."""
        value = self.number(key, required=True, minimum=minimum, maximum=maximum,
                            exclusive_minimum=exclusive_minimum)
        assert value is not None
        return value

    def integer(self, key: str, default: int | None = None, *, required: bool = False,
                minimum: int | None = None, maximum: int | None = None) -> int | None:
        """A whole number, range-checked."""
        if not self.has(key):
            if required:
                raise self.error(key, "missing required key")
            return default
        value = self.data[key]
        if isinstance(value, bool) or not isinstance(value, int):
            if isinstance(value, float) and value.is_integer():
                value = int(value)
            else:
                raise self.error(key, f"expected a whole number, got {_type_name(value)} {shown(value)}")
        if minimum is not None and value < minimum:
            raise self.error(key, f"must be at least {minimum}, got {shown(value)}")
        limit = MAX_INTEGER if maximum is None else maximum
        if value > limit:
            raise self.error(key, f"must be at most {limit}, got {shown(value)}")
        if value < -MAX_INTEGER:
            raise self.error(key, f"must be at least {-MAX_INTEGER}, got {shown(value)}")
        return int(value)

    def string(self, key: str, default: str | None = None, *, required: bool = False,
               choices: Iterable[str] | None = None) -> str | None:
        """A non-empty string, optionally one of `choices`."""
        if not self.has(key):
            if required:
                raise self.error(key, "missing required key")
            return default
        value = self.data[key]
        if not isinstance(value, str):
            raise self.error(key, f"expected a string, got {_type_name(value)} {shown(value)}")
        if not value.strip():
            raise self.error(key, "must not be empty")
        if choices is not None:
            options = list(choices)
            if value not in options:
                raise self.error(key, f"must be one of {', '.join(options)}, got {shown(value)}")
        return value

    def boolean(self, key: str, default: bool) -> bool:
        """A YAML boolean (true/false)."""
        if not self.has(key):
            return default
        value = self.data[key]
        if not isinstance(value, bool):
            raise self.error(key, f"expected true or false, got {_type_name(value)} {shown(value)}")
        return value

    def items(self, key: str, *, required: bool = False) -> list[tuple[PathKey, YamlValue]]:
        """The elements of a list under `key`, each with its path."""
        if not self.has(key):
            if required:
                raise self.error(key, "missing required key")
            return []
        value = self.data[key]
        if not isinstance(value, list):
            raise self.error(key, f"expected a list, got {_type_name(value)}")
        return [((*self.path, key, index), item) for index, item in enumerate(value)]
