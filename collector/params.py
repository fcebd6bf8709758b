"""Parsing and checking query parameters for the query API (QMQ and native).

Every problem raises :class:`ParamError` with a short machine-readable
``reason`` and a text naming the bad parameter, so handlers answer 400 with
``{"error": reason, "detail": text}`` and never 500 on a bad query.

Example::

    begin, end = time_window(parse_time("begin", "2026-11-22T10:00:00Z"), None, now_ms=now)
    limit = page_size(request.query.get("limit"))
"""

from __future__ import annotations

import json
import math
import re
from datetime import datetime, timezone
from typing import Any

from collector.errors import CollectorError

DEFAULT_PAGE_SIZE = 20
MAX_PAGE_SIZE = 500
"""Largest page a query may ask for (bigger pages make one slow request)."""
DEFAULT_WINDOW_MS = 30 * 24 * 3600 * 1000
"""QMQ's default: the last 30 days when neither begin nor end is given."""
MAX_WINDOW_MS = 366 * 24 * 3600 * 1000
"""Longest time window one query may scan."""
MAX_PARAM_LEN = 16 * 1024
MAX_TIME_MS = 253_402_300_799_999
"""9999-12-31T23:59:59.999Z: later times are refused (row keys hold signed 64-bit ints)."""

# ASCII digits only: \d and str.isdigit() also match digits int() cannot read ("²").
_DURATION = re.compile(r"^([0-9]+)(ms|s|m|h|d|w)$")
_DIGITS = re.compile(r"[0-9]+")
_DURATION_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000, "w": 7 * 86_400_000}
# Epoch values below this are seconds, not milliseconds (year 2286 in seconds).
_SECONDS_LIMIT = 10_000_000_000


class ParamError(CollectorError):
    """A query parameter is missing, malformed or out of range (HTTP 400)."""

    status = 400
    reason = "bad_query"

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail, reason=reason)


def parse_json_object(name: str, text: str | None) -> dict[str, Any]:
    """Parse a JSON-object parameter such as QMQ's ``backupQuery``."""
    if text is None or text == "":
        raise ParamError("missing_param", f"{name} is required (a JSON object)")
    if len(text) > MAX_PARAM_LEN:
        raise ParamError("bad_param", f"{name} is longer than {MAX_PARAM_LEN} characters")
    try:
        value = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise ParamError("bad_json", f"{name} is not valid JSON: {exc}") from None
    if not isinstance(value, dict):
        raise ParamError("bad_json", f"{name} must be a JSON object")
    return value


def field_str(obj: dict[str, Any], name: str, *, required: bool = False) -> str | None:
    """A string field of a JSON object; empty strings count as absent."""
    value = obj.get(name)
    if value is None or value == "":
        if required:
            raise ParamError("missing_field", f"{name} is required")
        return None
    if not isinstance(value, str):
        raise ParamError("bad_type", f"{name} must be a string")
    return _unicode_text(name, value)


def _unicode_text(name: str, value: str) -> str:
    """``value`` unless it holds lone surrogates (JSON's ``"\\ud800"``): no row key can hold those."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ParamError("bad_value", f"{name} is not valid Unicode text") from None
    return value


def field_int(obj: dict[str, Any], name: str, *, required: bool = False) -> int | None:
    """An integer field; QMQ clients send longs as numbers or as digit strings."""
    value = obj.get(name)
    if value is None or value == "":
        if required:
            raise ParamError("missing_field", f"{name} is required")
        return None
    return to_int(name, value)


def field_bool(obj: dict[str, Any], name: str, default: bool = False) -> bool:
    """A boolean field (true/false only)."""
    value = obj.get(name, default)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise ParamError("bad_type", f"{name} must be true or false")
    return value


def to_int(name: str, value: Any) -> int:
    """An integer from a number or a string of digits (bools are rejected)."""
    if isinstance(value, bool):
        raise ParamError("bad_type", f"{name} must be an integer")
    if isinstance(value, str) and re.fullmatch(r"-?[0-9]{1,19}", value.strip()):
        value = int(value)
    if not isinstance(value, int):
        raise ParamError("bad_type", f"{name} must be an integer")
    if not -(2**63) <= value < 2**63:
        raise ParamError("bad_value", f"{name} is outside the signed 64-bit range")
    return value


def parse_time(name: str, value: Any, *, now_ms: int | None = None) -> int | None:
    """A point in time as epoch ms.

    Accepts epoch milliseconds (or seconds) as a number or digits, ISO-8601
    (``2026-11-22T10:00:00Z``; no zone means UTC), QMQ's ``yyyy-MM-dd HH:mm:ss``,
    and, when ``now_ms`` is given, a duration ago such as ``15m``, ``1h``, ``7d``.
    """
    if value is None or value == "":
        return None
    if isinstance(value, bool):
        raise ParamError("bad_time", f"{name} must be a time")
    if isinstance(value, float) and not math.isfinite(value):
        raise ParamError("bad_time", f"{name} must be a finite number")
    if isinstance(value, (int, float)) or (isinstance(value, str) and _DIGITS.fullmatch(value.strip())):
        number = int(value)
        if number < 0:
            raise ParamError("bad_time", f"{name} must not be negative")
        return _checked_time(name, number * 1000 if number < _SECONDS_LIMIT else number)
    if not isinstance(value, str):
        raise ParamError("bad_time", f"{name} must be epoch ms or an ISO-8601 time")
    text = value.strip()
    match = _DURATION.match(text)
    if match and now_ms is not None:
        return now_ms - int(match.group(1)) * _DURATION_MS[match.group(2)]
    try:
        parsed = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise ParamError("bad_time", f"{name}: {value[:64]!r} is not epoch ms or an ISO-8601 time") from None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=timezone.utc)
    return _checked_time(name, int(parsed.timestamp() * 1000))


def _checked_time(name: str, time_ms: int) -> int:
    if time_ms > MAX_TIME_MS:
        raise ParamError("bad_time", f"{name} is after the year 9999")
    return time_ms


def parse_duration(name: str, value: str) -> int:
    """A duration such as ``90s``, ``15m``, ``1h``, ``7d`` in ms."""
    match = _DURATION.match(value.strip())
    if not match:
        raise ParamError("bad_duration", f"{name} must look like 30s, 15m, 1h or 7d")
    return int(match.group(1)) * _DURATION_MS[match.group(2)]


def time_window(begin_ms: int | None, end_ms: int | None, *, now_ms: int) -> tuple[int, int]:
    """Fill in a missing end (now) or begin (end - 30 days) and check the window."""
    end = now_ms if end_ms is None else end_ms
    begin = end - DEFAULT_WINDOW_MS if begin_ms is None else begin_ms
    begin = max(begin, 0)
    if begin > end:
        raise ParamError("bad_window", "begin is after end")
    if end - begin > MAX_WINDOW_MS:
        raise ParamError("bad_window", f"the window is longer than {MAX_WINDOW_MS // 86_400_000} days")
    return begin, end


def page_size(value: Any, default: int = DEFAULT_PAGE_SIZE, name: str = "limit") -> int:
    """A page size between 1 and MAX_PAGE_SIZE."""
    if value is None or value == "":
        return default
    size = to_int(name, value)
    if not 1 <= size <= MAX_PAGE_SIZE:
        raise ParamError("bad_limit", f"{name} must be between 1 and {MAX_PAGE_SIZE}")
    return size


def text_param(name: str, value: str | None, *, required: bool = False) -> str | None:
    """A plain text parameter with a length limit."""
    if value is None or value == "":
        if required:
            raise ParamError("missing_param", f"{name} is required")
        return None
    if len(value) > MAX_PARAM_LEN:
        raise ParamError("bad_param", f"{name} is longer than {MAX_PARAM_LEN} characters")
    return _unicode_text(name, value)
