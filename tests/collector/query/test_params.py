"""Query parameter parsing: times, windows, page sizes."""

from __future__ import annotations

import pytest

from collector.query.params import (
    DEFAULT_WINDOW_MS,
    MAX_PAGE_SIZE,
    MAX_TIME_MS,
    ParamError,
    field_str,
    page_size,
    request_window,
    text_param,
    time_param,
    time_window,
    to_int,
)
from collector.server.errors import http_answer

NOW = 1_795_341_600_000  # 2026-11-22T10:00:00Z


@pytest.mark.parametrize("value, expected", [
    (NOW, NOW),
    (str(NOW), NOW),
    (NOW // 1000, NOW),  # epoch seconds are recognised
    ("2026-11-22T10:00:00Z", NOW),
    ("2026-11-22T11:00:00+01:00", NOW),
    ("2026-11-22 10:00:00", NOW),  # QMQ's date format, UTC
    ("1h", NOW - 3_600_000),
    ("7d", NOW - 7 * 86_400_000),
    # The forms collector.query.timeparse reads for the backtracking routes: one parser for every route.
    ("-1h", NOW - 3_600_000),
    ("1h30m", NOW - 5_400_000),
    ("now", NOW),
    ("+10m", NOW + 600_000),
    (float(NOW), NOW),  # QMQ clients may send longs as JSON floats
    (None, None),
    ("", None),
])
def test_time_param(value, expected):
    assert time_param("t", value, now_ms=NOW) == expected


@pytest.mark.parametrize("value", ["tomorrow", True, [1], -5, "1y", float("nan"), float("inf"), "\u00b2", "\u00b2h",
                                   MAX_TIME_MS + 1, str(2**63), 1e300, "10000-01-01T00:00:00Z"])
def test_parse_time_rejects(value):
    with pytest.raises(ParamError) as info:
        time_param("begin", value, now_ms=NOW)
    assert http_answer(info.value).status == 400 and "begin" in info.value.detail


def test_default_window_is_the_last_30_days():
    assert time_window(None, None, now_ms=NOW) == (NOW - DEFAULT_WINDOW_MS, NOW)
    assert time_window(NOW - 5, None, now_ms=NOW) == (NOW - 5, NOW)


def test_window_checks():
    with pytest.raises(ParamError, match="begin is after end"):
        time_window(NOW, NOW - 1, now_ms=NOW)
    with pytest.raises(ParamError, match="longer than"):
        time_window(0, NOW, now_ms=NOW)


def test_page_size_bounds():
    assert page_size(None) == 20
    assert page_size("7") == 7
    assert page_size(MAX_PAGE_SIZE) == MAX_PAGE_SIZE
    for bad in (0, MAX_PAGE_SIZE + 1, "x", True, 2.5):
        with pytest.raises(ParamError):
            page_size(bad)


def test_to_int_stays_within_64_bits():
    assert to_int("n", str(2**63 - 1)) == 2**63 - 1 and to_int("n", -(2**63)) == -(2**63)
    for bad in (2**63, -(2**63) - 1, "9" * 19, "\u0661\u0662", 1.0):
        with pytest.raises(ParamError):
            to_int("n", bad)


def test_text_that_utf8_cannot_encode_is_refused():
    assert field_str({"s": "e\u0301\U0001d11e\x00"}, "s") == "e\u0301\U0001d11e\x00"
    with pytest.raises(ParamError, match="s is not valid Unicode"):
        field_str({"s": "a\ud800"}, "s")
    with pytest.raises(ParamError, match="key is not valid Unicode"):
        text_param("key", "\udfff")


def test_parse_time_is_timeparse_plus_range_checks():
    from collector.query import timeparse

    for value in ("-2h", "now", "2026-11-22T10:00:00Z", str(NOW), "1w2d"):
        assert time_param("t", value, now_ms=NOW) == timeparse.parse_time(value, now_ms=NOW)
    # timeparse takes any signed 64-bit time; the query API refuses what it cannot file.
    assert timeparse.parse_time(str(MAX_TIME_MS + 1)) == MAX_TIME_MS + 1
    with pytest.raises(ParamError, match="year 9999"):
        time_param("t", str(MAX_TIME_MS + 1))


def test_request_window_reads_a_query_or_a_json_object():
    assert request_window({"begin": "-1h", "end": "now"}, now_ms=NOW) == (NOW - 3_600_000, NOW)
    assert request_window({}, now_ms=NOW) == (NOW - DEFAULT_WINDOW_MS, NOW)
    assert request_window({"b": NOW - 5, "e": ""}, "b", "e", now_ms=NOW) == (NOW - 5, NOW)
    with pytest.raises(ParamError) as info:
        request_window({"end": "soon"}, now_ms=NOW)
    assert info.value.reason == "bad_time" and "end" in info.value.detail
