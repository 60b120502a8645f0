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


OFFICE = SleepWindow(days=("mon",), start_minute=9 * 60, end_minute=17 * 60)


def test_a_window_within_a_day_includes_its_start_minute_and_excludes_its_end() -> None:
    assert not in_window(at("2024-01-01T08:59:59"), [OFFICE])
    assert in_window(at("2024-01-01T09:00:00"), [OFFICE])
    assert in_window(at("2024-01-01T16:59:59"), [OFFICE])
    assert not in_window(at("2024-01-01T17:00:00"), [OFFICE])
    assert not in_window(at("2024-01-07T10:00:00"), [OFFICE])  # Sunday: the hour fits, the day does not
    assert not in_window(at("2024-01-01T10:00:00"), [])


def test_windows_are_in_the_sites_local_time() -> None:
    # A site at UTC+2: 17:30 UTC is 19:30 there, inside Monday night's window; at UTC-2 it is 15:30.
    assert in_window(at("2024-01-01T17:30:00"), [NIGHTS], utc_offset_s=7200)
    assert not in_window(at("2024-01-01T17:30:00"), [NIGHTS], utc_offset_s=-7200)
    assert not in_window(at("2024-01-01T17:30:00"), [NIGHTS])
    # The next window opens at 19:00 local = 17:00 UTC at UTC+2, 21:00 UTC at UTC-2.
    assert next_window_start_s(at("2024-01-01T12:00:00"), [NIGHTS], utc_offset_s=7200) == at("2024-01-01T17:00:00")
    assert next_window_start_s(at("2024-01-01T12:00:00"), [NIGHTS], utc_offset_s=-7200) == at("2024-01-01T21:00:00")


def test_weekdays_hold_before_the_epoch_too() -> None:
    # 1969-12-01 was a Monday: floor division keeps the weekday right for times before 1970.
    assert in_window(at("1969-12-01T10:00:00"), [OFFICE])
    assert not in_window(at("1969-12-02T10:00:00"), [OFFICE])
    assert next_window_start_s(at("1969-12-01T08:00:00"), [OFFICE]) == at("1969-12-01T09:00:00")


def test_the_next_window_is_strictly_after_now() -> None:
    # Exactly at Monday 19:00 the window is open now: the next one to open is Tuesday's.
    assert next_window_start_s(at("2024-01-01T19:00:00"), [NIGHTS]) == at("2024-01-02T19:00:00")
    assert next_window_start_s(at("2024-01-01T08:00:00"), [OFFICE]) == at("2024-01-01T09:00:00")
    # Monday 09:00 passed: next Monday, a week on (the search reaches 7 days ahead).
    assert next_window_start_s(at("2024-01-01T09:00:00"), [OFFICE]) == at("2024-01-08T09:00:00")


def test_the_next_window_in_local_time_across_a_date_line() -> None:
    # At UTC+10, Monday 20:00 UTC is Tuesday 06:00 at the site: Monday night's window is still open, so
    # the next to open is Tuesday 19:00 local = Tuesday 09:00 UTC.
    assert next_window_start_s(at("2024-01-01T20:00:00"), [NIGHTS], utc_offset_s=10 * 3600) == \
        at("2024-01-02T09:00:00")
