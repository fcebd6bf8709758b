"""Hourly rollups: each (hour, topic) row is the topic's minute rollups of the hour merged, for long windows.

A problems-first overview needs every topic's totals for the window, and each group's lag looks
back 24 hours: 500 topics over 24 hours are 720,000 minute rows, but 12,000 hour rows.  The hour
rows are keyed hour first (:func:`collector.store.schema.rollup_hour_row`), so one range scan
returns every topic's hours of a window (a per-topic key would take a scan per topic: thousands of
round trips on HBase).  Each row holds one cell, the hour's bucket (:func:`encode_hour`).

An hour row is a function of the hour's minute rows (never an incremented counter):
:func:`rewrite_hours` re-merges an hour from its minute rows whenever :mod:`collector.store.rollup`
rewrites one of them (the same code path on every store).  :func:`read_window` covers a range of
minutes with whole hours from the hour rows and the ragged edges from minute rows.

An hour bucket's fields mean what a minute's do over the hour: counts and latency histograms add
up, ``first_ms`` is the hour's oldest stored message, and each group's ``oldest_open_ms`` /
``oldest_open_after_first_ms`` are what :func:`collector.query.overview.lag_ms` would find
walking the hour's minutes, so the lag computed over hours and minutes equals the one over minutes.

Example::

    from collector.store.rollup_hours import read_window
    for topic, buckets in read_window(store, begin_ms, end_ms).items():   # hours, and minutes at the edges
        print(topic, [(b.minute_ms, b.sent) for b in buckets])
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor

import msgpack

from collector.store import keys, schema
from collector.store.base import Columns, Row, Store
from collector.store.rollup_buckets import GroupBucket, MinuteBucket

HOUR_MS = schema.HOUR_MS
DECODED_CACHE = 16_384
"""Decoded hour buckets, and minute buckets, kept by their cells (each cache): a console or a
Prometheus reading the same day of rollups again decodes only the rows that changed (about 1.5 KB
each; 12,500 hour rows are 500 topics over a day)."""
MINUTE_READERS = 8
"""Minute scans run at once on a store whose reads overlap (HBase: round trips wait in parallel)."""
Hour = tuple[str, int]
"""(topic, start of the hour)."""
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
            puts.append((row, {schema.ROLLUP_COLUMN: encode_hour(merge(topic, hour_ms, minutes))}))
        else:
            emptied.append(row)
    if emptied:
        store.delete_rows(schema.ROLLUPS, emptied)
    if puts:
        store.put_rows(schema.ROLLUPS, puts)
    return len(ordered)


def encode_hour(bucket: MinuteBucket) -> bytes:
    """An hour row's one cell: the columns a minute row of the bucket would have, packed together (one
    cell per topic and hour is a quarter of the cells a scan of every topic's hours returns)."""
    return msgpack.packb(bucket.columns())


@functools.lru_cache(maxsize=DECODED_CACHE)
def decode_hour(topic: str, hour_ms: int, value: bytes) -> MinuteBucket:
    """The bucket of an hour row from its cell (cached: read-only for callers)."""
    return MinuteBucket.from_columns(topic, hour_ms, msgpack.unpackb(value))


@functools.lru_cache(maxsize=DECODED_CACHE)
def _decode_minute(topic: str, row: bytes, cells: tuple[tuple[bytes, bytes], ...]) -> MinuteBucket:
    return MinuteBucket.from_row(topic, row, dict(cells))


def _minute_rows(store: Store, topic: str, begin_ms: int, end_ms: int, *, cached: bool = False) -> list[MinuteBucket]:
    """The minute rollups of ``topic`` starting in ``[begin_ms, end_ms)`` (``cached``: decoded ones are
    kept by their cells, and read-only for the caller)."""
    if begin_ms >= end_ms:  # no scan: HBase answers a scan whose start is its stop with that row
        return []
    rows = store.scan(schema.ROLLUPS, schema.rollup_row(topic, begin_ms), schema.rollup_row(topic, end_ms))
    if cached:
        return [_decode_minute(topic, row, tuple(cols.items())) for row, cols in rows]
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
) -> dict[str, list[MinuteBucket]]:
    """Every topic's rollups (only ``topic``'s when given) covering the minutes ``[begin_ms, end_ms)``
    (minute starts), each topic's in time order: an hour bucket per whole hour (:func:`cover`), minute
    buckets elsewhere.  Topics with no rollup in the range are left out.

    The hour rows of every hour the range touches come in one scan (or one multi-get for one topic);
    a topic's minute rows are read only for spans in hours it has an hour row in (an hour row exists
    exactly when the hour has minute rows), so a quiet topic costs no minute scans."""
    hours, spans = cover(begin_ms, end_ms, cuts)
    first = hour_of(begin_ms)
    last = hour_of(end_ms - 1) + HOUR_MS if end_ms > begin_ms else first  # the hours the range touches: [first, last)
    whole = set(hours)
    out: dict[str, list[MinuteBucket]] = {}
    present: dict[int, set[str]] = {}  # hour -> the topics with an hour row in it
    for name, hour_ms, columns in _hour_rows(store, first, last, topic):
        present.setdefault(hour_ms, set()).add(name)
        if hour_ms in whole:
            out.setdefault(name, []).append(decode_hour(name, hour_ms, columns[schema.ROLLUP_COLUMN]))
    reads = [(name, a, b) for a, b in spans
             for name in sorted(set().union(*(present.get(h, ()) for h in range(hour_of(a), b, HOUR_MS))))]
    for name, minutes in _map(store, lambda read: _minute_rows(store, *read, cached=True), reads):
        if minutes:
            out.setdefault(name, []).extend(minutes)
    for buckets in out.values():
        buckets.sort(key=lambda b: b.minute_ms)
    return out


def _hour_rows(store: Store, first: int, last: int, topic: str | None) -> Iterator[tuple[str, int, Columns]]:
    """``(topic, hour, columns)`` of the hour rows of the hours in ``[first, last)``."""
    if topic is not None:
        hours = range(first, last, HOUR_MS)
        found = store.get_rows(schema.ROLLUPS, [schema.rollup_hour_row(topic, h) for h in hours])
        yield from ((topic, h, columns) for h, columns in zip(hours, found, strict=True) if columns)
        return
    if first >= last:
        return
    kind = len(keys.pack((schema.ROLLUP_HOUR,)))
    for row, columns in store.scan(schema.ROLLUPS, schema.rollup_hour_prefix(first), schema.rollup_hour_prefix(last)):
        hour_ms, name = _hour_key(row[kind:])
        yield name, hour_ms, columns


def _map(store: Store, read: Callable[[tuple[str, int, int]], list[MinuteBucket]],
         reads: list[tuple[str, int, int]]) -> Iterator[tuple[str, list[MinuteBucket]]]:
    """``read`` each ``(topic, a, b)``: several at once when the store's reads overlap (HBase)."""
    if not store.concurrent_reads or len(reads) < 2:
        yield from ((r[0], read(r)) for r in reads)
        return
    with ThreadPoolExecutor(max_workers=MINUTE_READERS, thread_name_prefix="tracehook-rollup-read") as pool:
        yield from zip((r[0] for r in reads), pool.map(read, reads))


def read_buckets(store: Store, topic: str, begin_ms: int, end_ms: int) -> list[MinuteBucket]:
    """The rollups of ``topic`` covering the minutes from the one holding ``begin_ms`` to the one
    holding ``end_ms``, in time order: an hour bucket for each whole hour inside, minute buckets for
    the ragged edges."""
    lo, hi = schema.minute_of(begin_ms), schema.minute_of(end_ms) + schema.MINUTE_MS
    return read_window(store, lo, hi, topic=topic).get(topic, [])


def all_hours(store: Store) -> set[Hour]:
    """Every (topic, hour) some minute rollup is in (what the format-3 upgrade builds)."""
    start, stop = keys.prefix_range((schema.ROLLUP_MINUTE,))
    return {(str(topic), hour_of(int(minute_ms)))
            for _, topic, minute_ms in (keys.unpack(row) for row, _ in store.scan(schema.ROLLUPS, start, stop))}
