"""Cron schedules as Kubernetes CronJobs take them: the check a spec's schedule passes
(``check_cron``, ``CRON_PATTERN`` for editors) and the longest wait between two runs of one
(``cron_longest_gap``), which the plan and the compile's warnings read."""

from __future__ import annotations

import re

CRON_PATTERN = re.compile(
    r"^(@(hourly|daily|weekly|monthly|yearly|annually|midnight)"
    r"|[0-9A-Za-z*/,-]+( [0-9A-Za-z*/,-]+){4})$"
)
# minute, hour, day of month, month, day of week: their ranges, and the names cron accepts.
_CRON_FIELDS: tuple[tuple[str, int, int, tuple[str, ...]], ...] = (
    ("minute", 0, 59, ()),
    ("hour", 0, 23, ()),
    ("day of month", 1, 31, ()),
    ("month", 1, 12, ("JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT",
                      "NOV", "DEC")),
    ("day of week", 0, 7, ("SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT")),
)  # fmt: skip


def _cron_value(text: str, field: tuple[str, int, int, tuple[str, ...]]) -> int:
    name, lo, hi, names = field
    upper = text.upper()
    if upper in names:
        return names.index(upper) + (1 if name == "month" else 0)
    if not text.isdigit() or not lo <= int(text) <= hi:
        raise ValueError(f"{text!r} is not a {name} ({lo}-{hi})")
    return int(text)


def check_cron(value: str) -> str:
    """A cron schedule as Kubernetes CronJobs take it: five fields (or a @macro), each a
    list of ``*``, values or ranges with an optional ``/step``, within the field's range."""
    if not CRON_PATTERN.fullmatch(value):  # fullmatch: no trailing newline either
        raise ValueError(
            f"{value!r} is not a cron schedule: five fields separated by single spaces "
            "(minute hour day-of-month month day-of-week), or @hourly, @daily, ..."
        )
    if value.startswith("@"):
        return value
    for text, field in zip(value.split(" "), _CRON_FIELDS, strict=True):
        for item in text.split(","):
            body, _, step = item.partition("/")
            if step and (not step.isdigit() or int(step) == 0):
                raise ValueError(f"{value!r}: step {step!r} in the {field[0]} field")
            if body == "*":
                continue
            first, _, last = body.partition("-")
            a = _cron_value(first, field)
            if last and _cron_value(last, field) < a:
                raise ValueError(f"{value!r}: range {body!r} runs backwards")
    return value


_MACRO_GAPS = {"@hourly": 60, "@daily": 1440, "@midnight": 1440, "@weekly": 10080}


def _cron_set(text: str, field: tuple[str, int, int, tuple[str, ...]]) -> set[int]:
    """The values one field of a valid schedule matches."""
    _, lo, hi, _ = field
    out: set[int] = set()
    for item in text.split(","):
        body, _, step = item.partition("/")
        if body == "*":
            a, b = lo, hi
        else:
            first, _, last = body.partition("-")
            a = _cron_value(first, field)
            b = _cron_value(last, field) if last else (hi if step else a)
        out.update(range(a, b + 1, int(step or 1)))
    return out


def cron_longest_gap(value: str) -> int | None:
    """The longest wait, in minutes, between two runs of a valid schedule, or None when
    the day-of-month or month field restricts it (then it runs days apart at best)."""
    if value.startswith("@"):
        return _MACRO_GAPS.get(value)
    fields = value.split(" ")
    if fields[2] != "*" or fields[3] != "*":
        return None
    minutes = _cron_set(fields[0], _CRON_FIELDS[0])
    hours = _cron_set(fields[1], _CRON_FIELDS[1])
    days = {d % 7 for d in _cron_set(fields[4], _CRON_FIELDS[4])}
    week = [
        day * 1440 + hour * 60 + minute
        for day in sorted(days)
        for hour in sorted(hours)
        for minute in sorted(minutes)
    ]
    return max(b - a for a, b in zip(week, [*week[1:], week[0] + 7 * 1440], strict=True))
