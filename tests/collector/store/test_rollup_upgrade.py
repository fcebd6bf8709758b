"""Rollups written by the release before failed sends were counted apart (format 1) are rewritten by
the first batch after the upgrade: the false lag of a failed send goes at once, not after 24 hours."""

from __future__ import annotations

from typing import Any

import msgpack
from index_helpers import PRODUCER, consumed, ev, message, unique

from collector.query.overview import overview
from collector.store import Store, keys, layout, schema
from collector.store.indexer import finish_batch, index_records
from collector.store.rollup import ROLLUP_FORMAT, Part, compute_minute, read_minutes
from collector.store.rollup_upgrade import recorded_format, upgrade_rollups
from tracehook.wire import EventType, Status

T0 = 1_700_000_000_000 - 1_700_000_000_000 % 60_000  # a minute boundary
MINUTE = 60_000
NOW = T0 + 20 * MINUTE
LATENCY_BUCKETS = 16


def failed_send(topic: str, msg_id: str, t: int) -> list[Any]:
    """A PUB the broker refused: no queue, no offset, no store time (placed at its born time)."""
    return [(PRODUCER, ev(EventType.PUB, t + 1, "pg", topic, msg_id, born_ms=t, status=Status.FAILED,
                          error="broker refused"))]


# What format 1 wrote (msgpack, version first), spelled out here rather than taken from the product code.
def v1_part(placed_ms: int, *groups: Any) -> bytes:
    return msgpack.packb([1, placed_ms, *groups])


def v1_minute(sent: int, first_ms: int) -> bytes:
    return msgpack.packb([1, sent, first_ms])


def v1_consumed_group(first_ms: int, latency_ms: int, oldest_open_ms: int | None = None) -> bytes:
    latency = [0] * LATENCY_BUCKETS
    latency[2] = 1  # 10 < latency <= 25 ms
    return msgpack.packb([1, 1, 0, 0, 0, 0, 0, first_ms, oldest_open_ms, oldest_open_ms, latency_ms, latency])


def write_format_1(store: Store, rows: list[tuple[bytes, dict[bytes, bytes]]]) -> None:
    """Leave the store as the previous release's finish_batch did: its rows, no markers, no format record."""
    start, stop = keys.prefix_range((schema.ROLLUP_DIRTY_MSG,))
    store.delete_rows(schema.ROLLUPS, [row for row, _ in store.scan(schema.ROLLUPS, start, stop)])
    store.put_rows(schema.ROLLUPS, rows)
    assert store.get_meta(layout.ROLLUP_FORMAT_COLUMN) is None


def lags_and_counts(store: Store, topic: str) -> tuple[int, int, dict[str, tuple[int, int]]]:
    (stats,) = overview(store, T0 - MINUTE, NOW, now_ms=NOW, topic=topic).topics
    return stats.sent, stats.failed_sends, {g.group: (g.sent - g.received, g.lag_ms) for g in stats.groups}


def test_format_1_rollups_with_a_failed_send_are_rewritten_by_the_next_batch(store: Store) -> None:
    with_parts, before_parts = unique("up"), unique("old")
    # Topic with parts rows: m-ok stored at T0+1 s and consumed by g after 15 ms, m-failed refused 65 s later.
    index_records(store, message(with_parts, "m-ok", T0 + 1000) + consumed(with_parts, "m-ok", T0 + 1000, "g")
                  + failed_send(with_parts, "m-failed", T0 + MINUTE + 5000))
    # Topic rolled up before parts rows existed: both messages in minute T0, a rollup row and no parts row.
    index_records(store, message(before_parts, "b-ok", T0 + 2000) + consumed(before_parts, "b-ok", T0 + 2000, "g")
                  + failed_send(before_parts, "b-failed", T0 + 3000))
    write_format_1(store, [
        (schema.rollup_topic_row(with_parts), {schema.ROLLUP_COLUMN: b"1"}),
        (schema.rollup_topic_row(before_parts), {schema.ROLLUP_COLUMN: b"1"}),
        (schema.rollup_parts_row(with_parts, T0), {
            schema.rollup_part_column("m-ok"): v1_part(T0 + 1000, "g", 0, False, 15)}),
        (schema.rollup_parts_row(with_parts, T0 + MINUTE), {
            schema.rollup_part_column("m-failed"): v1_part(T0 + MINUTE + 5000)}),
        (schema.rollup_row(with_parts, T0), {
            schema.ROLLUP_COLUMN: v1_minute(1, T0 + 1000),
            schema.rollup_group_column("g"): v1_consumed_group(T0 + 1000, 15)}),
        (schema.rollup_row(with_parts, T0 + MINUTE), {schema.ROLLUP_COLUMN: v1_minute(1, T0 + MINUTE + 5000)}),
        (schema.rollup_row(before_parts, T0), {
            schema.ROLLUP_COLUMN: v1_minute(2, T0 + 2000),
            schema.rollup_group_column("g"): v1_consumed_group(T0 + 2000, 15, oldest_open_ms=T0 + 3000)}),
    ])
    # What an operator sees before the upgrade: the failed sends as sent, never received, lagging.
    assert lags_and_counts(store, with_parts) == (2, 0, {"g": (1, NOW - (T0 + MINUTE + 5000))})
    assert lags_and_counts(store, before_parts) == (2, 0, {"g": (1, NOW - (T0 + 3000))})

    finish_batch(store, now_ms=NOW)  # the index job's first batch after the upgrade (nothing new in it)

    assert lags_and_counts(store, with_parts) == (1, 1, {"g": (0, 0)})
    assert lags_and_counts(store, before_parts) == (1, 1, {"g": (0, 0)})
    assert recorded_format(store) == ROLLUP_FORMAT
    for topic, minute in ((with_parts, T0), (with_parts, T0 + MINUTE), (before_parts, T0)):
        (kept,) = read_minutes(store, topic, minute, minute)
        assert kept == compute_minute(store, topic, minute, salt_buckets=store.salt_buckets)
    rows = list(store.scan(schema.ROLLUPS, b"", b"\xff"))
    assert upgrade_rollups(store) is None  # recorded: later batches only read the record
    finish_batch(store, now_ms=NOW)
    assert list(store.scan(schema.ROLLUPS, b"", b"\xff")) == rows


def test_a_new_store_records_the_current_format_with_its_first_batch(store: Store) -> None:
    topic = unique("new")
    index_records(store, message(topic, "n-ok", T0) + failed_send(topic, "n-failed", T0 + 10))
    assert recorded_format(store) == 1  # nothing recorded yet
    finish_batch(store, now_ms=NOW)
    assert recorded_format(store) == ROLLUP_FORMAT
    (bucket,) = read_minutes(store, topic, T0, T0)
    assert (bucket.sent, bucket.failed_sends, bucket.first_ms) == (1, 1, T0)


def test_parts_of_both_formats_decode() -> None:
    """Format-1 parts (no stored flag) read as stored; format-2 parts keep a failed send's flag."""
    old = Part.decode("m-1", v1_part(T0, "g", 0, True, 15, "h", 4, False, None))
    assert old == Part("m-1", T0, {"g": ("consumed", True, 15), "h": ("pending", False, None)}, stored=True)
    for part in (Part("m-2", T0, {}, stored=False), Part("m-3", T0, {"g": ("dead", False, None)})):
        assert Part.decode(part.msg_id, part.encode()) == part
