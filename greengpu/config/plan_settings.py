"""Load `greengpu plan` settings files (forecasts/plan.yaml is one): inputs, sizing rules and the
planning inputs beyond history (projects, efficiency gains, expected growth, a buffer factor).

Every error names file, line and key. Relative paths are relative to the settings file.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import re
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from greengpu.config.fields import Fields
from greengpu.config.limits import MAX_GPUS, MAX_PLAN_DAYS, MAX_YEAR, MIN_YEAR, finite_number
from greengpu.config.yamlsource import PathKey, YamlDocument, load_yaml_file, shown
from greengpu.plan_inputs import EfficiencyGain, PlanInputs, Project

KEYS = ("history", "trace", "trace_format", "cluster", "horizon", "lead_time", "target_utilisation",
        "redundancy_gpus", "max_wait_probability", "growth_window", "growth_gpus_per_month", "buffer_factor",
        "projects", "efficiency", "credit")
PHILLY_CREDIT = ("derived from the Philly trace (Microsoft, CC BY 4.0; Jeon et al., USENIX ATC'19) via the "
                 "Pollux artifact (petuum/adaptdl, Apache-2.0).")
"""The credit given when no `credit:` is set and the input is the public Philly trace (its path says so)."""
PERCENT = re.compile(r"^\s*([+-]?\d+(?:\.\d+)?)\s*%\s*$")
DURATION = re.compile(r"^\s*(\d{1,9}(?:\.\d{1,9})?)\s*([hdw])\s*$")
_UNIT_DAYS = {"h": 1 / 24, "d": 1.0, "w": 7.0}


def days_of(text: str) -> int:
    """`90d`, `12w`, `720h` -> whole days, 1 to MAX_PLAN_DAYS (five years); ValueError otherwise."""
    match = DURATION.match(text)
    if not match:
        raise ValueError("expected a duration such as 90d, 12w or 720h")
    days = max(1, round(float(match.group(1)) * _UNIT_DAYS[match.group(2)]))
    if days > MAX_PLAN_DAYS:
        raise ValueError(f"at most {MAX_PLAN_DAYS} days (five years), got {days:,}")
    return days


@dataclass(frozen=True)
class PlanFileValues:
    """A plan file's plain settings, checked (paths resolved); None where the file does not set the key."""
    history: str | None = None
    trace: str | None = None
    cluster: str | None = None
    credit: str | None = None
    trace_format: str | None = None
    horizon: str | None = None
    lead_time: str | None = None
    growth_window: str | None = None
    target_utilisation: float | None = None
    redundancy_gpus: int | None = None
    max_wait_probability: float | None = None


@dataclass(frozen=True)
class PlanFile:
    values: PlanFileValues
    inputs: PlanInputs


def _date(doc: YamlDocument, path: PathKey, value: object) -> pd.Timestamp:
    """A YAML date (or ISO date string) as a day; `value` is the file's raw value, checked here."""
    day: dt.date | None = None
    if isinstance(value, dt.datetime):
        day = value.date()
    elif isinstance(value, dt.date):
        day = value
    elif isinstance(value, str):
        with contextlib.suppress(ValueError):
            day = dt.date.fromisoformat(value.strip())
    if day is None:
        raise doc.error(path, f"expected a date such as 2027-01-15, got {shown(value)}")
    if not MIN_YEAR <= day.year <= MAX_YEAR:
        raise doc.error(path, f"must be a date in {MIN_YEAR} to {MAX_YEAR}, got {day.isoformat()}")
    return pd.Timestamp(day)


def _change(fields: Fields, key: str) -> float:
    value = fields.raw(key)
    if isinstance(value, str) and (match := PERCENT.match(value)):
        change = float(match.group(1)) / 100.0
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        try:
            change = finite_number(value)
        except ValueError as exc:
            raise fields.error(key, f"{exc}: {shown(value)}") from None
    else:
        raise fields.error(key, f"expected a change such as -15% or -0.15, got {shown(value)}")
    if not -0.95 <= change <= 10.0:
        raise fields.error(key, f"must be between -95% and +1000%, got {change:+.0%}")
    return change


def _projects(fields: Fields) -> tuple[Project, ...]:
    projects = []
    for path, item in fields.items("projects"):
        project = Fields(fields.doc, path, item)
        project.reject_unknown(("name", "gpus", "start", "end"))
        name = project.string("name", required=True) or ""
        gpus = project.req_number("gpus", minimum=0, maximum=MAX_GPUS)
        start = _date(fields.doc, (*path, "start"), project.raw("start"))
        end = _date(fields.doc, (*path, "end"), project.raw("end")) if project.has("end") else None
        if end is not None and end <= start:
            raise project.error("end", f"must be after start ({start.date()})")
        projects.append(Project(name, gpus, start, end))
    return tuple(projects)


def _efficiency(fields: Fields) -> tuple[EfficiencyGain, ...]:
    gains = []
    for path, item in fields.items("efficiency"):
        gain = Fields(fields.doc, path, item)
        gain.reject_unknown(("name", "change", "start"))
        if not gain.has("change"):
            raise gain.error("change", "missing required key")
        gains.append(EfficiencyGain(gain.string("name", required=True) or "", _change(gain, "change"),
                                    _date(fields.doc, (*path, "start"), gain.raw("start"))))
    return tuple(gains)


def _duration(fields: Fields, key: str) -> str | None:
    if not fields.has(key):
        return None
    text = fields.string(key) or ""
    try:
        days_of(text)
    except ValueError as exc:
        raise fields.error(key, f"{exc}: {shown(text)}") from None
    return text


def load_plan_file(path: str | Path) -> PlanFile:
    document = load_yaml_file(path)
    fields = Fields(document, (), document.value)
    fields.reject_unknown(KEYS)
    base = Path(path).parent
    paths = {key: str(base / (fields.string(key) or "")) if fields.has(key) else None
             for key in ("history", "trace", "cluster")}
    # credit: where the data comes from, shown with the report (CC BY asks for it)
    credit = fields.string("credit") if fields.has("credit") else None
    trace_format = fields.string("trace_format", choices=("csv", "philly", "sacct")) if fields.has(
        "trace_format") else None
    durations = {key: _duration(fields, key) for key in ("horizon", "lead_time", "growth_window")}
    values = PlanFileValues(
        history=paths["history"], trace=paths["trace"], cluster=paths["cluster"], credit=credit,
        trace_format=trace_format, horizon=durations["horizon"], lead_time=durations["lead_time"],
        growth_window=durations["growth_window"],
        target_utilisation=fields.number("target_utilisation", minimum=0.05, maximum=1.0),
        redundancy_gpus=fields.integer("redundancy_gpus", minimum=0),
        max_wait_probability=fields.number("max_wait_probability", minimum=0.0001, maximum=1.0))
    if fields.has("history") and fields.has("trace"):
        raise fields.error("trace", "give history or trace, not both")
    growth = fields.number("growth_gpus_per_month", minimum=-MAX_GPUS, maximum=MAX_GPUS)
    buffer = fields.number("buffer_factor", 1.0, minimum=1.0, maximum=10.0)
    inputs = PlanInputs(projects=_projects(fields), efficiency=_efficiency(fields), buffer_factor=buffer or 1.0,
                        growth_gpus_per_month=growth)
    return PlanFile(values, inputs)
