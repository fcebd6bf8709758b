"""One way to read a point in time, for every CLI option and API parameter.

Accepted forms (all give epoch milliseconds)::

    parse_time("1722240069000")              # epoch ms (digits or an int)
    parse_time("1722240069")                 # epoch seconds: below 10**10 a number means seconds
    parse_time("2026-11-22T10:00:00Z")       # ISO-8601; no zone means UTC; "2026-11-22 10:00:00" too
    parse_time("now")
    parse_time("-2h", now_ms=now)            # relative: -90s, -15m, -1h30m, -7d, -1w, -500ms
    parse_time("2h", now_ms=now)             # a bare duration means "that long ago", like -2h
    parse_time("+10m", now_ms=now)           # in the future (rarely useful, but unambiguous)
    parse_time("Jun 3, 2019 3:42:39 PM")     # Gson's default Date format (QMQ clients), in UTC

Anything else raises :class:`collector.query.errors.BadTimeError` (HTTP 400, reason
``bad_time``) naming the parameter.  The query API's parameters go through
:func:`collector.query.params.time_param`, which calls this and adds its range checks.
"""

from __future__ import annotations

import re
import time
from datetime import UTC, datetime
from typing import Any

from collector.query.errors import BadTimeError

SECONDS_LIMIT = 10_000_000_000
"""Epoch numbers below this are seconds, not milliseconds (10**10 s is the year 2286)."""

UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000, "w": 7 * 86_400_000}
# ASCII digits only: \d also matches digits such as "\u0661" that nobody means as a time.
_PART = r"([0-9]+)(ms|s|m|h|d|w)"
_RELATIVE = re.compile(rf"^([+-]?)((?:{_PART})+)$")
_PARTS = re.compile(_PART)
_MAX_TEXT = 64


def current_ms() -> int:
    """The current time in epoch ms."""
    return int(time.time() * 1000)


def parse_duration(text: str, *, name: str = "duration") -> int:
    """A duration such as ``90s``, ``15m``, ``1h30m`` or ``7d`` in milliseconds."""
    match = _RELATIVE.match(text.strip())
    if match is None or match.group(1):
        raise BadTimeError(f"{name} must be a duration like 90s, 15m, 1h30m or 7d, not {text[:_MAX_TEXT]!r}")
    return sum(int(n) * UNIT_MS[unit] for n, unit in _PARTS.findall(match.group(2)))


def parse_time(value: Any, *, now_ms: int | None = None, name: str = "time") -> int:
    """``value`` as epoch ms; relative times count from ``now_ms`` (default: the clock)."""
    if isinstance(value, bool) or value is None:
        raise BadTimeError(f"{name} is required: epoch ms, ISO-8601, now or a relative time like -2h")
    if isinstance(value, int):
        return _epoch(value, name)
    if not isinstance(value, str):
        raise BadTimeError(f"{name} must be a string or an integer")
    text = value.strip()
    if re.fullmatch(r"[0-9]{1,19}", text):
        return _epoch(int(text), name)
    base = now_ms if now_ms is not None else current_ms()
    if text.lower() == "now":
        return base
    match = _RELATIVE.match(text)
    if match is not None:
        delta = sum(int(n) * UNIT_MS[unit] for n, unit in _PARTS.findall(match.group(2)))
        result = base + delta if match.group(1) == "+" else base - delta
        if result < 0:
            raise BadTimeError(f"{name}: {text!r} reaches before 1970")
        if result > 2**63 - 1:
            raise BadTimeError(f"{name} is out of range")
        return result
    gson = parse_gson_date(text)
    if gson is not None:
        return _ms(gson, name)
    try:
        parsed = datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise BadTimeError(
            f"{name}: {text[:_MAX_TEXT]!r} is not epoch ms, ISO-8601, now or a relative time like -2h"
        ) from None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return _ms(int(parsed.timestamp() * 1000), name)


_GSON_DATE = re.compile(r"^([A-Z][a-z]{2}) ([0-9]{1,2}), ([0-9]{4}),? ([0-9]{1,2}):([0-9]{2}):([0-9]{2})[ \u202f\u00a0]([AP]M)$")
_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")


def parse_gson_date(text: str) -> int | None:
    """Epoch ms of a date in Gson's default format (``Jun 3, 2019 3:42:39 PM``; JDK 9+ puts a comma
    after the year and a narrow space before PM), read as UTC; None when ``text`` is not one."""
    match = _GSON_DATE.match(text.strip())
    if match is None or match.group(1) not in _MONTHS:
        return None
    month, day, year, hour, minute, second, half = match.groups()
    hour_24 = int(hour) % 12 + (12 if half == "PM" else 0)
    try:
        parsed = datetime(int(year), _MONTHS.index(month) + 1, int(day), hour_24, int(minute), int(second), tzinfo=UTC)
    except ValueError:
        return None
    return int(parsed.timestamp() * 1000)


def _epoch(number: int, name: str) -> int:
    """An epoch number as ms: below :data:`SECONDS_LIMIT` it counts seconds."""
    return _ms(number * 1000 if 0 <= number < SECONDS_LIMIT else number, name)


def _ms(ms: int, name: str) -> int:
    """``ms`` checked (a date is ms already: 1970-01-02 is not 86,400,000 seconds)."""
    if ms < 0:
        raise BadTimeError(f"{name} must not be negative")
    if ms > 2**63 - 1:
        raise BadTimeError(f"{name} is out of range")
    return ms
