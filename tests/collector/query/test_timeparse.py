"""parse_time: every accepted form, and a named 400 error for everything else."""

from __future__ import annotations

import pytest

from collector.query.errors import BadTimeError
from collector.query.timeparse import parse_duration, parse_time
from collector.server.errors import http_answer

NOW = 1_795_341_600_000  # 2026-11-22T10:00:00Z


@pytest.mark.parametrize("value, expected", [
    ("1795341600000", NOW),
    (1795341600000, NOW),
    ("1795341600", NOW),  # epoch seconds
    ("2026-11-22T10:00:00Z", NOW),
    ("2026-11-22T10:00:00", NOW),  # no zone: UTC
    ("2026-11-22 10:00:00", NOW),  # QMQ's yyyy-MM-dd HH:mm:ss
    ("2026-11-22T11:30:00+01:30", NOW),
    ("2026-11-22T10:00:00.250Z", NOW + 250),
    ("2026-11-22", NOW - 10 * 3_600_000),
    ("now", NOW),
    (" NOW ", NOW),
    ("-2h", NOW - 7_200_000),
    ("2h", NOW - 7_200_000),  # a bare duration means that long ago
    ("-1h30m", NOW - 5_400_000),
    ("-500ms", NOW - 500),
    ("-7d", NOW - 7 * 86_400_000),
    ("-1w", NOW - 7 * 86_400_000),
    ("+10m", NOW + 600_000),
    # A date is ms already, even the early ones whose ms would count as seconds if given as a number.
    ("1970-01-02T00:00:00Z", 86_400_000),
    ("1970-01-01T00:00:00Z", 0),
    ("9999-12-31T23:59:59.999Z", 253_402_300_799_999),
    ("Jan 2, 1970 12:00:00 AM", 86_400_000),
])
def test_accepted_forms(value, expected) -> None:
    assert parse_time(value, now_ms=NOW) == expected


@pytest.mark.parametrize("value", [None, "", "yesterday", "-2y", "2h-", "--2h", "12:00", "2026-13-01", True, 1.5,
                                   -5, "-99999999d", "+99999999999999999999d"])
def test_rejected_forms_name_the_parameter(value) -> None:
    with pytest.raises(BadTimeError) as info:
        parse_time(value, now_ms=NOW, name="begin")
    assert http_answer(info.value).status == 400 and info.value.reason == "bad_time"
    assert "begin" in str(info.value)


def test_relative_times_default_to_the_clock() -> None:
    import time

    before = int(time.time() * 1000)
    value = parse_time("-1h")
    assert before - 3_600_000 <= value <= int(time.time() * 1000) - 3_600_000


def test_durations() -> None:
    assert parse_duration("90s") == 90_000
    assert parse_duration("1h30m") == 5_400_000
    for bad in ("-1h", "1y", "", "h"):
        with pytest.raises(BadTimeError):
            parse_duration(bad, name="bucket")
