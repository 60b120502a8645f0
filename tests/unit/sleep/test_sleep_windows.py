"""Sleep windows: weekday names, windows that cross midnight, and when the next one opens."""

from __future__ import annotations

from datetime import UTC, datetime
from zoneinfo import ZoneInfo

from hypothesis import given, settings
from hypothesis import strategies as st

from greengpu.policy import WEEKDAYS, SleepWindow
from greengpu.sleep.suspends import in_window, next_window_start_s

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
    # Athens is UTC+2 in January: 17:30 UTC is 19:30 there, inside Monday night's window; in Sao Paulo (UTC-3)
    # it is 14:30.
    assert in_window(at("2024-01-01T17:30:00"), [NIGHTS], "Europe/Athens")
    assert not in_window(at("2024-01-01T17:30:00"), [NIGHTS], "America/Sao_Paulo")
    assert not in_window(at("2024-01-01T17:30:00"), [NIGHTS])
    # The next window opens at 19:00 local: 17:00 UTC in Athens, 22:00 UTC in Sao Paulo.
    assert next_window_start_s(at("2024-01-01T12:00:00"), [NIGHTS], "Europe/Athens") == at("2024-01-01T17:00:00")
    assert next_window_start_s(at("2024-01-01T12:00:00"), [NIGHTS], "America/Sao_Paulo") == \
        at("2024-01-01T22:00:00")


def test_the_local_day_decides_the_weekday() -> None:
    # Monday 00:30 in Tokyo is still Sunday 15:30 UTC: Monday's office window is Tokyo's Monday.
    assert not in_window(at("2024-01-07T15:30:00"), [OFFICE])
    assert in_window(at("2024-01-08T00:30:00"), [OFFICE], "Asia/Tokyo")  # 09:30 Monday in Tokyo
    assert not in_window(at("2024-01-08T08:30:00"), [OFFICE], "Asia/Tokyo")  # 17:30 there


BERLIN = "Europe/Berlin"


def test_a_window_keeps_its_wall_clock_time_across_daylight_saving() -> None:
    # Berlin is UTC+1 in winter and UTC+2 in summer: 19:00 local is 18:00 UTC in March before the change
    # (Sunday 2024-03-31) and 17:00 UTC after it; the night window closes at 07:00 local either side.
    assert in_window(at("2024-03-29T18:00:00"), [NIGHTS], BERLIN)  # Friday 19:00 CET
    assert not in_window(at("2024-03-25T17:30:00"), [NIGHTS], BERLIN)  # Monday 18:30 CET
    assert in_window(at("2024-04-01T17:00:00"), [NIGHTS], BERLIN)  # Monday 19:00 CEST
    assert not in_window(at("2024-04-01T16:59:00"), [NIGHTS], BERLIN)
    assert in_window(at("2024-04-02T04:59:00"), [NIGHTS], BERLIN)  # Tuesday 06:59 CEST
    assert not in_window(at("2024-04-02T05:00:00"), [NIGHTS], BERLIN)  # 07:00 CEST
    assert next_window_start_s(at("2024-03-29T20:00:00"), [NIGHTS], BERLIN) == at("2024-04-01T17:00:00")
    # Back to winter time on Sunday 2024-10-27: Monday's window opens at 19:00 CET = 18:00 UTC.
    assert next_window_start_s(at("2024-10-25T20:00:00"), [NIGHTS], BERLIN) == at("2024-10-28T18:00:00")


def test_a_window_starting_in_the_skipped_hour_opens_when_the_clock_jumps() -> None:
    # On 2024-03-31 Berlin's clocks jump from 02:00 to 03:00 (01:00 UTC): a 02:30 start happens at the jump;
    # on 2024-10-27 02:30 is shown twice, and the window opens at its first showing (00:30 UTC).
    early = SleepWindow(days=("sun",), start_minute=150, end_minute=300)
    assert next_window_start_s(at("2024-03-30T12:00:00"), [early], BERLIN) == at("2024-03-31T01:00:00")
    assert in_window(at("2024-03-31T01:00:00"), [early], BERLIN)
    assert not in_window(at("2024-03-31T00:59:59"), [early], BERLIN)
    assert next_window_start_s(at("2024-10-26T12:00:00"), [early], BERLIN) == at("2024-10-27T00:30:00")


@settings(max_examples=300, deadline=None)
@given(moment_s=st.integers(min_value=int(at("2000-01-01T00:00:00")), max_value=int(at("2040-01-01T00:00:00"))),
       zone_name=st.sampled_from(["UTC", BERLIN, "America/New_York", "Australia/Lord_Howe", "Asia/Kolkata"]),
       day=st.sampled_from(WEEKDAYS), start_minute=st.integers(0, 1439), length_min=st.integers(1, 1439))
def test_windows_agree_with_the_wall_clock_minute_by_minute(moment_s: int, zone_name: str, day: str,
                                                            start_minute: int, length_min: int) -> None:
    window = SleepWindow(days=(day,), start_minute=start_minute, end_minute=(start_minute + length_min) % 1440)
    opens = next_window_start_s(moment_s, [window], zone_name)
    assert opens is not None and moment_s < opens <= moment_s + 8 * 86_400
    # Just before it opens it is not open; from its opening it is (a start inside a skipped hour included).
    assert in_window(opens, [window], zone_name)
    assert not in_window(opens - 1, [window], zone_name) or _open_through(moment_s, opens, window, zone_name)
    # Reference: the local wall clock read with zoneinfo directly.
    local = datetime.fromtimestamp(opens, ZoneInfo(zone_name))
    assert WEEKDAYS[local.weekday()] == day or _after_a_gap(opens, zone_name)
    assert local.hour * 60 + local.minute >= start_minute or _after_a_gap(opens, zone_name)


def _open_through(from_s: int, to_s: float, window: SleepWindow, zone_name: str) -> bool:
    """Whether the window was open the whole way from `from_s` (a window that wraps into its own next opening)."""
    return all(in_window(t, [window], zone_name) for t in range(from_s, int(to_s), 600))


def _after_a_gap(moment_s: float, zone_name: str) -> bool:
    """Whether the UTC offset changed in the minute before `moment_s` (the clock jumped)."""
    zone = ZoneInfo(zone_name)
    return datetime.fromtimestamp(moment_s, zone).utcoffset() != datetime.fromtimestamp(moment_s - 60, zone).utcoffset()


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
    # In Brisbane (UTC+10, no daylight saving), Monday 20:00 UTC is Tuesday 06:00 at the site: Monday night's
    # window is still open, so the next to open is Tuesday 19:00 local = Tuesday 09:00 UTC.
    assert next_window_start_s(at("2024-01-01T20:00:00"), [NIGHTS], "Australia/Brisbane") == \
        at("2024-01-02T09:00:00")
