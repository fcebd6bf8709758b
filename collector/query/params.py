"""Parsing and checking query parameters for the query API (QMQ and native).

Every problem raises :class:`collector.query.errors.ParamError` with a short machine-readable
``reason`` and a text naming the bad parameter, so handlers answer 400 with
``{"error": reason, "detail": text}`` and never 500 on a bad query.

Example::

    begin, end = request_window(request.query)          # begin=-1h, end=now, ISO-8601, epoch ms
    limit = page_size(request.query.get("limit"))
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from typing import Any

from collector.query import timeparse
from collector.query.errors import BadTimeError, ParamError
from tracehook import wire

DEFAULT_PAGE_SIZE = 20
MAX_PAGE_SIZE = 500
"""Largest page a query may ask for (bigger pages make one slow request)."""
DEFAULT_WINDOW_MS = 30 * 24 * 3600 * 1000
"""QMQ's default: the last 30 days when neither begin nor end is given."""
MAX_WINDOW_MS = 366 * 24 * 3600 * 1000
"""Longest time window one query may scan."""
MAX_PARAM_LEN = 16 * 1024
MAX_TIME_MS = wire.MAX_TIME_MS
"""9999-12-31T23:59:59.999Z: later times are refused, as the collector refuses them in events."""



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


_BOOL_STRINGS = frozenset(("true", "false", "True", "False", "TRUE", "FALSE"))


def field_bool(obj: dict[str, Any], name: str, default: bool = False, *, required: bool = False) -> bool:
    """A boolean field: JSON true/false, or the strings "true"/"false" in any case (QMQ's parser coerces them)."""
    value = obj.get(name)
    if value is None:
        if required:
            raise ParamError("missing_field", f"{name} is required (true or false)")
        return default
    if isinstance(value, str) and value in _BOOL_STRINGS:
        return value.lower() == "true"
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


def time_param(name: str, value: Any, *, now_ms: int | None = None) -> int | None:
    """A point in time as epoch ms, or None when absent.

    The forms are :func:`collector.query.timeparse.parse_time`'s (epoch ms or seconds,
    ISO-8601 or ``yyyy-MM-dd HH:mm:ss`` in UTC, ``now``, ``-1h``, ``1h30m`` ago);
    here QMQ's JSON numbers are accepted too and times after the year 9999 refused.
    """
    if value is None or value == "":
        return None
    if isinstance(value, float):
        # QMQ clients may send longs as JSON floats (1.5e12): whole milliseconds are meant.
        if not math.isfinite(value):
            raise ParamError("bad_time", f"{name} must be a finite number")
        value = int(value)
    try:
        time_ms = timeparse.parse_time(value, now_ms=now_ms, name=name)
    except BadTimeError as exc:
        raise ParamError("bad_time", exc.detail) from None
    if time_ms > MAX_TIME_MS:
        raise ParamError("bad_time", f"{name} is after the year 9999")
    return time_ms


def time_window(
    begin_ms: int | None, end_ms: int | None, *, now_ms: int, max_window_ms: int | None = MAX_WINDOW_MS,
) -> tuple[int, int]:
    """Fill in a missing end (now) or begin (end - 30 days) and check the window (``max_window_ms=None``: any length)."""
    end = now_ms if end_ms is None else end_ms
    begin = end - DEFAULT_WINDOW_MS if begin_ms is None else begin_ms
    begin = max(begin, 0)
    if begin > end:
        raise ParamError("bad_window", "begin is after end")
    if max_window_ms is not None and end - begin > max_window_ms:
        raise ParamError("bad_window", f"the window is longer than {max_window_ms // 86_400_000} days")
    return begin, end


def request_window(
    query: Mapping[str, Any], begin: str = "begin", end: str = "end", *, now_ms: int | None = None,
    max_window_ms: int | None = MAX_WINDOW_MS,
) -> tuple[int, int]:
    """The checked window named by ``query[begin]`` and ``query[end]`` (a query string or a JSON object)."""
    now = timeparse.current_ms() if now_ms is None else now_ms
    return time_window(time_param(begin, query.get(begin), now_ms=now), time_param(end, query.get(end), now_ms=now),
                       now_ms=now, max_window_ms=max_window_ms)


def page_size(value: Any, default: int = DEFAULT_PAGE_SIZE, name: str = "limit", *, clamp: bool = False) -> int:
    """A page size between 1 and MAX_PAGE_SIZE; with ``clamp`` a larger one gives MAX_PAGE_SIZE (QMQ's ``len``)."""
    if value is None or value == "":
        return default
    size = to_int(name, value)
    if clamp and size > MAX_PAGE_SIZE:
        return MAX_PAGE_SIZE
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
