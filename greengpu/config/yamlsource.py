"""Load YAML safely and remember the line of every key, so errors can name file, line and key path.

PyYAML's safe loader builds plain Python values and forgets where they came from. We compose the
node graph with the safe loader (no arbitrary tags, no object construction) and convert it
ourselves, recording `path -> line` on the way, within the limits of greengpu.config.limits (no alias
bomb expands past them; an invalid date such as 2024-02-30 is a located error). Duplicate keys, which
PyYAML silently keeps the last of, are an error here: in an inventory they are almost always a copy-paste mistake.
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeAlias

import yaml

from greengpu.config.limits import MAX_YAML_BYTES, MAX_YAML_DEPTH, MAX_YAML_NODES, check_file_size
from greengpu.errors import ConfigError

PathKey = tuple[str | int, ...]
YamlScalar: TypeAlias = str | int | float | bool | None | bytes | dt.date
"""A YAML scalar as the safe loader builds it (a timestamp is a date or datetime, !!binary bytes)."""
YamlValue: TypeAlias = "YamlScalar | list[YamlValue] | dict[str, YamlValue]"
"""A loaded YAML value (keys are made strings): what readers receive before they check it."""


def format_path(path: PathKey) -> str:
    """Render a key path as `nodes[2].type`; a key with a newline or other control character is quoted,
    so an error about it stays on one line."""
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            text = str(part) if str(part).isprintable() else repr(str(part))
            out += f".{text}" if out else text
    return out


def shown(value: object, limit: int = 40) -> str:
    """`repr(value)` cut to `limit` characters, so an error about a huge value stays a short line."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[: limit - 5]}...{text[-2:]} ({len(text)} characters)"


@dataclass
class YamlDocument:
    """A loaded YAML document: plain values plus the line (1-based) of every key path."""

    file: str
    value: YamlValue
    lines: dict[PathKey, int] = field(default_factory=dict)

    def line_of(self, path: PathKey) -> int | None:
        """The line of `path`, or of its nearest parent that has one."""
        probe = path
        while probe:
            if probe in self.lines:
                return self.lines[probe]
            probe = probe[:-1]
        return self.lines.get((), None)

    def error(self, path: PathKey, message: str) -> ConfigError:
        """A ConfigError located at `path`."""
        return ConfigError(self.file, self.line_of(path), format_path(path), message)


class _Loader(yaml.SafeLoader):
    """The safe loader, with YAML 1.2's exponent floats: an unquoted `1e30` is the number 1e30, not the
    string '1e30' (YAML 1.1 needs `1.0e+30`), so a range check, not a type error, answers it."""


_Loader.yaml_implicit_resolvers = {key: list(value) for key, value in yaml.SafeLoader.yaml_implicit_resolvers.items()}
_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float", re.compile(r"^[-+]?(?:[0-9][0-9_]*)(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
    list("-+0123456789"))

_MERGE_TAG = "tag:yaml.org,2002:merge"
_TIMESTAMP_TAG = "tag:yaml.org,2002:timestamp"


class _Converter:
    """Turns the composed node graph into plain values, recording lines, within the limits.

    The graph itself is small even for an alias bomb (aliases share nodes); what grows without bound
    is its expansion, so every value produced is counted, each use of an alias or merge key again,
    and conversion stops at MAX_YAML_NODES values or MAX_YAML_DEPTH levels.
    """

    def __init__(self, doc: YamlDocument, loader: yaml.SafeLoader) -> None:
        self.doc = doc
        self.loader = loader
        self.count = 0

    def _spend(self, node: yaml.Node, path: PathKey) -> None:
        self.count += 1
        if self.count > MAX_YAML_NODES:
            raise ConfigError(self.doc.file, node.start_mark.line + 1, format_path(path),
                              f"expands to more than {MAX_YAML_NODES:,} values (aliases used too often)")
        if len(path) > MAX_YAML_DEPTH:
            raise ConfigError(self.doc.file, node.start_mark.line + 1, "",
                              f"nested more than {MAX_YAML_DEPTH} levels deep")

    def scalar(self, node: yaml.Node, path: PathKey) -> YamlScalar:
        """A scalar's value; one that YAML recognises but cannot build (2024-02-30) is a located error."""
        try:
            value: YamlScalar = self.loader.construct_object(node, deep=True)
            return value
        except (ValueError, OverflowError):
            what = "date" if node.tag == _TIMESTAMP_TAG else "value"
            raise ConfigError(self.doc.file, node.start_mark.line + 1, format_path(path),
                              f"not a valid {what}: {shown(node.value)}") from None

    def _pairs(self, node: yaml.MappingNode, path: PathKey) -> list[tuple[yaml.Node, yaml.Node, bool]]:
        """(key node, value node, merged?) of a mapping, merge keys (<<) resolved: a mapping's own keys
        win over merged ones, and of merged mappings the first listed wins, as in YAML's merge type."""
        own: list[tuple[yaml.Node, yaml.Node, bool]] = []
        merged: list[tuple[yaml.Node, yaml.Node, bool]] = []
        for key_node, value_node in node.value:
            if key_node.tag != _MERGE_TAG:
                own.append((key_node, value_node, False))
                continue
            sources = value_node.value if isinstance(value_node, yaml.SequenceNode) else [value_node]
            for source in sources:
                if not isinstance(source, yaml.MappingNode):
                    raise ConfigError(self.doc.file, source.start_mark.line + 1, format_path(path),
                                      "a merge key (<<) takes a mapping or a list of mappings")
                for pair in self._pairs(source, path):
                    self._spend(pair[0], path)
                    merged.append((pair[0], pair[1], True))
        return own + merged

    def convert(self, node: yaml.Node, path: PathKey) -> YamlValue:
        self._spend(node, path)
        doc = self.doc
        doc.lines.setdefault(path, node.start_mark.line + 1)
        if isinstance(node, yaml.MappingNode):
            result: dict[str, YamlValue] = {}
            for key_node, value_node, merged in self._pairs(node, path):
                line = key_node.start_mark.line + 1
                if not isinstance(key_node, yaml.ScalarNode):
                    raise ConfigError(doc.file, line, format_path(path), "keys must be plain scalars")
                key = self.scalar(key_node, path)
                if not isinstance(key, (str, int, float, bool)) or key is None:
                    raise ConfigError(doc.file, line, format_path(path), "keys must be plain scalars")
                key_str = str(key)
                child = (*path, key_str)
                if key_str in result:
                    if merged:
                        continue  # the mapping's own key, or an earlier merged mapping's, wins
                    raise ConfigError(doc.file, line, format_path(child), "duplicate key")
                doc.lines[child] = line
                result[key_str] = self.convert(value_node, child)
            return result
        if isinstance(node, yaml.SequenceNode):
            items: list[YamlValue] = []
            for index, item in enumerate(node.value):
                child = (*path, index)
                doc.lines[child] = item.start_mark.line + 1
                items.append(self.convert(item, child))
            return items
        return self.scalar(node, path)


def load_yaml_text(text: str, file: str) -> YamlDocument:
    """Parse YAML `text` (named `file` in errors) into a YamlDocument."""
    doc = YamlDocument(file=file, value=None)
    loader: yaml.SafeLoader | None = None
    try:
        loader = _Loader(text)
        root = loader.get_single_node()
        if root is not None:
            doc.value = _Converter(doc, loader).convert(root, ())
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark is not None else None
        problem = exc.problem or exc.context or "invalid YAML"
        raise ConfigError(file, line, "", f"invalid YAML: {problem}") from None
    except yaml.YAMLError as exc:  # e.g. ReaderError for control characters, which carries no mark
        first_line = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise ConfigError(file, None, "", f"invalid YAML: {first_line}") from None
    except RecursionError:
        raise ConfigError(file, None, "", "invalid YAML: nested too deeply") from None
    finally:
        if loader is not None:
            loader.dispose()
    return doc


def load_yaml_file(path: str | Path) -> YamlDocument:
    """Read and parse a YAML file; a missing or unreadable file is a ConfigError.

    At most MAX_YAML_BYTES are read, whatever the file claims to be: a device such as /dev/zero, or a
    pipe, reports no size and would otherwise be read forever."""
    name = str(path)
    try:
        check_file_size(path, MAX_YAML_BYTES)
    except ValueError as exc:
        raise ConfigError(name, None, "", str(exc)) from None
    try:
        with Path(path).open("rb") as source:
            data = source.read(MAX_YAML_BYTES + 1)
        if len(data) > MAX_YAML_BYTES:
            raise ConfigError(name, None, "", f"larger than the limit of {MAX_YAML_BYTES:,} bytes")
        text = data.decode("utf-8")
    except FileNotFoundError:
        raise ConfigError(name, None, "", "file not found") from None
    except IsADirectoryError:
        raise ConfigError(name, None, "", "is a directory, expected a YAML file") from None
    except UnicodeDecodeError:
        raise ConfigError(name, None, "", "not UTF-8 text") from None
    except OSError as exc:
        raise ConfigError(name, None, "", f"cannot read: {exc.strerror}") from None
    return load_yaml_text(text, name)
