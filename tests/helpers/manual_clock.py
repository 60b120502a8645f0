"""A clock the test moves by hand (`clock.now_s += 60`), for code that takes a `clock` callable."""

from __future__ import annotations


class ManualClock:
    def __init__(self, now_s: float = 1000.0) -> None:
        self.now_s = now_s

    def __call__(self) -> float:
        return self.now_s
