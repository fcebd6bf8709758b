"""Hourly rollups: each (hour, topic) row is the topic's minute rollups of the hour merged, for long windows.

A problems-first overview needs every topic's totals for the window, and each group's lag looks
back 24 hours: 500 topics over 24 hours are 720,000 minute rows, but 12,000 hour rows.  The hour
rows are keyed hour first (:func:`collector.store.schema.rollup_hour_row`), so one range scan
returns every topic's hours of a window (a per-topic key would take a scan per topic: thousands of
round trips on HBase).  Each row holds one cell, the hour's bucket (:func:`encode_hour`).

An hour row is a function of the hour's minute rows (never an incremented counter):
:func:`rewrite_hours` re-merges an hour from its minute rows whenever :mod:`collector.index.rollup`
rewrites one of them (the same code path on every store).  :func:`read_window` covers a range of
minutes with whole hours from the hour rows and the ragged edges from minute rows.

An hour bucket's fields mean what a minute's do over the hour: counts and latency histograms add
up, ``first_ms`` is the hour's oldest stored message, and each group's ``oldest_open_ms`` /
``oldest_open_after_first_ms`` are what :func:`collector.query.overview.lag_ms` would find
walking the hour's minutes, so the lag computed over hours and minutes equals the one over minutes.

Example::

    from collector.index.rollup_hours import read_window
    for topic, buckets in read_window(store, begin_ms, end_ms).items():   # hours, and minutes at the edges
        print(topic, [(b.minute_ms, b.sent) for b in buckets])
"""

from __future__ import annotations

import bisect
import functools
import itertools
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

import msgpack

from collector.index.rollup_buckets import GroupBucket, MinuteBucket
from collector.store import keys, schema
from collector.store.base import Columns, Row, Store

HOUR_MS = schema.HOUR_MS
DECODED_CACHE = 16_384
"""Decoded hour buckets, and minute buckets, kept by their cells (each cache): a console or a
Prometheus reading the same day of rollups again decodes only the rows that changed (about 1.5 KB
each; 12,500 hour rows are 500 topics over a day)."""
READERS = 8
"""Scans run at once on a store whose reads overlap (HBase: round trips wait in parallel)."""
HOUR_FORMAT = 1
"""The encoding of an hour row's cell (:func:`encode_hour`); layout 2 starts at 1."""
Hour = tuple[str, int]
"""(topic, start of the hour)."""
T = TypeVar("T")
R = TypeVar("R")
Span = tuple[int, int]
"""Minutes ``[a, b)``: their starts, ``a`` and ``b`` minute-aligned."""


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


def rewrite_hours(store: Store, hours: Iterable[Hour]) -> int:
    """Re-merge each hour from its minute rows now (an hour with none left loses its row); returns the hours."""
    ordered = sorted(set(hours))
    puts: list[Row] = []
    emptied: list[bytes] = []
    for topic, hour_ms in ordered:
        minutes = _minute_rows(store, topic, hour_ms, hour_ms + HOUR_MS)
        row = schema.rollup_hour_row(topic, hour_ms)
        if minutes:
            puts.append((row, {schema.ROLLUP_COLUMN: encode_hour(merge(topic, hour_ms, minutes), minutes)}))
        else:
            emptied.append(row)
    if emptied:
        store.delete_rows(schema.ROLLUPS, emptied)
    if puts:
        store.put_rows(schema.ROLLUPS, puts)
    return len(ordered)


def encode_hour(bucket: MinuteBucket, minutes: Sequence[MinuteBucket]) -> bytes:
    """An hour row's one cell: the columns a minute row of the hour's ``bucket`` would have, packed
    together (one cell per topic and hour is a quarter of the cells a scan of every topic's hours
    returns), and which of its minutes have a minute row (bit ``i``: minute ``i`` of the hour), so a
    read of the hour's ragged edge scans only where there are rows; and which of them hold stored
    messages (the only minutes a group can have received anything in)."""
    rows = stored = 0
    for m in minutes:
        bit = 1 << (m.minute_ms - bucket.minute_ms) // schema.MINUTE_MS
        rows |= bit
        stored |= bit if m.first_ms is not None else 0
    return msgpack.packb([HOUR_FORMAT, bucket.columns(), rows, stored])


@functools.lru_cache(maxsize=DECODED_CACHE)
def decode_hour(topic: str, hour_ms: int, value: bytes) -> tuple[MinuteBucket, int, int]:
    """The bucket of an hour row, the mask of its minutes with rows and of those with stored messages
    (:func:`encode_hour`), from its cell (cached: read-only for callers)."""
    _, columns, rows, stored = msgpack.unpackb(value)
    return MinuteBucket.from_columns(topic, hour_ms, columns), rows, stored


@functools.lru_cache(maxsize=DECODED_CACHE)
def _decode_minute(topic: str, row: bytes, cells: tuple[tuple[bytes, bytes], ...]) -> MinuteBucket:
    return MinuteBucket.from_row(topic, row, dict(cells))


def _minute_rows(store: Store, topic: str, begin_ms: int, end_ms: int) -> list[MinuteBucket]:
    """The minute rollups of ``topic`` starting in ``[begin_ms, end_ms)``."""
    if begin_ms >= end_ms:  # no scan: HBase answers a scan whose start is its stop with that row
        return []
    rows = store.scan(schema.ROLLUPS, schema.rollup_row(topic, begin_ms), schema.rollup_row(topic, end_ms))
    return [MinuteBucket.from_row(topic, row, cols) for row, cols in rows]


def clear_decoded() -> None:
    """Forget the decoded hour and minute buckets (benchmarks time a first read with it)."""
    decode_hour.cache_clear()
    _decode_minute.cache_clear()


@functools.lru_cache(maxsize=DECODED_CACHE)
def _hour_key(tail: bytes) -> tuple[int, str]:
    """``(hour, topic)`` of an hour row key from the bytes after its kind."""
    hour_ms, topic = keys.unpack(tail)
    return int(hour_ms), str(topic)  # type: ignore[arg-type]


def cover(begin_ms: int, end_ms: int, cuts: Iterable[int] = ()) -> tuple[list[int], list[Span]]:
    """How to read the minutes ``[begin_ms, end_ms)`` (minute starts): ``(hours, spans)``, the whole
    hours to read as hour rows and the minute spans ``[a, b)`` to read as minute rows (in order,
    adjacent ones joined).  No whole hour straddles one of ``cuts`` (where a caller splits the range:
    the overview's window begins inside its lag's look-back).  Pure, tested without a store."""
    points = sorted({begin_ms, end_ms, *(c for c in cuts if begin_ms < c < end_ms)})
    hours: list[int] = []
    spans: list[Span] = []

    def add_span(a: int, b: int) -> None:
        if spans and spans[-1][1] == a:
            spans[-1] = (spans[-1][0], b)
        else:
            spans.append((a, b))

    for a, b in zip(points, points[1:]):
        first_hour, last_hour = -(-a // HOUR_MS) * HOUR_MS, b - b % HOUR_MS  # hours in [first, last) are whole
        if first_hour >= last_hour:
            add_span(a, b)
            continue
        if a < first_hour:
            add_span(a, first_hour)
        hours.extend(range(first_hour, last_hour, HOUR_MS))
        if last_hour < b:
            add_span(last_hour, b)
    return hours, spans


def read_window(
    store: Store, begin_ms: int, end_ms: int, *, cuts: Iterable[int] = (), topic: str | None = None,
    lag_only_before: int | None = None,
) -> dict[str, list[MinuteBucket]]:
    """Every topic's rollups (only ``topic``'s when given) covering the minutes ``[begin_ms, end_ms)``
    (minute starts), each topic's in time order: an hour bucket per whole hour (:func:`cover`), minute
    buckets elsewhere.  Topics with no rollup in the range are left out.

    The hour rows of every hour the range touches come in one scan per hour (or one multi-get for one
    topic); each holds which of its minutes have rows, so edge minutes are scanned only for the topics
    with rows there, and only from the first such row to the last; an edge hour whose rows are all in
    the range (and on one side of each cut) is read as its hour row.  Buckets are read-only (cached).

    ``lag_only_before``: the buckets before it are only walked for the lag
    (:func:`collector.query.overview.lag_ms`), from ``begin_ms`` on.  Then the minutes of a ragged first
    hour wholly before it are not read when its hour row shows that nothing waited in that hour for
    any group: one bucket with no counts stands for them (:func:`_nothing_waiting`)."""
    cuts = sorted(set(cuts))
    hours, spans = cover(begin_ms, end_ms, cuts)
    first = hour_of(begin_ms)
    last = hour_of(end_ms - 1) + HOUR_MS if end_ms > begin_ms else first  # the hours the range touches: [first, last)
    whole = set(hours)
    edge = _minute_masks(spans)
    out: dict[str, list[MinuteBucket]] = {}
    wanted: dict[str, list[int]] = {}  # per topic, the edges' minutes that have rows
    lag_only_first = lag_only_before is not None and begin_ms % HOUR_MS and first + HOUR_MS <= lag_only_before
    for name, hour_ms, columns in _hour_rows(store, first, last, topic):
        bucket, mask, stored = decode_hour(name, hour_ms, columns[schema.ROLLUP_COLUMN])
        if hour_ms in whole:
            out.setdefault(name, []).append(bucket)
            continue
        rows = mask
        mask &= edge.get(hour_ms, 0)
        if lag_only_first and hour_ms == first and all(g.oldest_open_ms is None for g in bucket.groups.values()):
            if mask & stored:
                out.setdefault(name, []).append(_nothing_waiting(bucket, begin_ms))
            continue
        if mask and mask == rows and _one_side(hour_ms, rows, cuts):
            # Every row of the hour is in the range, on one side of each cut: the hour row is exactly
            # their merge (the window's end hour, when nothing is timed after the end).
            out.setdefault(name, []).append(_at_first_row(bucket, rows))
            continue
        wanted.setdefault(name, []).extend(hour_ms + i * schema.MINUTE_MS for i in range(mask.bit_length()) if mask >> i & 1)
    # One scan per topic and span, from its first minute with a row to its last: on HBase a short scan
    # costs less than a multi-get of its rows (a Get seeks every store file; measured 3x slower).
    starts = [a for a, _ in spans]
    reads = [(name, min(run), max(run) + schema.MINUTE_MS) for name, minutes in wanted.items()
             for _, run in itertools.groupby(sorted(minutes), key=lambda m: bisect.bisect_right(starts, m))
             for run in [list(run)]]
    for (name, _, _), rows in zip(reads, _map(store, lambda r: _edge_rows(store, *r), reads)):
        out.setdefault(name, []).extend(rows)
    for buckets in out.values():
        buckets.sort(key=lambda b: b.minute_ms)
    return out


def _nothing_waiting(hour: MinuteBucket, begin_ms: int) -> MinuteBucket:
    """What the lag walk needs of an hour's minutes from ``begin_ms`` on, when nothing waited in the
    hour for any of its groups and some of those minutes hold stored messages: no count, nothing
    waiting, and each of the hour's groups present (each received something there: every minute with
    stored messages has a bucket of a group for which nothing waited).  Minutes without stored
    messages have no group bucket, so when none of them has any, they are nothing to the walk."""
    return MinuteBucket(hour.topic, begin_ms, groups={g: GroupBucket() for g in hour.groups})


def _one_side(hour_ms: int, rows: int, cuts: Sequence[int]) -> bool:
    """Whether no cut falls between two of the hour's minute rows (``rows``: their mask)."""
    for c in cuts:
        if hour_ms < c < hour_ms + HOUR_MS:
            below = rows & ((1 << (c - hour_ms) // schema.MINUTE_MS) - 1)
            if below and below != rows:
                return False
    return True


def _at_first_row(hour: MinuteBucket, rows: int) -> MinuteBucket:
    """The hour's bucket, timed at its first minute row (so it sorts, and falls on the side of a cut,
    where its rows do); shares the cached bucket's groups (read-only)."""
    first = hour.minute_ms + ((rows & -rows).bit_length() - 1) * schema.MINUTE_MS
    return MinuteBucket(hour.topic, first, hour.sent, hour.first_ms, hour.groups, hour.failed_sends)


def _edge_rows(store: Store, topic: str, begin_ms: int, end_ms: int) -> list[MinuteBucket]:
    """The minute rows of ``topic`` in ``[begin_ms, end_ms)``, decoded through the cache."""
    rows = store.scan(schema.ROLLUPS, schema.rollup_row(topic, begin_ms), schema.rollup_row(topic, end_ms))
    return [_decode_minute(topic, row, tuple(cells.items())) for row, cells in rows]


def _minute_masks(spans: Iterable[Span]) -> dict[int, int]:
    """Per hour, the minutes of ``spans`` in it as a mask (bit ``i``: minute ``i`` of the hour)."""
    masks: dict[int, int] = {}
    for a, b in spans:
        for minute_ms in range(a, b, schema.MINUTE_MS):
            hour_ms = hour_of(minute_ms)
            masks[hour_ms] = masks.get(hour_ms, 0) | 1 << (minute_ms - hour_ms) // schema.MINUTE_MS
    return masks


def _hour_rows(store: Store, first: int, last: int, topic: str | None) -> Iterator[tuple[str, int, Columns]]:
    """``(topic, hour, columns)`` of the hour rows of the hours in ``[first, last)``, in key order."""
    hours = list(range(first, last, HOUR_MS))
    if topic is not None:
        found = store.get_rows(schema.ROLLUPS, [schema.rollup_hour_row(topic, h) for h in hours])
        yield from ((topic, h, columns) for h, columns in zip(hours, found, strict=True) if columns)
        return
    kind = len(keys.pack((schema.ROLLUP_HOUR,)))
    # One scan per hour, so a store whose reads overlap (HBase) reads the hours at once.
    for rows in _map(store, lambda h: list(store.scan(schema.ROLLUPS, schema.rollup_hour_prefix(h),
                                                      schema.rollup_hour_prefix(h + HOUR_MS))), hours):
        for row, columns in rows:
            hour_ms, name = _hour_key(row[kind:])
            yield name, hour_ms, columns


def _map(store: Store, read: Callable[[T], R], items: Sequence[T]) -> Iterator[R]:
    """``read`` each of ``items``, in order: several at once when the store's reads overlap (HBase)."""
    if not store.concurrent_reads or len(items) < 2:
        yield from map(read, items)
        return
    with ThreadPoolExecutor(max_workers=READERS, thread_name_prefix="tracehook-rollup-read") as pool:
        yield from pool.map(read, items)


def read_buckets(store: Store, topic: str, begin_ms: int, end_ms: int) -> list[MinuteBucket]:
    """The rollups of ``topic`` covering the minutes from the one holding ``begin_ms`` to the one
    holding ``end_ms``, in time order: an hour bucket for each whole hour inside, minute buckets for
    the ragged edges."""
    lo, hi = schema.minute_of(begin_ms), schema.minute_of(end_ms) + schema.MINUTE_MS
    return read_window(store, lo, hi, topic=topic).get(topic, [])

