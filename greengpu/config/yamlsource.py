"""Load YAML safely and remember the line of every key, so errors can name file, line and key path.

PyYAML's safe loader builds plain Python values and forgets where they came from. We compose the
node graph with the safe loader (no arbitrary tags, no object construction) and convert it
ourselves, recording `path -> line` on the way. Duplicate keys, which PyYAML silently keeps the
last of, are an error here: in an inventory they are almost always a copy-paste mistake.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from greengpu.errors import ConfigError

PathKey = tuple[str | int, ...]


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


@dataclass
class YamlDocument:
    """A loaded YAML document: plain values plus the line (1-based) of every key path."""

    file: str
    value: Any
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


def _convert(node: yaml.Node, path: PathKey, doc: YamlDocument, loader: yaml.SafeLoader) -> Any:
    doc.lines.setdefault(path, node.start_mark.line + 1)
    if isinstance(node, yaml.MappingNode):
        loader.flatten_mapping(node)  # resolves YAML merge keys (<<) the way safe_load does
        result: dict[Any, Any] = {}
        for key_node, value_node in node.value:
            key = loader.construct_object(key_node, deep=True)
            if not isinstance(key, (str, int, float, bool)) or key is None:
                line = key_node.start_mark.line + 1
                raise ConfigError(doc.file, line, format_path(path), "keys must be plain scalars")
            key_str = str(key)
            child = (*path, key_str)
            if key_str in result:
                raise ConfigError(
                    doc.file, key_node.start_mark.line + 1, format_path(child), "duplicate key"
                )
            doc.lines[child] = key_node.start_mark.line + 1
            result[key_str] = _convert(value_node, child, doc, loader)
        return result
    if isinstance(node, yaml.SequenceNode):
        items = []
        for index, item in enumerate(node.value):
            child = (*path, index)
            doc.lines[child] = item.start_mark.line + 1
            items.append(_convert(item, child, doc, loader))
        return items
    return loader.construct_object(node, deep=True)


def load_yaml_text(text: str, file: str) -> YamlDocument:
    """Parse YAML `text` (named `file` in errors) into a YamlDocument."""
    doc = YamlDocument(file=file, value=None)
    loader: yaml.SafeLoader | None = None
    try:
        loader = yaml.SafeLoader(text)
        root = loader.get_single_node()
        if root is not None:
            doc.value = _convert(root, (), doc, loader)
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
    """Read and parse a YAML file; a missing or unreadable file is a ConfigError."""
    name = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(name, None, "", "file not found") from None
    except IsADirectoryError:
        raise ConfigError(name, None, "", "is a directory, expected a YAML file") from None
    except UnicodeDecodeError:
        raise ConfigError(name, None, "", "not UTF-8 text") from None
    except OSError as exc:
        raise ConfigError(name, None, "", f"cannot read: {exc.strerror}") from None
    return load_yaml_text(text, name)
