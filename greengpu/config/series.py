"""Read time series CSVs (tariff, carbon intensity) named in an inventory."""

from __future__ import annotations

import csv
import math
from datetime import UTC, datetime
from pathlib import Path

from greengpu.errors import ConfigError
from greengpu.model import TimeSeries

_EPOCH_NAIVE = datetime(1970, 1, 1)


def parse_time_s(text: str) -> float:
    """Parse an ISO 8601 timestamp (naive means UTC) or plain seconds into epoch seconds."""
    text = text.strip()
    if "-" not in text[1:]:  # plain seconds (a leading minus sign is allowed)
        return float(text)
    stamp = datetime.fromisoformat(text)
    if stamp.tzinfo is None:
        return (stamp - _EPOCH_NAIVE).total_seconds()
    return stamp.astimezone(UTC).timestamp()


def read_series_csv(path: Path, value_column: str, *, allow_negative: bool, shown_name: str) -> TimeSeries:
    """Read a CSV with columns `time` and `value_column`, sorted by time, into a TimeSeries."""
    try:
        handle = path.open(newline="", encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(shown_name, None, "", "file not found") from None
    except OSError as exc:
        raise ConfigError(shown_name, None, "", f"cannot read: {exc.strerror}") from None
    times: list[float] = []
    values: list[float] = []
    with handle:
        reader = csv.DictReader(handle)
        header = reader.fieldnames or []
        for column in ("time", value_column):
            if column not in header:
                raise ConfigError(shown_name, 1, column, f"missing column (header has: {', '.join(header)})")
        for row in reader:
            line = reader.line_num
            try:
                time_s = parse_time_s(row["time"] or "")
            except ValueError:
                raise ConfigError(shown_name, line, "time", f"not a timestamp: {row['time']!r}") from None
            try:
                value = float(row[value_column] or "")
            except ValueError:
                raise ConfigError(shown_name, line, value_column, f"not a number: {row[value_column]!r}") from None
            if not math.isfinite(value) or (value < 0 and not allow_negative):
                raise ConfigError(shown_name, line, value_column, f"must be a non-negative number, got {value:g}")
            if times and time_s <= times[-1]:
                raise ConfigError(shown_name, line, "time", "times must increase row by row")
            times.append(time_s)
            values.append(value)
    if not times:
        raise ConfigError(shown_name, None, "", "no data rows")
    return TimeSeries(times_s=tuple(times), values=tuple(values), source=str(path))
