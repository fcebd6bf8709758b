"""Hourly rollups: each hour row is its minutes merged, written by the batch that writes the minutes;
the overview over hours and ragged minute edges gives the counts and lag a reference worked out
from the messages gives."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from index_helpers import consumed, message, unique
from rollup_reference import expected_minutes

from collector.index.indexer import finish_batch, index_records
from collector.index.rollup_hours import cover, read_buckets
from collector.query.overview import overview
from collector.store import Store, keys, schema
from tracehook.wire import Status

pytestmark = pytest.mark.fallback

HOUR = 3_600_000
MINUTE = 60_000
H0 = 1_700_000_000_000 - 1_700_000_000_000 % HOUR  # an hour boundary
NOW = H0 + 4 * HOUR
TIMES = [H0 + i * 17 * MINUTE + 7_000 for i in range(12)]  # 12 messages over 3 hours and a bit (13 below)
TIMES[4] = TIMES[5] - 5_000  # in the minute of message 5, just before it
# Per group: what happens to message i (None: never received).
FATES: dict[str, list[str | None]] = {
    "g1": ["ok"] * 5 + [None, "ok", "ok", "pending", "ok", "ok", "ok"],
    # g2 starts in the middle of the second hour, just after a message of the same minute it never
    # gets, and misses one more in that hour: what waits in its first hour is only what came after
    # its first message.
    "g2": [None] * 5 + ["ok", None, "ok", "ok", "ok", "failed", None],
}
# Early in the second hour, a message no group gets: it waits for g1, which started in the first hour.
TIMES.insert(4, H0 + 62 * MINUTE + 7_000)
for _fates in FATES.values():
    _fates.insert(4, None)
WINDOWS = [(H0, NOW), (H0 + 25 * MINUTE, NOW - 1), (H0 + HOUR + 1, H0 + 3 * HOUR + 10 * MINUTE),
           (H0 + 40 * MINUTE, H0 + 50 * MINUTE), (H0 + 2 * HOUR, H0 + 3 * HOUR - 1)]
"""Windows over whole hours, ragged edges, within one hour."""


def batches(topic: str) -> tuple[list[Any], list[Any]]:
    """The sends and the first consumes, then the later consumes (they touch minutes of earlier hours)."""
    first: list[Any] = []
    second: list[Any] = []
    for i, t in enumerate(TIMES):
        msg_id = f"{topic}-{i}"
        first += message(topic, msg_id, t, offset=i)
        for group, fates in FATES.items():
            fate = fates[i]
            if fate is not None:
                status = {"ok": Status.OK, "failed": Status.FAILED, "pending": None}[fate]
                (first if i < 6 else second).extend(consumed(topic, msg_id, t, group, status=status, offset=i))
    return first, second


def reference(begin_ms: int, end_ms: int, horizon_ms: int = 24 * HOUR) -> dict[str, Any]:
    """Counts of the messages whose minute is in the window, and each group's lag at NOW (over the
    messages from the minute ``horizon_ms`` before the window's end to its end, from the first one the
    group received)."""
    lo, hi = begin_ms - begin_ms % MINUTE, end_ms - end_ms % MINUTE
    since = min(begin_ms, end_ms - horizon_ms)
    inside = [i for i, t in enumerate(TIMES) if lo <= t - t % MINUTE <= hi]
    upto = [i for i, t in enumerate(TIMES) if since - since % MINUTE <= t - t % MINUTE <= hi]
    groups = {}
    for group, fates in FATES.items():
        first = next((i for i in upto if fates[i] is not None), len(TIMES))
        waiting = [i for i in upto if i >= first and fates[i] in (None, "pending")]
        counts = {name: sum(fates[i] == name for i in inside) for name in ("ok", "failed", "pending")}
        if any(fates[i] is not None for i in inside) or waiting:
            groups[group] = (counts, NOW - TIMES[waiting[0]] if waiting else 0)
    return {"sent": len(inside), "groups": groups}


def observed(store: Store, topic: str, begin_ms: int, end_ms: int, *, one_topic: bool = True,
             horizon_ms: int = 24 * HOUR) -> dict[str, Any]:
    """The overview's counts and lags of ``topic``: asked for alone, or picked from every topic's."""
    found = [t for t in overview(store, begin_ms, end_ms, now_ms=NOW, topic=topic if one_topic else None,
                                 lag_horizon_ms=horizon_ms).topics if t.topic == topic]
    if not found:
        return {"sent": 0, "groups": {}}
    (stats,) = found
    return {"sent": stats.sent, "groups": {g.group: (
        {"ok": g.counts["consumed"], "failed": g.counts["failed"], "pending": g.counts["pending"]}, g.lag_ms)
        for g in stats.groups}}


def test_hour_rows_merge_their_minutes_as_the_reference_counts_them(store: Store) -> None:
    topic = unique("hr")
    first, second = batches(topic)
    index_records(store, first)
    finish_batch(store, now_ms=NOW)
    index_records(store, second)
    finish_batch(store, now_ms=NOW)
    minutes = expected_minutes([e for _, e in first + second], topic)
    hours = read_buckets(store, topic, H0, H0 + 4 * HOUR - 1)  # four whole hours: hour rows only
    assert [h.minute_ms for h in hours] == [H0, H0 + HOUR, H0 + 2 * HOUR, H0 + 3 * HOUR]
    for h in hours:
        mine = [m for start, m in minutes.items() if h.minute_ms <= start < h.minute_ms + HOUR]
        assert h.sent == sum(m["sent"] for m in mine)
        for group, bucket in h.groups.items():
            want = [m["groups"][group] for m in mine if group in m["groups"]]
            assert bucket.consumed == sum(g["consumed"] for g in want)
            assert bucket.failed == sum(g["failed"] for g in want)
            assert bucket.pending == sum(g["pending"] for g in want)
            assert bucket.latency == [sum(col) for col in zip(*(g["latency"] for g in want), strict=True)]


def test_overview_over_hours_and_ragged_edges_matches_the_reference(store: Store) -> None:
    topic = unique("hw")
    first, second = batches(topic)
    index_records(store, first + second)
    finish_batch(store, now_ms=NOW)
    for begin, end in WINDOWS:
        assert observed(store, topic, begin, end) == reference(begin, end), (begin - H0, end - H0)


def test_every_topics_hours_come_from_one_scan_per_hour_and_match_the_reference(store: Store) -> None:
    a, b, late = unique("ha"), unique("hb"), unique("hl")
    records: list[Any] = []
    for topic in (a, b):
        first, second = batches(topic)
        records += first + second
    records += message(late, f"{late}-0", H0 + 3 * HOUR + 5 * MINUTE)  # only in the fourth hour
    index_records(store, records)
    finish_batch(store, now_ms=NOW)
    # Keyed hour first: one scan of an hour's prefix holds every topic with messages in that hour.
    start, stop = schema.rollup_hour_prefix(H0 + HOUR), schema.rollup_hour_prefix(H0 + 2 * HOUR)
    in_hour = {keys.unpack(row)[2] for row, _ in store.scan(schema.ROLLUPS, start, stop)}
    assert {a, b} <= in_hour and late not in in_hour
    for begin, end in WINDOWS:
        for topic in (a, b):
            assert observed(store, topic, begin, end, one_topic=False) == reference(begin, end), (begin - H0, end - H0)
    assert observed(store, late, H0, NOW, one_topic=False)["sent"] == 1
    assert observed(store, late, H0, H0 + 3 * HOUR - 1, one_topic=False)["sent"] == 0


def test_the_lag_look_back_starting_inside_an_hour_matches_the_reference(store: Store) -> None:
    """The look-back's first hour is ragged: its minutes are read, or stood for by its hour row when
    nothing waited in it (the first hour here: g1 consumed all of it, g2 had not started)."""
    topic = unique("hh")
    first, second = batches(topic)
    index_records(store, first + second)
    finish_batch(store, now_ms=NOW)
    for begin in (H0 + 2 * HOUR, H0 + 2 * HOUR + 25 * MINUTE, H0 + 3 * HOUR + 5 * MINUTE):
        for since in (H0 + 10 * MINUTE, H0 + 20 * MINUTE, H0 + 40 * MINUTE, H0 + 52 * MINUTE, H0 + 59 * MINUTE,
                      H0 + 70 * MINUTE, H0 + 86 * MINUTE, H0 + 110 * MINUTE):
            for one_topic in (True, False):
                got = observed(store, topic, begin, NOW, one_topic=one_topic, horizon_ms=NOW - since)
                assert got == reference(begin, NOW, NOW - since), (begin - H0, since - H0, one_topic)


def test_a_later_batch_into_an_hour_already_read_shows_in_the_next_read(store: Store) -> None:
    topic = unique("hc")
    index_records(store, message(topic, f"{topic}-0", H0 + 5 * MINUTE) + message(topic, f"{topic}-1", H0 + 50 * MINUTE))
    finish_batch(store, now_ms=NOW)
    before = observed(store, topic, H0, NOW, one_topic=False)
    assert before["sent"] == 2 and before["groups"] == {}
    index_records(store, consumed(topic, f"{topic}-0", H0 + 5 * MINUTE, "g1"))  # a late consume, hours later
    finish_batch(store, now_ms=NOW)
    after = observed(store, topic, H0, NOW, one_topic=False)
    assert after["groups"] == {"g1": ({"ok": 1, "failed": 0, "pending": 0}, NOW - (H0 + 50 * MINUTE))}


@given(st.integers(0, 3000), st.integers(0, 3000), st.lists(st.integers(-10, 3010), max_size=3))
def test_cover_reads_each_minute_once_and_no_hour_across_a_cut(a: int, length: int, cuts: list[int]) -> None:
    begin, end = H0 + a * MINUTE, H0 + (a + length) * MINUTE
    cut_ms = [H0 + c * MINUTE for c in cuts]
    hours, spans = cover(begin, end, cut_ms)
    minutes = [m for h in hours for m in range(h, h + HOUR, MINUTE)] + [m for x, y in spans for m in range(x, y, MINUTE)]
    assert sorted(minutes) == list(range(begin, end, MINUTE))  # every minute of the range, once
    assert all(h % HOUR == 0 for h in hours)
    assert not any(h < c < h + HOUR for h in hours for c in cut_ms)
    for m in (m for x, y in spans for m in range(x, y, MINUTE)):  # read as a minute only when its hour can't be whole
        h = m - m % HOUR
        assert h < begin or h + HOUR > end or any(h < c < h + HOUR for c in cut_ms)
    assert all(y1 < x2 for (_, y1), (x2, _) in zip(spans, spans[1:]))  # adjacent spans are joined
