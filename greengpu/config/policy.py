"""Load and validate policies: built-in names (`always-on`, `idle-timeout`, `default`) or YAML files."""

from __future__ import annotations

import re
from importlib import resources
from pathlib import Path

from greengpu.config.fields import Fields
from greengpu.config.limits import MAX_DURATION_S
from greengpu.config.yamlsource import YamlDocument, load_yaml_file, load_yaml_text
from greengpu.errors import BadInput
from greengpu.model import JOB_CLASSES
from greengpu.policy import (
    CAPPING_MODES,
    ON_DEMAND_VALUE,
    VICTIM_ORDERS,
    WEEKDAYS,
    BackfillPolicy,
    CappingPolicy,
    ClassCapping,
    ClassWaiting,
    FairSharePolicy,
    Policy,
    PreemptionPolicy,
    SchedulerPolicy,
    SleepPolicy,
    SleepWindow,
    SpotPolicy,
)

BUILTIN_POLICIES = ("always-on", "idle-timeout", "default")

_TIME_RE = re.compile(r"^([01]?\d|2[0-4]):([0-5]\d)$")
_DAY_ALIASES = {day: day for day in WEEKDAYS} | {
    "monday": "mon", "tuesday": "tue", "wednesday": "wed", "thursday": "thu", "friday": "fri",
    "saturday": "sat", "sunday": "sun",
}


def _scheduler(fields: Fields | None) -> SchedulerPolicy:
    if fields is None:
        return SchedulerPolicy()
    fields.reject_unknown(
        ("fair_share", "preemption", "backfill", "age_boost_per_hour", "age_boost_max",
         "whole_node_reserve", "borrow_non_interruptible")
    )
    defaults = SchedulerPolicy()
    fair = FairSharePolicy()
    fair_fields = fields.sub("fair_share")
    if fair_fields is not None:
        fair_fields.reject_unknown(("usage_half_life_h", "usage_weight"))
        half_life_h = fair_fields.number("usage_half_life_h", fair.usage_half_life_s / 3600,
                                         minimum=0.0, exclusive_minimum=True, maximum=MAX_DURATION_S / 3600)
        weight = fair_fields.number("usage_weight", fair.usage_weight, minimum=0.0)
        assert half_life_h is not None and weight is not None
        fair = FairSharePolicy(usage_half_life_s=half_life_h * 3600, usage_weight=weight)
    pre = PreemptionPolicy()
    pre_fields = fields.sub("preemption")
    if pre_fields is not None:
        pre_fields.reject_unknown(
            ("enabled", "grace_s", "min_runtime_s", "max_per_job_per_hour", "victim_order",
             "max_attempts_per_cycle", "priority_preemption", "reclaim")
        )
        pre = PreemptionPolicy(
            enabled=pre_fields.boolean("enabled", pre.enabled),
            grace_s=_num(pre_fields, "grace_s", pre.grace_s, maximum=86_400.0),
            min_runtime_s=_num(pre_fields, "min_runtime_s", pre.min_runtime_s),
            max_per_job_per_hour=_int(pre_fields, "max_per_job_per_hour", pre.max_per_job_per_hour),
            victim_order=pre_fields.string("victim_order", pre.victim_order, choices=VICTIM_ORDERS)
            or pre.victim_order,
            max_attempts_per_cycle=_int(pre_fields, "max_attempts_per_cycle", pre.max_attempts_per_cycle),
            priority_preemption=pre_fields.boolean("priority_preemption", pre.priority_preemption),
            reclaim=pre_fields.boolean("reclaim", pre.reclaim),
        )
    back = BackfillPolicy()
    back_fields = fields.sub("backfill")
    if back_fields is not None:
        back_fields.reject_unknown(("enabled", "reservations"))
        back = BackfillPolicy(
            enabled=back_fields.boolean("enabled", back.enabled),
            reservations=_int(back_fields, "reservations", back.reservations),
        )
    return SchedulerPolicy(
        fair_share=fair,
        preemption=pre,
        backfill=back,
        age_boost_per_hour=_num(fields, "age_boost_per_hour", defaults.age_boost_per_hour),
        age_boost_max=_num(fields, "age_boost_max", defaults.age_boost_max),
        whole_node_reserve=_int(fields, "whole_node_reserve", defaults.whole_node_reserve),
        borrow_non_interruptible=fields.boolean("borrow_non_interruptible", defaults.borrow_non_interruptible),
    )


def _num(fields: Fields, key: str, default: float, maximum: float | None = None) -> float:
    if maximum is None and key.endswith("_s"):
        maximum = MAX_DURATION_S  # a duration: ten years at most, never 1e300
    value = fields.number(key, default, minimum=0.0, maximum=maximum)
    assert value is not None
    return value


def _int(fields: Fields, key: str, default: int) -> int:
    value = fields.integer(key, default, minimum=0)
    assert value is not None
    return value


def _capping(fields: Fields | None) -> CappingPolicy:
    if fields is None:
        return CappingPolicy()
    fields.reject_unknown(("enabled", "classes", "idle_to_min_limit", "switch_to_clocks_when_not_binding",
                           "relax_when_queued", "forecast_slack"))
    classes: dict[str, ClassCapping] = {}
    class_fields = fields.sub("classes")
    if class_fields is not None:
        class_fields.reject_unknown(JOB_CLASSES)
        for name in class_fields.data:
            entry = class_fields.sub(name, required=True)
            assert entry is not None
            entry.reject_unknown(("mode", "max_slowdown", "clock_fraction", "limit_w"))
            # YAML 1.1 reads an unquoted `off` as the boolean false: accept it as the mode "off".
            if entry.raw("mode") is False:
                entry.data["mode"] = "off"
            mode = entry.string("mode", required=True, choices=CAPPING_MODES)
            assert mode is not None
            max_slowdown = entry.number("max_slowdown", 0.05, minimum=0.0, maximum=1.0)
            fraction = entry.number("clock_fraction", 1.0, minimum=0.1, maximum=1.0)
            limit_w = entry.number("limit_w", None, minimum=0.0, exclusive_minimum=True)
            if mode == "fixed" and limit_w is None:
                raise entry.error("limit_w", "mode fixed needs limit_w (watts per GPU)")
            if mode == "clocks" and not entry.has("clock_fraction"):
                raise entry.error("clock_fraction", "mode clocks needs clock_fraction (0.1 to 1.0)")
            assert max_slowdown is not None and fraction is not None
            classes[name] = ClassCapping(mode=mode, max_slowdown=max_slowdown, clock_fraction=fraction,
                                         limit_w=limit_w)
    return CappingPolicy(
        enabled=fields.boolean("enabled", True),
        classes=classes,
        idle_to_min_limit=fields.boolean("idle_to_min_limit", False),
        switch_to_clocks_when_not_binding=fields.boolean("switch_to_clocks_when_not_binding", True),
        relax_when_queued=fields.boolean("relax_when_queued", False),
        forecast_slack=fields.boolean("forecast_slack", False),
    )


def _minute_of_day(fields: Fields, key: str, default: int) -> int:
    if not fields.has(key):
        return default
    value = fields.raw(key)
    # YAML 1.1 reads an unquoted 19:00 as the sexagesimal integer 1140: accept it as minutes.
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= 24 * 60:
        return value
    if not isinstance(value, str) or not _TIME_RE.match(value):
        raise fields.error(key, f"expected a time of day like \"19:00\", got {value!r}")
    hours, minutes = (int(part) for part in value.split(":"))
    if hours == 24 and minutes:
        raise fields.error(key, f"no such time of day: {value!r}")
    return hours * 60 + minutes


def _days(fields: Fields) -> tuple[str, ...]:
    if not fields.has("days"):
        return WEEKDAYS
    days: list[str] = []
    for path, item in fields.items("days"):
        if not isinstance(item, str):
            raise fields.doc.error(path, f"expected a weekday name like mon, got {item!r}")
        text = item.strip().lower()
        if "-" in text:
            first, _, last = text.partition("-")
            if first not in _DAY_ALIASES or last not in _DAY_ALIASES:
                raise fields.doc.error(path, f"unknown weekday range {item!r} (use mon-fri)")
            start, end = WEEKDAYS.index(_DAY_ALIASES[first]), WEEKDAYS.index(_DAY_ALIASES[last])
            span = range(start, end + 1) if start <= end else [*range(start, 7), *range(0, end + 1)]
            days.extend(WEEKDAYS[i] for i in span)
        elif text in _DAY_ALIASES:
            days.append(_DAY_ALIASES[text])
        else:
            raise fields.doc.error(path, f"unknown weekday {item!r} (use mon, tue, ... sun)")
    if not days:
        raise fields.error("days", "must name at least one weekday")
    return tuple(dict.fromkeys(days))


def _sleep(fields: Fields | None) -> SleepPolicy:
    if fields is None:
        return SleepPolicy()
    fields.reject_unknown(
        ("enabled", "idle_timeout_s", "idle_util_threshold", "windows", "warm_reserve_gpus",
         "warm_reserve_busy_fraction", "use_forecast", "warm_reserve_from_forecast",
         "priority_aware", "max_suspends_per_min", "max_wakes_per_min", "min_asleep_s", "min_awake_s",
         "wake_timeout_s", "wake_retries", "wake_backoff_s")
    )
    d = SleepPolicy()
    windows: list[SleepWindow] = []
    for path, item in fields.items("windows"):
        entry = Fields(fields.doc, path, item)
        entry.reject_unknown(("days", "start", "end"))
        start = _minute_of_day(entry, "start", 0)
        end = _minute_of_day(entry, "end", 24 * 60)
        if start == end:
            raise entry.error("end", "window start and end are the same time; omit both for all day")
        windows.append(SleepWindow(days=_days(entry), start_minute=start, end_minute=end))
    threshold = fields.number("idle_util_threshold", d.idle_util_threshold, minimum=0.0, maximum=1.0)
    assert threshold is not None
    return SleepPolicy(
        enabled=fields.boolean("enabled", True),
        idle_timeout_s=_num(fields, "idle_timeout_s", d.idle_timeout_s),
        idle_util_threshold=threshold,
        windows=tuple(windows) if fields.has("windows") else d.windows,
        warm_reserve_gpus=_int(fields, "warm_reserve_gpus", d.warm_reserve_gpus),
        warm_reserve_busy_fraction=_num(fields, "warm_reserve_busy_fraction", d.warm_reserve_busy_fraction,
                                        maximum=1.0),
        use_forecast=fields.boolean("use_forecast", d.use_forecast),
        warm_reserve_from_forecast=fields.boolean("warm_reserve_from_forecast", d.warm_reserve_from_forecast),
        priority_aware=fields.boolean("priority_aware", d.priority_aware),
        max_suspends_per_min=_int(fields, "max_suspends_per_min", d.max_suspends_per_min),
        max_wakes_per_min=_int(fields, "max_wakes_per_min", d.max_wakes_per_min),
        min_asleep_s=_num(fields, "min_asleep_s", d.min_asleep_s),
        min_awake_s=_num(fields, "min_awake_s", d.min_awake_s),
        wake_timeout_s=_num(fields, "wake_timeout_s", d.wake_timeout_s),
        wake_retries=_int(fields, "wake_retries", d.wake_retries),
        wake_backoff_s=_num(fields, "wake_backoff_s", d.wake_backoff_s),
    )


def _spot(fields: Fields | None) -> SpotPolicy:
    if fields is None:
        return SpotPolicy()
    fields.reject_unknown(("enabled", "classes", "require_checkpointing", "notice_s", "checkpoint_cost_s",
                           "restart_s", "max_expected_lost_fraction", "waiting", "come_back"))
    d = SpotPolicy()
    classes: list[str] = []
    for path, item in fields.items("classes"):
        if not isinstance(item, str) or item not in JOB_CLASSES:
            raise fields.doc.error(path, f"unknown job class {item!r} (one of {', '.join(JOB_CLASSES)})")
        classes.append(item)
    return SpotPolicy(
        enabled=fields.boolean("enabled", True),
        classes=tuple(classes) if fields.has("classes") else d.classes,
        require_checkpointing=fields.boolean("require_checkpointing", True),
        notice_s=_num(fields, "notice_s", d.notice_s),
        checkpoint_cost_s=_num(fields, "checkpoint_cost_s", d.checkpoint_cost_s),
        restart_s=_num(fields, "restart_s", d.restart_s),
        max_expected_lost_fraction=_num(fields, "max_expected_lost_fraction", d.max_expected_lost_fraction,
                                        maximum=1.0),
        waiting=_waiting(fields.sub("waiting")) if fields.has("waiting") else d.waiting,
        come_back=fields.boolean("come_back", d.come_back),
    )


def _waiting(fields: Fields | None) -> dict[str, ClassWaiting]:
    """`spot.waiting`: per class `tolerance_s` and `value_per_gpu_hour` (a number or `on-demand`); the classes
    listed replace the defaults, and a class not listed never waits beyond a cloud node's start-up."""
    if fields is None:
        return {}
    fields.reject_unknown(JOB_CLASSES)
    waiting: dict[str, ClassWaiting] = {}
    for name in fields.data:
        entry = fields.sub(name, required=True)
        assert entry is not None
        entry.reject_unknown(("tolerance_s", "value_per_gpu_hour"))
        value: float | str | None = None
        raw = entry.raw("value_per_gpu_hour")
        if isinstance(raw, str):
            if raw != ON_DEMAND_VALUE:
                raise entry.error("value_per_gpu_hour",
                                  f"expected a price per GPU-hour or {ON_DEMAND_VALUE!r}, got {raw!r}")
            value = raw
        elif raw is not None:
            value = _num(entry, "value_per_gpu_hour", 0.0)
        waiting[name] = ClassWaiting(tolerance_s=_num(entry, "tolerance_s", 0.0), value_per_gpu_hour=value)
    return waiting


def build_policy(doc: YamlDocument, default_name: str) -> Policy:
    """Validate a loaded policy document and build the Policy."""
    root = Fields(doc, (), doc.value, what="a policy mapping (name, scheduler, capping, sleep, spot)")
    root.reject_unknown(("name", "description", "interval_s", "scheduler", "capping", "sleep", "spot"))
    interval = root.number("interval_s", 60.0, minimum=1.0, maximum=86_400.0)
    assert interval is not None
    return Policy(
        name=root.string("name", default_name) or default_name,
        description=root.string("description", "") or "",
        interval_s=interval,
        scheduler=_scheduler(root.sub("scheduler")),
        capping=_capping(root.sub("capping")),
        sleep=_sleep(root.sub("sleep")),
        spot=_spot(root.sub("spot")),
    )


def builtin_policy_text(name: str) -> str:
    """The YAML text of a built-in policy."""
    return resources.files("greengpu").joinpath("builtin_policies", f"{name}.yaml").read_text(encoding="utf-8")


def load_policy(name_or_file: str) -> Policy:
    """A built-in policy by name, or a policy YAML file. Raises BadInput/ConfigError."""
    if name_or_file in BUILTIN_POLICIES:
        doc = load_yaml_text(builtin_policy_text(name_or_file), f"<built-in {name_or_file}>")
        return build_policy(doc, name_or_file)
    path = Path(name_or_file)
    if not path.exists():
        raise BadInput(
            f"{name_or_file}: no such policy file, and not a built-in policy ({', '.join(BUILTIN_POLICIES)})"
        )
    return build_policy(load_yaml_file(path), path.stem)
