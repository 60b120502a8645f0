"""The agent's journal: one JSON line per limit or clock it set, so a crash never leaves a GPU capped.

Every write the agent makes to a GPU is appended (and fsynced) *before* the agent moves on, with the
value that was there before. A session opens with `start` and closes with `stop` after the GPUs were
restored. A `start` with no `stop` after it is a session that died (kill -9, power loss, OOM): the
next agent restores every GPU that session touched before it does anything else.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

WRITE_EVENTS = ("set_limit", "lock_clocks")


@dataclass(frozen=True)
class Touched:
    """A GPU left changed by a session that did not stop cleanly."""

    index: int
    uuid: str
    original_limit_w: float | None
    """The limit before greengpu's first write of that session (None: only clocks were touched)."""
    clocks_locked: bool


class Journal:
    """Append-only JSON-lines file."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)

    def append(self, event: str, **fields: Any) -> dict[str, Any]:
        entry = {"time": round(time.time(), 3), "event": event, **fields}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("a", encoding="utf-8") as out:
            out.write(json.dumps(entry, sort_keys=True) + "\n")
            out.flush()
            os.fsync(out.fileno())
        return entry

    def entries(self) -> list[dict[str, Any]]:
        """Every entry; a torn last line (the process died mid-write) is ignored."""
        if not self.path.exists():
            return []
        entries = []
        for line in self.path.read_text(encoding="utf-8").splitlines():
            try:
                entries.append(json.loads(line))
            except json.JSONDecodeError:
                continue
        return entries

    def left_changed(self) -> list[Touched]:
        """GPUs that sessions without a clean `stop` changed and did not put back, in GPU order."""
        entries = self.entries()
        last_stop = max((i for i, e in enumerate(entries) if e["event"] == "stop"), default=-1)
        touched: dict[str, dict[str, Any]] = {}
        for entry in entries[last_stop + 1:]:
            uuid = entry.get("uuid")
            if uuid is None:
                continue
            state = touched.setdefault(uuid, {"index": entry["gpu"], "original": None, "limit_set": False,
                                              "clocks": False})
            if entry["event"] == "set_limit":
                if not state["limit_set"]:
                    state["original"] = entry.get("previous_w")
                state["limit_set"] = True
            elif entry["event"] == "lock_clocks":
                state["clocks"] = True
            elif entry["event"] == "reset_clocks":
                state["clocks"] = False
        return sorted((Touched(s["index"], uuid, s["original"], s["clocks"])
                       for uuid, s in touched.items() if s["limit_set"] or s["clocks"]),
                      key=lambda t: t.index)
