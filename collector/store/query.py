"""Queries over the index, shared by both stores.

Example::

    q = TraceQuery(open_store("local:index.sqlite3"))
    trace = q.get_trace("msg-1")                             # one Get
    page = q.by_key("orders", "order-42", 0, now_ms, limit=20)   # newest first
    while page.next_cursor:
        page = q.by_key("orders", "order-42", 0, now_ms, limit=20, cursor=page.next_cursor)

Time ranges are inclusive at both ends and filter on the message time (store time,
else born time, else event time).  Cursors are opaque strings; a cursor only works
for the kind of query that returned it.
"""

from __future__ import annotations

import base64
import binascii
import heapq
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from collector.store import keys, schema
from collector.store.base import Row, Store
from collector.store.errors import BadCursorError, BadRangeError, KeyEncodingError
from collector.store.model import MessageSummary, MessageTrace, Page, build_trace
from tracehook.wire import EventType, Status

MAX_LIMIT = 1000
"""Largest page a query returns."""

_RECORD_ACTIONS = {EventType.SUB_BEFORE: 0, EventType.SUB_AFTER: 1, EventType.DEAD: 1}  # QMQ: 0 pull, 1 ack


def _check_range(begin_ms: int, end_ms: int, limit: int) -> None:
    if begin_ms < 0 or end_ms > keys.INT_MAX or begin_ms > end_ms:
        raise BadRangeError(f"bad time range [{begin_ms}, {end_ms}]")
    if not 1 <= limit <= MAX_LIMIT:
        raise BadRangeError(f"limit must be within 1..{MAX_LIMIT}, not {limit}")


def _encode_cursor(kind: str, suffix: bytes) -> str:
    return kind + "." + base64.urlsafe_b64encode(suffix).decode("ascii").rstrip("=")


def _decode_cursor(kind: str, cursor: str, shape: tuple[type, ...]) -> bytes:
    """The key suffix a cursor stands for; it must come from the same kind of query."""
    prefix, _, data = cursor.partition(".")
    try:
        if prefix != kind:
            raise ValueError(f"not a {kind} cursor")
        suffix = base64.urlsafe_b64decode(data + "=" * (-len(data) % 4))
        values = keys.unpack(suffix)
        if tuple(type(v) for v in values) != shape:
            raise ValueError("cursor does not fit this query")
    except (ValueError, binascii.Error, KeyEncodingError) as exc:
        raise BadCursorError(f"bad cursor: {exc}") from None
    return suffix


class TraceQuery:
    """The lookups people run: by id, by key, by topic + time, dead letters, consume records, offsets, positions."""

    def __init__(self, store: Store, *, salt_buckets: int = schema.DEFAULT_SALT_BUCKETS) -> None:
        self.store = store
        self.salt_buckets = salt_buckets

    # --- one message ---------------------------------------------------------

    def _stored_events(self, msg_id: str) -> list[schema.StoredEvent]:
        columns = self.store.get_row(schema.MESSAGES, schema.message_row(msg_id))
        return [schema.decode_event_value(v) for v in columns.values()]

    def get_trace(self, msg_id: str) -> MessageTrace | None:
        """The whole trace of one message (one Get), or ``None`` if nothing is indexed for it."""
        return build_trace(msg_id, self._stored_events(msg_id))

    def consume_records(self, msg_id: str) -> list[dict[str, Any]]:
        """QMQ-style consume records: one per SUB_BEFORE (action 0, pull), SUB_AFTER (1, ack) and DEAD.

        ``type`` is QMQ's record code: 0 normal, 1 retry (a redelivery), 2 dead letter.
        """
        records = []
        for stored in self._stored_events(msg_id):
            ev = stored.event
            if ev.type not in _RECORD_ACTIONS:
                continue
            code = 2 if ev.type == EventType.DEAD else (1 if ev.retry > 0 else 0)
            records.append({
                "consumer_group": ev.group, "action": _RECORD_ACTIONS[EventType(ev.type)], "type": code,
                "timestamp": ev.time_ms, "consumer_id": stored.client_id, "host": stored.host,
                "status": ev.status, "status_name": Status(ev.status).name, "retry": ev.retry,
                "queue": ev.queue, "offset": ev.offset, "request_id": ev.request_id, "error": ev.error,
            })
        records.sort(key=lambda r: (r["timestamp"], r["action"]))
        return records

    # --- pages of messages -----------------------------------------------------

    def by_key(
        self, topic: str, key: str, begin_ms: int, end_ms: int, limit: int, cursor: str | None = None
    ) -> Page:
        """Messages of ``topic`` carrying business key ``key``, newest first."""
        _check_range(begin_ms, end_ms, limit)
        prefix = keys.pack(schema.key_prefix(topic, key))
        start = prefix + keys.pack_one(keys.reverse_int(end_ms))
        stop = prefix + keys.pack_one(keys.reverse_int(begin_ms)) + keys.STOP
        if cursor is not None:
            start = max(start, keys.successor(prefix + _decode_cursor("k", cursor, (int, str))))
        rows = self.store.scan(schema.KEYIDX, start, stop, limit=limit + 1)
        return self._page("k", rows, len(prefix), limit)

    def by_time(
        self, topic: str, begin_ms: int, end_ms: int, limit: int, cursor: str | None = None,
        *, newest_first: bool = False,
    ) -> Page:
        """Messages of ``topic`` filed within the range, oldest first (or newest first)."""
        _check_range(begin_ms, end_ms, limit)
        kind = "tn" if newest_first else "t"
        after = _decode_cursor(kind, cursor, (int, str)) if cursor is not None else None
        ranges = []
        for bucket in range(self.salt_buckets):
            prefix = keys.pack(schema.time_prefix(bucket, topic))
            start = prefix + keys.pack_one(begin_ms)
            stop = prefix + keys.pack_one(end_ms) + keys.STOP
            if after is not None and newest_first:
                stop = min(stop, prefix + after)
            elif after is not None:
                start = max(start, keys.successor(prefix + after))
            ranges.append((len(prefix), start, stop))

        def scan_bucket(r: tuple[int, bytes, bytes]) -> list[tuple[bytes, Row]]:
            prefix_len, start, stop = r
            rows = self.store.scan(schema.TIMEIDX, start, stop, limit=limit + 1, reverse=newest_first)
            # Tag rows with their suffix: buckets differ only in the prefix, so suffixes merge globally.
            return [(row[prefix_len:], (row, cols)) for row, cols in rows]

        # The bucket scans are independent round trips: side by side where the store overlaps them.
        parallel = getattr(self.store, "concurrent_reads", False)
        scans = list(_scan_pool().map(scan_bucket, ranges) if parallel else map(scan_bucket, ranges))
        merged = heapq.merge(*scans, key=lambda item: item[0], reverse=newest_first)
        return self._page(kind, (pair for _, pair in merged), None, limit)

    def dead_letters(
        self, topic: str, group: str | None = None, begin_ms: int = 0, end_ms: int = keys.INT_MAX,
        limit: int = 100, cursor: str | None = None,
    ) -> Page:
        """Messages of ``topic`` that went to a dead-letter queue (of one consumer group or any), newest first."""
        _check_range(begin_ms, end_ms, limit)
        prefix = keys.pack(schema.dead_prefix(topic, group))
        shape: tuple[type, ...] = (int, str) if group is not None else (int, str, str)
        start = prefix + keys.pack_one(keys.reverse_int(end_ms))
        stop = prefix + keys.pack_one(keys.reverse_int(begin_ms)) + keys.STOP
        if cursor is not None:
            start = max(start, keys.successor(prefix + _decode_cursor("d", cursor, shape)))
        rows = self.store.scan(schema.DEAD, start, stop, limit=limit + 1)
        return self._page("d", rows, len(prefix), limit)

    def unconsumed(
        self, topic: str, group: str, begin_ms: int, end_ms: int, limit: int, cursor: str | None = None
    ) -> Page:
        """Messages filed in the range that ``group`` never consumed successfully (the replay list), oldest first.

        Walks the time index and the group's consume records side by side: both are
        ordered by (message time, msg_id).
        """
        _check_range(begin_ms, end_ms, limit)
        prefix = keys.pack(schema.records_prefix(topic, group))
        start = prefix + keys.pack_one(begin_ms)
        stop = prefix + keys.pack_one(end_ms) + keys.STOP
        if cursor is not None:
            start = max(start, keys.successor(prefix + _decode_cursor("t", cursor, (int, str))))
        consumed = ((row[len(prefix):], cols) for row, cols in self.store.scan(schema.RECORDS, start, stop))
        done = next(consumed, None)
        items: list[MessageSummary] = []
        page_cursor = cursor
        while len(items) < limit:
            page = self.by_time(topic, begin_ms, end_ms, MAX_LIMIT, page_cursor)
            for summary in page.items:
                suffix = keys.pack((summary.time_ms, summary.msg_id))
                while done is not None and done[0] < suffix:
                    done = next(consumed, None)
                if not (done is not None and done[0] == suffix and _consumed_ok(done[1])):
                    items.append(summary)
                    if len(items) == limit:
                        break
            if page.next_cursor is None or len(items) == limit:
                break
            page_cursor = page.next_cursor
        if len(items) < limit:
            return Page(items, None)
        return Page(items, _encode_cursor("t", keys.pack((items[-1].time_ms, items[-1].msg_id))))

    def _page(self, kind: str, rows: Iterator[Row], prefix_len: int | None, limit: int) -> Page:
        """The first ``limit`` summaries of ``rows`` (a scan of at most ``limit + 1`` rows)."""
        items: list[MessageSummary] = []
        seen: set[str] = set()
        last_suffix, consumed = b"", 0
        for row, columns in rows:
            if len(items) == limit:
                return Page(items, _encode_cursor(kind, last_suffix))
            consumed += 1
            summary = MessageSummary.from_dict(schema.decode_summary(columns))
            last_suffix = row[prefix_len:] if prefix_len is not None else keys.pack((summary.time_ms, summary.msg_id))
            if summary.msg_id not in seen:  # a message filed under two times (no store/born time) shows once
                seen.add(summary.msg_id)
                items.append(summary)
        # Duplicates may have used up the scan's limit: then there can be more after it.
        return Page(items, _encode_cursor(kind, last_suffix) if consumed > limit else None)

    # --- offsets ---------------------------------------------------------------

    def queues(self, topic: str) -> list[int]:
        """Queue ids (partitions) of ``topic`` with indexed offsets: one short scan per queue."""
        found: list[int] = []
        start, stop = keys.prefix_range((topic,))
        while True:
            row = _first(self.store, schema.QUEUEIDX, start, stop)
            if row is None:
                return found
            queue = keys.unpack(row)[1]
            assert isinstance(queue, int)
            found.append(queue)
            start = keys.prefix_range((topic, queue))[1]

    def offsets_at(self, topic: str, time_ms: int, queue: int | None = None) -> dict[int, int]:
        """Per queue, the first offset stored at or after ``time_ms`` (RocketMQ's lower-bound search).

        A time after every indexed message gives the end offset (last + 1); a time before
        them gives the first indexed offset.  Queues with nothing indexed are left out.
        """
        out: dict[int, int] = {}
        for q in ([queue] if queue is not None else self.queues(topic)):
            lo, hi = keys.prefix_range(schema.queue_prefix(topic, q))
            start = lo + keys.pack_one(max(time_ms, keys.INT_MIN))
            first = _first(self.store, schema.QUEUEIDX, start, hi)
            if first is not None:
                out[q] = _offset(first)
                continue
            last = _first(self.store, schema.QUEUEIDX, lo, hi, reverse=True)
            if last is not None:
                out[q] = _offset(last) + 1
        return out

    # --- QMQ positions -----------------------------------------------------------

    def by_sequence(
        self, topic: str, broker: str, offset: int, queue: int | None = None, limit: int = 16
    ) -> list[MessageSummary]:
        """Messages of ``topic`` at ``offset`` on ``broker`` (in ``queue``, or in any queue): one prefix scan.

        Without ``queue`` a Kafka-like broker gives one message per partition that reached
        ``offset``; the caller decides what an ambiguous answer means.
        """
        start, stop = keys.prefix_range(schema.seq_prefix(topic, broker, offset, queue))
        return [MessageSummary.from_dict(schema.decode_summary(cols))
                for _, cols in self.store.scan(schema.SEQIDX, start, stop, limit=limit)]


_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()


def _scan_pool() -> ThreadPoolExecutor:
    """Threads shared by every TraceQuery for the salt-bucket scans (created on first use)."""
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(max_workers=schema.DEFAULT_SALT_BUCKETS, thread_name_prefix="tracehook-scan")
        return _pool


def _first(store: Store, table: str, start: bytes, stop: bytes, *, reverse: bool = False) -> bytes | None:
    """The first row key of a range (a whole, closed scan of one row)."""
    rows = list(store.scan(table, start, stop, limit=1, reverse=reverse))
    return rows[0][0] if rows else None


def _offset(queue_row: bytes) -> int:
    value = keys.unpack(queue_row)[3]
    assert isinstance(value, int)
    return value


def _consumed_ok(columns: dict[bytes, bytes]) -> bool:
    for value in columns.values():
        ev = schema.decode_event_value(value).event
        if ev.type == EventType.SUB_AFTER and ev.status == Status.OK:
            return True
    return False
