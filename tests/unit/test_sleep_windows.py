"""Sleep windows: weekday names, windows that cross midnight, and when the next one opens."""

from __future__ import annotations

from datetime import UTC, datetime

from greengpu.energy.sleep import in_window, next_window_start_s
from greengpu.policy import SleepWindow

NIGHTS = SleepWindow(days=("mon", "tue", "wed", "thu", "fri"), start_minute=19 * 60, end_minute=7 * 60)
WEEKEND = SleepWindow(days=("sat", "sun"))


def at(text: str) -> float:
    return datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp()


def test_window_crossing_midnight_belongs_to_the_day_it_starts() -> None:
    assert in_window(at("2024-01-01T19:00:00"), [NIGHTS])  # Monday evening
    assert in_window(at("2024-01-02T06:59:00"), [NIGHTS])  # Tuesday early morning, Monday's window
    assert not in_window(at("2024-01-02T07:00:00"), [NIGHTS])
    assert not in_window(at("2024-01-01T06:00:00"), [NIGHTS])  # Monday early: Sunday has no night window
    assert in_window(at("2024-01-06T06:00:00"), [NIGHTS])  # Saturday early: Friday's night
    assert in_window(at("2024-01-06T12:00:00"), [NIGHTS, WEEKEND])


def test_next_window_start() -> None:
    assert next_window_start_s(at("2024-01-01T12:00:00"), [NIGHTS]) == at("2024-01-01T19:00:00")
    assert next_window_start_s(at("2024-01-05T20:00:00"), [NIGHTS]) == at("2024-01-08T19:00:00")  # Fri -> Mon
    assert next_window_start_s(at("2024-01-05T20:00:00"), [NIGHTS, WEEKEND]) == at("2024-01-06T00:00:00")
    assert next_window_start_s(at("2024-01-01T12:00:00"), []) is None
