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
import itertools
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any, NamedTuple

from collector.store import codec, keys, schema
from collector.store.base import Store
from collector.store.bodies import BodyLookup, read_body
from collector.store.errors import BadCursorError, BadRangeError, KeyEncodingError
from collector.store.model import CONSUMED, MessageSummary, MessageTrace, Page, build_trace
from collector.store.props import check_name
from tracehook.wire import EventType, Status

MAX_LIMIT = 1000
"""Largest page a query returns."""

class MessageLookup(NamedTuple):
    """One message as its page shows it: the trace and what the bodies table holds for it."""

    trace: MessageTrace
    body: BodyLookup


class _Candidate(NamedTuple):
    """An index row as a page reads it: its key after the query's prefix, and what that key says."""

    suffix: bytes
    msg_id: str
    time_ms: int
    """The time the row is filed under (0 in the trace index, which has none)."""
    group: str = ""
    """The consumer group (dead letters)."""

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

    def __init__(self, store: Store, *, salt_buckets: int | None = None) -> None:
        self.store = store
        self._salt_buckets = salt_buckets

    @property
    def salt_buckets(self) -> int:
        """Time-index buckets scanned: the count recorded with the store's tables unless given."""
        if self._salt_buckets is not None:
            return self._salt_buckets
        return self.store.salt_buckets

    # --- one message ---------------------------------------------------------

    def _stored_events(self, msg_id: str) -> list[codec.StoredEvent]:
        columns = self.store.get_row(schema.MESSAGES, schema.message_row(msg_id))
        return [codec.decode_event_value(msg_id, v) for v in columns.values()]

    def get_trace(self, msg_id: str) -> MessageTrace | None:
        """The whole trace of one message (one Get), or ``None`` if nothing is indexed for it."""
        return build_trace(msg_id, self._stored_events(msg_id))

    def get_body(self, msg_id: str) -> BodyLookup:
        """The message's kept body (the bodies table: :mod:`collector.store.bodies`), or that it was erased."""
        return read_body(self.store, msg_id)

    def get_message(self, msg_id: str) -> MessageLookup | None:
        """:meth:`get_trace` and, for a known message, :meth:`get_body` in one call (one worker thread
        hop for the message page); ``None`` if nothing is indexed for ``msg_id``."""
        trace = self.get_trace(msg_id)
        return None if trace is None else MessageLookup(trace, self.get_body(msg_id))

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
    #
    # An index row only points at a message: the page is built from the message rows (one
    # multi-get per chunk), and a row is kept only when its time is the message's listing
    # time (MessageTrace.time_ms, or dead_time for dead letters).  Rows a consume event or
    # an older indexer filed elsewhere are skipped, so each message is listed once, at the
    # place its send gave it, with its outcome per consumer group.

    def by_key(
        self, topic: str, key: str, begin_ms: int, end_ms: int, limit: int, cursor: str | None = None,
        *, match: Callable[[MessageTrace], bool] | None = None, max_rows: int | None = None,
    ) -> Page:
        """Messages of ``topic`` carrying business key ``key``, newest first.

        ``match`` keeps only the messages it accepts (e.g. :mod:`collector.outcome_filter`);
        ``max_rows`` bounds the index rows one page reads (a short page then carries a cursor).
        """
        return self._newest_first(
            "k", schema.KEYIDX, schema.key_prefix(topic, key), begin_ms, end_ms, limit, cursor,
            _matching(lambda c, t: t.time_ms == c.time_ms, match), max_rows=max_rows, topic=topic)

    def by_prop(
        self, topic: str, name: str, value: str, begin_ms: int, end_ms: int, limit: int, cursor: str | None = None,
        *, match: Callable[[MessageTrace], bool] | None = None, max_rows: int | None = None,
    ) -> Page:
        """Messages of ``topic`` whose property ``name`` is ``value``, newest first (``match``, ``max_rows``
        as in :meth:`by_key`).

        A message counts when its own props (its send's, else those of the event it is known by) carry
        exactly ``value``; the index holds a value's first bytes only (:func:`schema.prop_value_prefix`),
        so a longer value is compared whole here.  Only names indexed on ``topic`` when the message was
        indexed (or backfilled since) are found (:mod:`collector.store.props`).
        """
        check_name(name)

        def keep(candidate: _Candidate, trace: MessageTrace) -> bool:
            return trace.time_ms == candidate.time_ms and trace.props.get(name) == value

        return self._newest_first("p", schema.PROPIDX, schema.prop_prefix(topic, name, value), begin_ms, end_ms,
                                  limit, cursor, _matching(keep, match), max_rows=max_rows, topic=topic)

    def _newest_first(
        self, kind: str, table: str, prefix_elements: tuple[keys.Element, ...], begin_ms: int, end_ms: int,
        limit: int, cursor: str | None, keep: Callable[[_Candidate, MessageTrace], bool], *,
        max_rows: int | None, topic: str,
    ) -> Page:
        """A page of an index keyed (prefix..., reversed time, msg_id): keyidx and propidx."""
        _check_range(begin_ms, end_ms, limit)
        prefix = keys.pack(prefix_elements)
        start = prefix + keys.pack_one(keys.reverse_int(end_ms))
        stop = prefix + keys.pack_one(keys.reverse_int(begin_ms)) + keys.STOP
        if cursor is not None:
            start = max(start, keys.successor(prefix + _decode_cursor(kind, cursor, (int, str))))

        def fetch(after: bytes | None, n: int) -> list[_Candidate]:
            lo = start if after is None else max(start, keys.successor(prefix + after))
            return [_reversed_time_candidate(row[len(prefix):]) for row, _ in self.store.scan(table, lo, stop, limit=n)]

        return self._message_page(kind, fetch, limit, keep, max_rows=max_rows, topic=topic)

    def by_time(
        self, topic: str, begin_ms: int, end_ms: int, limit: int, cursor: str | None = None,
        *, newest_first: bool = True, match: Callable[[MessageTrace], bool] | None = None,
        max_rows: int | None = None,
    ) -> Page:
        """Messages of ``topic`` placed within the range, newest first (or oldest first); ``match``, ``max_rows``
        as in :meth:`by_key`."""
        _check_range(begin_ms, end_ms, limit)
        kind = "tn" if newest_first else "t"
        after0 = _decode_cursor(kind, cursor, (int, str)) if cursor is not None else None

        def fetch(after: bytes | None, n: int) -> list[_Candidate]:
            after = after0 if after is None else after
            return self._time_rows(topic, begin_ms, end_ms, n, after, newest_first)

        return self._message_page(kind, fetch, limit, _matching(lambda c, t: t.placed_ms == c.time_ms, match),
                                  max_rows=max_rows, topic=topic)

    def _time_rows(
        self, topic: str, begin_ms: int, end_ms: int, n: int, after: bytes | None, newest_first: bool,
    ) -> list[_Candidate]:
        """The next ``n`` time-index rows after suffix ``after``, merged over the salt buckets."""
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

        def scan_bucket(r: tuple[int, bytes, bytes]) -> list[_Candidate]:
            prefix_len, start, stop = r
            rows = self.store.scan(schema.TIMEIDX, start, stop, limit=n, reverse=newest_first)
            # Buckets differ only in the prefix, so suffixes (time, msg_id) merge globally.
            return [_time_candidate(row[prefix_len:]) for row, _ in rows]

        # The bucket scans are independent round trips: side by side where the store overlaps them.
        scans = list(_scan_pool().map(scan_bucket, ranges) if self.store.concurrent_reads
                     else map(scan_bucket, ranges))
        merged = heapq.merge(*scans, key=lambda item: item[0], reverse=newest_first)
        return list(itertools.islice(merged, n))

    def dead_letters(
        self, topic: str, group: str | None = None, begin_ms: int = 0, end_ms: int = keys.INT_MAX,
        limit: int = 100, cursor: str | None = None,
    ) -> Page:
        """Dead letters of ``topic`` (of one consumer group, or one row per group that dead-lettered), newest first."""
        _check_range(begin_ms, end_ms, limit)
        prefix = keys.pack(schema.dead_prefix(topic, group))
        shape: tuple[type, ...] = (int, str) if group is not None else (int, str, str)
        start = prefix + keys.pack_one(keys.reverse_int(end_ms))
        stop = prefix + keys.pack_one(keys.reverse_int(begin_ms)) + keys.STOP
        if cursor is not None:
            start = max(start, keys.successor(prefix + _decode_cursor("d", cursor, shape)))

        def fetch(after: bytes | None, n: int) -> list[_Candidate]:
            lo = start if after is None else max(start, keys.successor(prefix + after))
            return [_reversed_time_candidate(row[len(prefix):], group)
                    for row, _ in self.store.scan(schema.DEAD, lo, stop, limit=n)]

        return self._message_page("d", fetch, limit, lambda c, t: t.dead_time(c.group) == c.time_ms,
                                  dead=True, topic=topic)

    def by_trace(self, trace_id: str, limit: int, cursor: str | None = None) -> Page:
        """Messages with an event in W3C trace ``trace_id`` (their send's, or a consumer's OTel trace), by id."""
        _check_range(0, 0, limit)
        prefix = keys.pack(schema.trace_prefix(trace_id))
        start, stop = prefix, prefix + keys.STOP
        if cursor is not None:
            start = keys.successor(prefix + _decode_cursor("x", cursor, (str,)))

        def fetch(after: bytes | None, n: int) -> list[_Candidate]:
            lo = start if after is None else max(start, keys.successor(prefix + after))
            return [_trace_candidate(row[len(prefix):])
                    for row, _ in self.store.scan(schema.TRACEIDX, lo, stop, limit=n)]

        # No topic check: every event filed here names this msg_id, and its message row is the answer.
        return self._message_page("x", fetch, limit, lambda c, t: True)

    def unconsumed(
        self, topic: str, group: str, begin_ms: int, end_ms: int, limit: int, cursor: str | None = None
    ) -> Page:
        """Messages placed in the range that ``group`` never consumed successfully (the replay list), oldest first.

        Messages whose every send failed are left out (the broker never stored them).  A page
        may be shorter than ``limit`` while ``next_cursor`` is set.
        """
        _check_range(begin_ms, end_ms, limit)
        after0 = _decode_cursor("t", cursor, (int, str)) if cursor is not None else None

        def fetch(after: bytes | None, n: int) -> list[_Candidate]:
            return self._time_rows(topic, begin_ms, end_ms, n, after0 if after is None else after, False)

        def keep(candidate: _Candidate, trace: MessageTrace) -> bool:
            outcome = trace.outcomes.get(group)
            return (trace.placed_ms == candidate.time_ms and not trace.never_stored
                    and (outcome is None or outcome.outcome != CONSUMED))

        return self._message_page("t", fetch, limit, keep, topic=topic)

    def _message_page(
        self, kind: str, fetch: Callable[[bytes | None, int], list[_Candidate]], limit: int,
        keep: Callable[[_Candidate, MessageTrace], bool], *, dead: bool = False, max_rows: int | None = None,
        topic: str | None = None,
    ) -> Page:
        """Up to ``limit`` messages from the index rows ``fetch`` yields, each checked against its message row.

        ``fetch(after, n)`` returns the next ``n`` index rows (:data:`_Candidate`) after suffix
        ``after`` (``None``: from the start); the cursor is the suffix of the last row used.
        With ``topic`` given, a message whose trace is of another topic is left out (a msg_id
        reused across topics: the index row is of ``topic``, the message row of both).
        After ``max_rows`` rows the page ends where it is, with a cursor (a filter that rarely matches).
        """
        items: list[MessageSummary] = []
        after: bytes | None = None
        rounds = read = 0
        while True:
            if max_rows is not None and read >= max_rows and after is not None:
                return Page(items, _encode_cursor(kind, after))
            # One row past the page tells whether there is more; rows that fail ``keep`` widen the next read.
            want = min(MAX_LIMIT + 1, (limit - len(items) + 1) << rounds)
            rounds += 1
            rows = fetch(after, want)
            read += len(rows)
            traces = self._traces({c.msg_id for c in rows})
            for candidate in rows:
                if len(items) == limit:
                    return Page(items, _encode_cursor(kind, after or b""))
                after = candidate.suffix
                trace = traces.get(candidate.msg_id)
                if trace is None or (topic is not None and trace.topic != topic) or not keep(candidate, trace):
                    continue
                items.append(trace.summary(dead_group=candidate.group if dead else None))
            if len(rows) < want:
                return Page(items, None)
            if len(items) == limit:
                # The scan read one row past the page: there may be more.
                return Page(items, _encode_cursor(kind, after or b""))

    def _traces(self, msg_ids: set[str]) -> dict[str, MessageTrace]:
        """The traces of ``msg_ids`` (one multi-get); unknown ids are left out."""
        ids = sorted(msg_ids)
        rows = self.store.get_rows(schema.MESSAGES, [schema.message_row(i) for i in ids])
        out = {}
        for msg_id, columns in zip(ids, rows, strict=True):
            trace = build_trace(msg_id, [codec.decode_event_value(msg_id, v) for v in columns.values()])
            if trace is not None:
                out[msg_id] = trace
        return out

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

        A time after every indexed message gives the end offset (:func:`next_offset` of the last);
        a time before them gives the first indexed offset.  Queues with nothing indexed are left out.
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
                out[q] = next_offset(_offset(last))
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
        ids = [_last_str(row) for row, _ in self.store.scan(schema.SEQIDX, start, stop, limit=limit)]
        traces = self._traces(set(ids))
        return [traces[i].summary() for i in dict.fromkeys(ids) if i in traces and traces[i].topic == topic]

    # -- per-group reads for backtracking (collector.query.backtrack) ----------------------------------

    def group_positions_newest_first(self, topic: str, group: str) -> Iterator[tuple[int, list[tuple[int, int]]]]:
        """The group's consume records on ``topic``, newest first: (message time, the (queue, offset)
        of each finished consume (SUB_AFTER) of that message that knew its position)."""
        start, stop = keys.prefix_range(schema.records_prefix(topic, group))
        for row, columns in self.store.scan(schema.RECORDS, start, stop, reverse=True):
            time_ms = keys.unpack(row)[2]
            assert isinstance(time_ms, int)
            yield time_ms, schema.record_positions(columns)

    def group_seen(self, topic: str, group: str) -> bool:
        """True when the index holds a consume record or dead letter of ``group`` on ``topic`` (two one-row scans)."""
        for table, prefix in ((schema.RECORDS, schema.records_prefix(topic, group)),
                              (schema.DEAD, schema.dead_prefix(topic, group))):
            start, stop = keys.prefix_range(prefix)
            if _first(self.store, table, start, stop) is not None:
                return True
        return False

    def groups(self, topic: str, limit: int = 20) -> list[str]:
        """Consumer groups with consume records on ``topic`` (up to ``limit``): one one-row scan per group."""
        found: list[str] = []
        start, stop = keys.prefix_range((topic,))
        while len(found) < limit:
            row = _first(self.store, schema.RECORDS, start, stop)
            if row is None:
                break
            group = keys.unpack(row)[1]
            assert isinstance(group, str)
            found.append(group)
            start = keys.prefix_range((topic, group))[1]
        return found

    def dead_letter_times(self, topic: str, begin_ms: int, end_ms: int) -> Iterator[tuple[int, str]]:
        """(message time, group) of every dead letter on ``topic`` in ``[begin_ms, end_ms]``, from row keys only."""
        prefix = keys.pack(schema.dead_prefix(topic, None))
        start = prefix + keys.pack_one(keys.reverse_int(end_ms))
        stop = prefix + keys.pack_one(keys.reverse_int(begin_ms)) + keys.STOP
        for row, _ in self.store.scan(schema.DEAD, start, stop):
            _topic, _kind, reversed_time, _msg_id, group = keys.unpack(row)
            assert isinstance(reversed_time, int) and isinstance(group, str)
            yield keys.reverse_int(reversed_time), group


def _matching(
    keep: Callable[[_Candidate, MessageTrace], bool], match: Callable[[MessageTrace], bool] | None,
) -> Callable[[_Candidate, MessageTrace], bool]:
    """``keep``, and ``match`` too when given."""
    if match is None:
        return keep
    return lambda candidate, trace: keep(candidate, trace) and match(trace)


def _time_candidate(suffix: bytes) -> _Candidate:
    """A (time, msg_id) suffix (timeidx)."""
    time_ms, msg_id = keys.unpack(suffix)
    return _Candidate(suffix, msg_id, time_ms)  # type: ignore[arg-type]


def _reversed_time_candidate(suffix: bytes, group: str | None = None) -> _Candidate:
    """A (reversed time, msg_id) suffix (keyidx; ``group``'s dead letters), or a (reversed time,
    msg_id, group) one (every group's dead letters, ``group`` None)."""
    values = keys.unpack(suffix)
    rev, msg_id = values[0], values[1]
    group = values[2] if len(values) > 2 else group or ""
    return _Candidate(suffix, msg_id, keys.reverse_int(rev), group)  # type: ignore[arg-type]


def _trace_candidate(suffix: bytes) -> _Candidate:
    """A (msg_id,) suffix (traceidx): no time."""
    (msg_id,) = keys.unpack(suffix)
    return _Candidate(suffix, msg_id, 0)  # type: ignore[arg-type]


def _last_str(row: bytes) -> str:
    value = keys.unpack(row)[-1]
    assert isinstance(value, str)
    return value


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


def next_offset(offset: int) -> int:
    """The offset after ``offset``: where a consumer that finished ``offset`` resumes (Kafka's committed
    offset).  Offsets are signed 64-bit, as the wire format and every broker's: the one after the
    largest does not exist, so it is the largest itself (a group there re-reads that one message)."""
    return min(offset + 1, keys.INT_MAX)


def _offset(queue_row: bytes) -> int:
    value = keys.unpack(queue_row)[3]
    assert isinstance(value, int)
    return value
