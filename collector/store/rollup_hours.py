"""Hourly rollups: each (topic, hour) row is its minutes' rollups merged, for reads of long windows.

A problems-first overview needs every topic's totals for the window; 500 topics over 24 hours are
720,000 minute rows, but 12,000 hour rows.  An hour row is a function of the hour's minute rows
(never an incremented counter): :func:`rewrite_hours` re-merges an hour from its minute rows
whenever :mod:`collector.store.rollup` rewrites one of them (the same code path on every store).
:func:`read_buckets` covers a range with whole hours from the hour
rows and the ragged edges from minute rows.

An hour bucket's fields mean what a minute's do over the hour: counts and latency histograms add
up, ``first_ms`` is the hour's oldest stored message, and each group's ``oldest_open_ms`` /
``oldest_open_after_first_ms`` are what :func:`collector.query.overview.lag_ms` would find
walking the hour's minutes, so the lag computed over hours and minutes equals the one over minutes.

Example::

    from collector.store.rollup_hours import read_buckets
    for bucket in read_buckets(store, "orders", begin_ms, end_ms):   # hours, and minutes at the edges
        print(bucket.minute_ms, bucket.sent)
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from collector.store import keys, schema
from collector.store.base import Row, Store
from collector.store.rollup_buckets import GroupBucket, MinuteBucket

HOUR_MS = schema.HOUR_MS
Hour = tuple[str, int]
"""(topic, start of the hour)."""


def hour_of(time_ms: int) -> int:
    """The start of the hour ``time_ms`` falls in."""
    return time_ms - time_ms % HOUR_MS


def merge(topic: str, hour_ms: int, minutes: Sequence[MinuteBucket]) -> MinuteBucket:
    """The hour bucket of ``minutes`` (one topic's, in time order): pure, tested without a store."""
    out = MinuteBucket(topic, hour_ms)
    for m in minutes:
        out.sent += m.sent
        out.failed_sends += m.failed_sends
        if out.first_ms is None:
            out.first_ms = m.first_ms
    for group in sorted({g for m in minutes for g in m.groups}):
        out.groups[group] = _merge_group(group, minutes)
    return out


def _merge_group(group: str, minutes: Sequence[MinuteBucket]) -> GroupBucket:
    out = GroupBucket()
    started = False
    for m in minutes:
        b = m.groups.get(group)
        # What waits in this minute: all of its stored messages when the group received none of them.
        waiting = m.first_ms if b is None else b.oldest_open_ms
        if out.oldest_open_ms is None:
            out.oldest_open_ms = waiting
        if b is None:
            if started and out.oldest_open_after_first_ms is None:
                out.oldest_open_after_first_ms = waiting
            continue
        if not started:
            started, out.first_ms, out.oldest_open_after_first_ms = True, b.first_ms, b.oldest_open_after_first_ms
        elif out.oldest_open_after_first_ms is None:
            out.oldest_open_after_first_ms = waiting
        out.consumed += b.consumed
        out.retrying += b.retrying
        out.failed += b.failed
        out.dead += b.dead
        out.pending += b.pending
        out.retried += b.retried
        out.latency_sum_ms += b.latency_sum_ms
        out.latency = [x + y for x, y in zip(out.latency, b.latency, strict=True)]
    return out


def _minute_rows(store: Store, topic: str, begin_ms: int, end_ms: int) -> list[MinuteBucket]:
    """The minute rollups of ``topic`` starting in ``[begin_ms, end_ms)``."""
    if begin_ms >= end_ms:  # no scan: HBase answers a scan whose start is its stop with that row
        return []
    start, stop = schema.rollup_row(topic, begin_ms), schema.rollup_row(topic, end_ms)
    return [MinuteBucket.from_row(topic, row, cols) for row, cols in store.scan(schema.ROLLUPS, start, stop)]


def rewrite_hours(store: Store, hours: Iterable[Hour]) -> int:
    """Re-merge each hour from its minute rows now (an hour with none left loses its row); returns the hours."""
    ordered = sorted(set(hours))
    if not ordered:
        return 0
    rows = [schema.rollup_hour_row(t, h) for t, h in ordered]
    existing = store.get_rows(schema.ROLLUPS, rows)
    puts: list[Row] = []
    stale: list[bytes] = []
    for (topic, hour_ms), row, old in zip(ordered, rows, existing, strict=True):
        minutes = _minute_rows(store, topic, hour_ms, hour_ms + HOUR_MS)
        columns = merge(topic, hour_ms, minutes).columns() if minutes else {}
        if old and (not minutes or not old.keys() <= columns.keys()):
            stale.append(row)  # emptied, or a group left: the old row goes first
        if minutes:
            puts.append((row, columns))
    if stale:
        store.delete_rows(schema.ROLLUPS, stale)
    if puts:
        store.put_rows(schema.ROLLUPS, puts)
    return len(ordered)


def read_buckets(store: Store, topic: str, begin_ms: int, end_ms: int) -> list[MinuteBucket]:
    """The rollups of ``topic`` covering the minutes from the one holding ``begin_ms`` to the one
    holding ``end_ms``, in time order: an hour bucket for each whole hour inside, minute buckets for
    the ragged edges."""
    lo, hi = schema.minute_of(begin_ms), schema.minute_of(end_ms) + schema.MINUTE_MS  # [lo, hi)
    first_hour = -(-lo // HOUR_MS) * HOUR_MS
    last_hour = hi - hi % HOUR_MS  # hours in [first_hour, last_hour) are whole
    if first_hour >= last_hour:
        return _minute_rows(store, topic, lo, hi)
    start, stop = schema.rollup_hour_row(topic, first_hour), schema.rollup_hour_row(topic, last_hour)
    hours = [MinuteBucket.from_row(topic, row, cols) for row, cols in store.scan(schema.ROLLUPS, start, stop)]
    return [*_minute_rows(store, topic, lo, first_hour), *hours, *_minute_rows(store, topic, last_hour, hi)]


def all_hours(store: Store) -> set[Hour]:
    """Every (topic, hour) some minute rollup is in (what the format-3 upgrade builds)."""
    start, stop = keys.prefix_range((schema.ROLLUP_MINUTE,))
    return {(str(topic), hour_of(int(minute_ms)))
            for _, topic, minute_ms in (keys.unpack(row) for row, _ in store.scan(schema.ROLLUPS, start, stop))}
