"""The site's wall clock: which weekday and minute a moment is in a named IANA time zone, and the moment a
local wall-clock time happens, daylight saving included.

Sleep windows are written as a site's people say them ("19:00 to 07:00 on weekdays, Europe/Berlin"); the
decision core keeps time as seconds since the epoch in UTC. UTC itself is done with arithmetic (the default,
and what every replay without a time zone reads), any other zone with the standard library's zoneinfo.
"""

from __future__ import annotations

import datetime as dt
from functools import lru_cache
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

UTC_NAME = "UTC"
DAY_S = 86_400


@lru_cache(maxsize=64)
def zone(name: str) -> ZoneInfo:
    """The time zone called `name` (raises KeyError when there is none: see `time_zone_problem`)."""
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError) as error:
        raise KeyError(name) from error


def time_zone_problem(name: str) -> str | None:
    """Why `name` is not a usable IANA time zone name, or None when it is."""
    try:
        zone(name)
    except KeyError:
        return (f"unknown time zone {name!r}: give an IANA name such as Europe/Berlin or America/New_York "
                "(the system's time zone database, or `pip install tzdata`, provides them)")
    return None


def weekday_and_minute(time_s: float, timezone: str = UTC_NAME) -> tuple[int, int]:
    """The local weekday (0 is Monday) and minute of the day of `time_s` on the wall clock of `timezone`."""
    if timezone == UTC_NAME:
        return int(time_s // DAY_S + 3) % 7, int(time_s % DAY_S // 60)  # 1970-01-01 was a Thursday
    local = dt.datetime.fromtimestamp(time_s, zone(timezone))
    return local.weekday(), local.hour * 60 + local.minute


def local_hour_of_day(hour_index: int, timezone: str, memo: dict[int, int]) -> int:
    """The hour of day on the wall clock of `timezone` that the hour `hour_index` (hours since the epoch) begins in.
    Outside UTC each hour is read through zoneinfo once and kept in `memo` (the caller's, per hour index): the
    forecasts that learn per hour of day ask it at every observation."""
    if timezone == UTC_NAME:
        return hour_index % 24
    hour = memo.get(hour_index)
    if hour is None:
        hour = memo[hour_index] = weekday_and_minute(hour_index * 3600, timezone)[1] // 60
    return hour


def local_day(time_s: float, timezone: str = UTC_NAME) -> tuple[dt.date, int]:
    """The local date of `time_s` on the wall clock of `timezone`, and its weekday (0 is Monday)."""
    if timezone == UTC_NAME:
        date = dt.date(1970, 1, 1) + dt.timedelta(days=int(time_s // DAY_S))
    else:
        date = dt.datetime.fromtimestamp(time_s, zone(timezone)).date()
    return date, date.weekday()


def moment_s(date: dt.date, minute: int, timezone: str = UTC_NAME) -> float:
    """When the wall clock of `timezone` shows `minute` (after midnight) on `date`, in seconds since the epoch.

    A time the clock skips (the hour lost when daylight saving starts) is taken as the moment the clock jumps
    past it; a time it shows twice (the hour repeated when it ends), as its first showing."""
    if timezone == UTC_NAME:
        return float((date - dt.date(1970, 1, 1)).days * DAY_S + minute * 60)
    tz = zone(timezone)
    wall = dt.datetime(date.year, date.month, date.day, tzinfo=tz) + dt.timedelta(minutes=minute)
    first = wall.timestamp()  # fold=0: the first showing of a repeated time; in a gap, read with the offset before
    if dt.datetime.fromtimestamp(first, tz).replace(tzinfo=None) == wall.replace(tzinfo=None):
        return first
    # Skipped: the clock jumps from before `wall` to after it. The jump is between the two readings of the gap
    # (offset after, then before); find it to the second.
    low, high = int(wall.replace(fold=1).timestamp()), int(first)
    after = dt.datetime.fromtimestamp(high, tz).utcoffset()
    while high - low > 1:
        middle = (low + high) // 2
        if dt.datetime.fromtimestamp(middle, tz).utcoffset() == after:
            high = middle
        else:
            low = middle
    return float(high)
