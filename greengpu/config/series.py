"""Read time series CSVs (tariff, carbon intensity) named in an inventory."""

from __future__ import annotations

import csv
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import TextIO

from greengpu.config.limits import MAX_CSV_BYTES, OutOfRange, check_file_size, finite_number, time_s
from greengpu.config.yamlsource import shown
from greengpu.errors import ConfigError
from greengpu.model import TimeSeries

_EPOCH_NAIVE = datetime(1970, 1, 1)
_EPOCH_AWARE = datetime(1970, 1, 1, tzinfo=UTC)


def parse_time_s(text: str) -> float:
    """Parse an ISO 8601 timestamp (naive means UTC) or plain seconds into epoch seconds.

    ValueError unless the time is finite and inside the supported range (greengpu.config.limits):
    `nan`, `inf` or 1e300 seconds never become a time.
    """
    text = text.strip()
    if "-" not in text[1:]:  # plain seconds (a leading minus sign is allowed)
        return time_s(float(text))
    stamp = datetime.fromisoformat(text)
    if stamp.tzinfo is None:
        return time_s((stamp - _EPOCH_NAIVE).total_seconds())
    return time_s((stamp - _EPOCH_AWARE).total_seconds())


@contextmanager
def config_csv(path: Path, shown_name: str) -> Iterator[TextIO]:
    """A CSV file an inventory names, open for reading: too large, missing, a directory, unreadable, not
    UTF-8 or malformed CSV (raised while the block reads it) is one ConfigError naming the file."""
    try:
        check_file_size(path, MAX_CSV_BYTES)
        handle = path.open(newline="", encoding="utf-8")
    except ValueError as exc:
        raise ConfigError(shown_name, None, "", str(exc)) from None
    except FileNotFoundError:
        raise ConfigError(shown_name, None, "", "file not found") from None
    except IsADirectoryError:
        raise ConfigError(shown_name, None, "", "is a directory, expected a CSV file") from None
    except OSError as exc:
        raise ConfigError(shown_name, None, "", f"cannot read: {exc.strerror}") from None
    try:
        with handle:
            yield handle
    except UnicodeDecodeError:
        raise ConfigError(shown_name, None, "", "not UTF-8 text") from None
    except csv.Error as exc:
        raise ConfigError(shown_name, None, "", f"malformed CSV: {exc}") from None


def read_series_csv(path: Path, value_column: str, *, allow_negative: bool, shown_name: str) -> TimeSeries:
    """Read a CSV with columns `time` and `value_column`, sorted by time, into a TimeSeries."""
    with config_csv(path, shown_name) as handle:
        return _read_series(handle, path, value_column, allow_negative, shown_name)


def _read_series(handle: TextIO, path: Path, value_column: str, allow_negative: bool, shown_name: str) -> TimeSeries:
    times: list[float] = []
    values: list[float] = []
    reader = csv.DictReader(handle)
    header = reader.fieldnames or []
    for column in ("time", value_column):
        if column not in header:
            raise ConfigError(shown_name, 1, column, f"missing column (header has: {', '.join(header)})")
    for row in reader:
        line = reader.line_num
        raw_time, raw_value = row["time"] or "", row[value_column] or ""
        try:
            when_s = parse_time_s(raw_time)
        except OutOfRange as exc:
            raise ConfigError(shown_name, line, "time", f"{exc}: {shown(raw_time)}") from None
        except ValueError:
            raise ConfigError(shown_name, line, "time", f"not a timestamp: {shown(raw_time)}") from None
        try:
            number = float(raw_value)
        except ValueError:
            raise ConfigError(shown_name, line, value_column, f"not a number: {shown(raw_value)}") from None
        try:
            value = finite_number(number)
        except ValueError as exc:
            raise ConfigError(shown_name, line, value_column, f"{exc}: {shown(raw_value)}") from None
        if value < 0 and not allow_negative:
            raise ConfigError(shown_name, line, value_column, f"must be a non-negative number, got {value:g}")
        if times and when_s <= times[-1]:
            raise ConfigError(shown_name, line, "time", "times must increase row by row")
        times.append(when_s)
        values.append(value)
    if not times:
        raise ConfigError(shown_name, None, "", "no data rows")
    return TimeSeries(times_s=tuple(times), values=tuple(values), source=str(path))
