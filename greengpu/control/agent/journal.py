"""The agent's journal: one JSON line per limit or clock it set, so a crash never leaves a GPU capped.

Every write the agent makes to a GPU is appended (and fsynced) *before* the agent moves on, with the
value that was there before. A session opens with `start` and closes with `stop` after the GPUs were
restored. A `start` with no `stop` after it is a session that died (kill -9, power loss, OOM): the
next agent restores every GPU that session touched before it does anything else.

The journal is read defensively: a damaged line (a torn write, `null`, `[]`, an object without an
`event`, a GPU entry without an index or uuid) is skipped and reported (logged, and listed in
`Journal.damaged`), never a reason to stop before the restore. A write that follows a torn last
line starts on a fresh line, so the torn one cannot swallow it.
"""

from __future__ import annotations

import json
import logging
import math
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from greengpu.errors import BadInput
from greengpu.json_types import JsonObject, JsonValue

WRITE_EVENTS = ("set_limit", "lock_clocks")
log = logging.getLogger("greengpu.journal")
_MAX_LINE_BYTES = 64 * 1024
"""Longest journal line read (an entry is ~200 bytes); longer ones are skipped without being held whole."""
_REPORTED_LINES = 5
"""Damaged lines named one by one in the log; the rest are counted."""


@dataclass(frozen=True)
class Touched:
    """A GPU left changed by a session that did not stop cleanly."""

    index: int
    uuid: str
    original_limit_w: float | None
    """The limit before greengpu's first write of that session (None: only clocks were touched)."""
    clocks_locked: bool


@dataclass
class _Changes:
    """What one session did to one GPU, entry by entry."""

    index: int
    original: float | None = None
    limit_set: bool = False
    clocks: bool = False


class Journal:
    """Append-only JSON-lines file."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.damaged: list[str] = []
        """`line N: why` of every line the last read skipped."""

    def append(self, event: str, **fields: JsonValue) -> JsonObject:
        entry: JsonObject = {"time": round(time.time(), 3), "event": event, **fields}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("a+b") as out:
            # A torn last line (the previous writer died mid-line) must not swallow this entry.
            torn = out.tell() > 0 and _last_byte(out) != b"\n"
            out.write((("\n" if torn else "") + json.dumps(entry, sort_keys=True) + "\n").encode("utf-8"))
            out.flush()
            os.fsync(out.fileno())
        return entry

    def entries(self) -> list[JsonObject]:
        """Every well-formed entry, in order; damaged lines are skipped, listed in `damaged` and logged."""
        self.damaged = []
        if not self.path.exists():
            return []
        if not self.path.is_file() and not self.path.is_dir():
            raise BadInput(f"--journal: {self.path} is not a regular file (a device or a pipe)")
        entries = []
        try:
            source = self.path.open("rb")
        except IsADirectoryError:
            raise BadInput(f"--journal: {self.path} is a directory, expected the agent's journal file") from None
        except OSError as error:
            raise BadInput(f"--journal: cannot read {self.path}: {error.strerror}") from None
        with source:
            for number, (raw, whole) in enumerate(_lines(source), start=1):
                text = raw.decode("utf-8", errors="replace").strip()
                if not whole:
                    self.damaged.append(f"line {number}: longer than {_MAX_LINE_BYTES:,} bytes")
                    continue
                if not text:
                    continue
                entry, problem = _parse(text)
                if entry is not None:
                    entries.append(entry)
                if problem is not None:
                    self.damaged.append(f"line {number}: {problem}")
        for line in self.damaged[:_REPORTED_LINES]:
            log.warning("journal %s: skipped %s", self.path, line)
        if len(self.damaged) > _REPORTED_LINES:
            log.warning("journal %s: %d more damaged lines skipped", self.path, len(self.damaged) - _REPORTED_LINES)
        return entries

    def left_changed(self) -> list[Touched]:
        """GPUs that sessions without a clean `stop` changed and did not put back, in GPU order."""
        entries = self.entries()
        last_stop = max((i for i, e in enumerate(entries) if e["event"] == "stop"), default=-1)
        touched: dict[str, _Changes] = {}
        for entry in entries[last_stop + 1:]:
            uuid, gpu = entry.get("uuid"), entry.get("gpu")
            if not isinstance(uuid, str) or not isinstance(gpu, int):  # checked by _problem: absent or both typed
                continue
            state = touched.setdefault(uuid, _Changes(gpu))
            if entry["event"] == "set_limit":
                if not state.limit_set:
                    previous = entry.get("previous_w")
                    state.original = previous if isinstance(previous, int | float) else None
                state.limit_set = True
            elif entry["event"] == "lock_clocks":
                state.clocks = True
            elif entry["event"] == "reset_clocks":
                state.clocks = False
        return sorted((Touched(s.index, uuid, s.original, s.clocks)
                       for uuid, s in touched.items() if s.limit_set or s.clocks),
                      key=lambda t: t.index)


def _lines(source: IO[bytes]) -> Iterator[tuple[bytes, bool]]:
    """(line, whole?) of a binary file, reading at most _MAX_LINE_BYTES of any line into memory."""
    while True:
        raw: bytes = source.readline(_MAX_LINE_BYTES + 1)
        if not raw:
            return
        if len(raw) <= _MAX_LINE_BYTES or raw.endswith(b"\n"):
            yield raw, True
            continue
        while raw and not raw.endswith(b"\n"):  # skip the rest of the overlong line
            raw = source.readline(_MAX_LINE_BYTES + 1)
        yield b"", False


def _last_byte(handle: IO[bytes]) -> bytes:
    handle.seek(-1, os.SEEK_END)
    last: bytes = handle.read(1)
    handle.seek(0, os.SEEK_END)
    return last


def _parse(text: str) -> tuple[JsonObject | None, str | None]:
    """(entry or None, problem or None) of one line. A line whose start was torn off by a crash and
    whose end is a whole entry (an older greengpu appended to a torn line) gives that entry back."""
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):  # JSONDecodeError, or an integer of over 4300 digits
        start = text.find('{"', 1)
        while start != -1:
            try:
                recovered = json.loads(text[start:])
            except (ValueError, RecursionError):  # JSONDecodeError, or an integer of over 4300 digits
                start = text.find('{"', start + 1)
                continue
            entry, _ = _parse(json.dumps(recovered))
            return entry, "torn entry before a whole one (the whole one kept)"
        return None, "not JSON (a torn write?)"
    problem = _problem(value)
    return (None, problem) if problem else (value, None)


def _problem(value: object) -> str | None:
    """Why `value` is not a journal entry, or None when it is one."""
    if not isinstance(value, dict):
        return f"not an object: {json.dumps(value)[:40]}"
    if not isinstance(value.get("event"), str):
        return "no event"
    if "uuid" in value:
        if not isinstance(value["uuid"], str):
            return "uuid is not a string"
        gpu = value.get("gpu")
        if isinstance(gpu, bool) or not isinstance(gpu, int) or gpu < 0:
            return "no GPU index"
    previous = value.get("previous_w")
    if previous is not None and (isinstance(previous, bool) or not isinstance(previous, (int, float))
                                 or not math.isfinite(previous) or previous <= 0):
        return "previous_w is not a positive number"
    return None
