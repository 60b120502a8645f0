"""Error types shared by every body of greengpu.

`BadInput` is what the CLI turns into one line on stderr and exit code 2: a user's file or flag is
wrong, and nothing on a live cluster may change because of it.
"""

from __future__ import annotations


class BadInput(Exception):
    """A user's input (file, flag, row) is invalid; the message is one line naming where."""


class ConfigError(BadInput):
    """A configuration file is invalid at a known file, line and key path."""

    def __init__(self, file: str, line: int | None, key_path: str, message: str) -> None:
        self.file = file
        self.line = line
        self.key_path = key_path
        self.message = message
        where = f"{file}:{line}" if line is not None else file
        key = f" {key_path}:" if key_path else ""
        super().__init__(f"{where}:{key} {message}")
