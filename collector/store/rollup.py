"""Per-minute rollups of every topic and consumer group, recomputed from the message rows.

A rollup bucket is a *function of the indexed state*, never an incremented counter, so
indexing the same log twice, a replayed Spark batch or a restart half-way through gives
identical rows.  The indexer marks what a batch touched (``rollups`` rows of kind DIRTY:
a send's minute; DIRTY_MSG: any other event's message, whose send minute may be an
earlier one); after the batch, on the driver, :func:`refresh_rollups` resolves the
marked messages to their placement minutes, recomputes each marked minute from the
messages placed in it (time index + message rows, :func:`collector.store.model.build_trace`)
and overwrites its row, then removes the markers.  A crash before that leaves the
markers, so the next batch recomputes them.

Example::

    from collector.store.rollup import refresh_rollups, read_minutes
    refresh_rollups(store)                                   # after index_records(...)
    for bucket in read_minutes(store, "orders", begin_ms, end_ms):
        print(bucket.minute_ms, bucket.sent, {g: b.consumed for g, b in bucket.groups.items()})

A message counts in the minute it is placed at (its send's store time, as the time
index files it); messages whose send was never traced and that carry no store time
are in no rollup.
"""

from __future__ import annotations

import bisect
import functools
import itertools
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

import msgpack

from collector.store import keys, schema
from collector.store.base import Columns, Row, Store
from collector.store.model import (
    CONSUMED,
    PENDING,
    RETRYING,
    MessageTrace,
    build_trace,
    placing_event,
    sort_events,
)
from tracehook.wire import EventType, Status

LATENCY_BOUNDS_MS: tuple[int, ...] = (
    5, 10, 25, 50, 100, 250, 500, 1_000, 2_500, 5_000, 10_000, 30_000, 60_000, 300_000, 1_800_000,
)
"""Upper bounds (inclusive, ms) of the end-to-end latency histogram; one more bucket holds the rest.
Fixed, so buckets of any minutes, topics or collectors add up."""
OPEN_OUTCOMES = frozenset((RETRYING, PENDING))
"""Outcomes that leave a message not yet consumed by the group (with never received): they make lag."""
_LATENCY_BUCKETS = len(LATENCY_BOUNDS_MS) + 1
DEFAULT_CHUNK = 1000
"""Message rows read per round trip while recomputing."""
_VERSION = 1


@dataclass(slots=True)
class GroupBucket:
    """One consumer group's outcomes for the messages placed in one minute.

    ``consumed`` / ``retrying`` / ``failed`` / ``dead`` / ``pending`` partition the messages the
    group received (:class:`collector.store.model.GroupOutcome`); ``retried`` counts those it
    needed more than one attempt for.  ``latency`` counts consumed messages by end-to-end
    latency (message time to the SUB_AFTER that consumed it) over :data:`LATENCY_BOUNDS_MS`.
    ``first_ms`` is the time of the first message the group received in the minute;
    ``oldest_open_ms`` that of the oldest message it has not consumed yet (received or not),
    and ``oldest_open_after_first_ms`` the oldest such one at or after ``first_ms``.
    """

    consumed: int = 0
    retrying: int = 0
    failed: int = 0
    dead: int = 0
    pending: int = 0
    retried: int = 0
    first_ms: int | None = None
    oldest_open_ms: int | None = None
    oldest_open_after_first_ms: int | None = None
    latency_sum_ms: int = 0
    latency: list[int] = field(default_factory=lambda: [0] * (len(LATENCY_BOUNDS_MS) + 1))

    @property
    def received(self) -> int:
        return self.consumed + self.retrying + self.failed + self.dead + self.pending

    def encode(self) -> bytes:
        return msgpack.packb([
            _VERSION, self.consumed, self.retrying, self.failed, self.dead, self.pending, self.retried,
            self.first_ms, self.oldest_open_ms, self.oldest_open_after_first_ms, self.latency_sum_ms, self.latency,
        ])

    @classmethod
    def decode(cls, value: bytes) -> GroupBucket:
        fields = msgpack.unpackb(value)
        latency = fields[11]
        if len(latency) < _LATENCY_BUCKETS:  # written with fewer bounds: the open-ended bucket moved up
            latency = latency + [0] * (_LATENCY_BUCKETS - len(latency))
        return cls(*fields[1:11], latency=latency)


@dataclass(slots=True)
class MinuteBucket:
    """One topic's rollup for one minute: messages placed in it and each group's outcomes."""

    topic: str
    minute_ms: int
    sent: int = 0
    first_ms: int | None = None
    """The time of the minute's oldest message."""
    groups: dict[str, GroupBucket] = field(default_factory=dict)

    def columns(self) -> Columns:
        cols = {schema.ROLLUP_COLUMN: msgpack.packb([_VERSION, self.sent, self.first_ms])}
        for group, bucket in self.groups.items():
            cols[schema.rollup_group_column(group)] = bucket.encode()
        return cols

    @classmethod
    def from_row(cls, topic: str, row: bytes, columns: Columns) -> MinuteBucket:
        out = cls(topic, schema.rollup_row_minute(row))
        for name, value in columns.items():
            if name == schema.ROLLUP_COLUMN:
                _, out.sent, out.first_ms = msgpack.unpackb(value)[:3]
            else:
                out.groups[_group_of(name)] = GroupBucket.decode(value)
        return out


@functools.lru_cache(maxsize=4096)
def _group_of(column: bytes) -> str:
    (group,) = keys.unpack(schema.split_column(column)[1])
    return str(group)


def compute_bucket(topic: str, minute_ms: int, traces: Iterable[MessageTrace]) -> MinuteBucket:
    """The rollup of the messages placed in one minute (pure: tested without a store)."""
    placed = sorted((t for t in traces if t.placed_ms is not None), key=lambda t: (t.placed_ms, t.msg_id))
    out = MinuteBucket(topic, minute_ms, sent=len(placed), first_ms=placed[0].placed_ms if placed else None)
    for group in sorted({g for t in placed for g in t.outcomes}):
        bucket = out.groups[group] = GroupBucket()
        for trace in placed:
            outcome = trace.outcomes.get(group)
            if outcome is not None and bucket.first_ms is None:
                bucket.first_ms = trace.placed_ms
            if outcome is None or outcome.outcome in OPEN_OUTCOMES:
                if bucket.oldest_open_ms is None:
                    bucket.oldest_open_ms = trace.placed_ms
                if bucket.first_ms is not None and bucket.oldest_open_after_first_ms is None:
                    bucket.oldest_open_after_first_ms = trace.placed_ms
            if outcome is None:
                continue
            name = outcome.outcome
            setattr(bucket, name, getattr(bucket, name) + 1)
            if outcome.attempts > 1 or name == RETRYING:
                bucket.retried += 1
            if name == CONSUMED:
                latency = _latency_ms(trace, group)
                if latency is not None:
                    bucket.latency[bisect.bisect_left(LATENCY_BOUNDS_MS, latency)] += 1
                    bucket.latency_sum_ms += latency
    return out


def _latency_ms(trace: MessageTrace, group: str) -> int | None:
    """From the message's time to the end of the group's first successful attempt."""
    for attempt in trace.consumes.get(group, []):
        if attempt["status"] == Status.OK and attempt["after"] is not None and trace.placed_ms is not None:
            return max(0, attempt["after"]["time_ms"] - trace.placed_ms)
    return None


# --- writing ---------------------------------------------------------------

def _traces(store: Store, msg_ids: list[str]) -> Iterator[MessageTrace]:
    rows = store.get_rows(schema.MESSAGES, [schema.message_row(m) for m in msg_ids])
    for msg_id, columns in zip(msg_ids, rows, strict=True):
        trace = build_trace(msg_id, [schema.decode_event_value(v) for v in columns.values()])
        if trace is not None:
            yield trace


def minute_traces(
    store: Store, topic: str, minute_ms: int, *, salt_buckets: int = schema.DEFAULT_SALT_BUCKETS,
    chunk: int = DEFAULT_CHUNK,
) -> list[MessageTrace]:
    """The messages of ``topic`` placed in the minute starting at ``minute_ms`` (a scan of each salt bucket)."""
    msg_ids: set[str] = set()
    for bucket in range(salt_buckets):
        prefix = keys.pack(schema.time_prefix(bucket, topic))
        start = prefix + keys.pack_one(minute_ms)
        stop = prefix + keys.pack_one(minute_ms + schema.MINUTE_MS)
        for row, _ in store.scan(schema.TIMEIDX, start, stop):
            msg_ids.add(str(keys.unpack(row)[-1]))
    ordered = sorted(msg_ids)
    out: list[MessageTrace] = []
    for i in range(0, len(ordered), chunk):
        out += (t for t in _traces(store, ordered[i:i + chunk])
                if t.topic == topic and t.placed_ms is not None and schema.minute_of(t.placed_ms) == minute_ms)
    return out


def compute_minute(
    store: Store, topic: str, minute_ms: int, *, salt_buckets: int = schema.DEFAULT_SALT_BUCKETS,
) -> MinuteBucket:
    """What the rollup of (``topic``, minute) is, given the indexed messages now."""
    return compute_bucket(topic, minute_ms, minute_traces(store, topic, minute_ms, salt_buckets=salt_buckets))


def _placements(store: Store, msg_ids: list[str]) -> Iterator[tuple[str, int]]:
    """(topic, placement time) of each placed message among ``msg_ids``.

    The send alone places a message, so its send-family events are decoded first; only a
    message without a traced send needs all of its events.
    """
    rows = store.get_rows(schema.MESSAGES, [schema.message_row(m) for m in msg_ids])
    for msg_id, columns in zip(msg_ids, rows, strict=True):
        sends = sort_events(schema.decode_event_value(v) for c, v in columns.items() if c.startswith(_SEND_PREFIX))
        placing = placing_event(sends)
        if placing is not None and placing.event.type == EventType.PUB:
            yield placing.event.topic, schema.message_time(placing.event)
            continue
        trace = build_trace(msg_id, [schema.decode_event_value(v) for v in columns.values()])
        if trace is not None and trace.placed_ms is not None:
            yield trace.topic, trace.placed_ms


_SEND_PREFIX = schema.column(schema.SEND_FAMILY, b"")


def refresh_rollups(
    store: Store, *, salt_buckets: int = schema.DEFAULT_SALT_BUCKETS, chunk: int = DEFAULT_CHUNK,
) -> int:
    """Recompute every minute the markers name, then drop the markers; returns the minutes recomputed.

    Idempotent, and safe to interrupt: markers go only after their minutes are written.
    """
    minutes: set[tuple[str, int]] = set()
    done: list[bytes] = []
    start, stop = keys.prefix_range((schema.ROLLUP_DIRTY,))
    for row, _ in store.scan(schema.ROLLUPS, start, stop):
        _, topic, minute_ms = keys.unpack(row)
        minutes.add((str(topic), int(minute_ms)))
        done.append(row)
    start, stop = keys.prefix_range((schema.ROLLUP_DIRTY_MSG,))
    marks = store.scan(schema.ROLLUPS, start, stop)
    while chunk_rows := list(itertools.islice(marks, chunk)):
        msg_ids = [str(keys.unpack(row)[-1]) for row, _ in chunk_rows]
        minutes.update((topic, schema.minute_of(placed_ms)) for topic, placed_ms in _placements(store, msg_ids))
        done += [row for row, _ in chunk_rows]
    puts: list[Row] = []
    empty: list[bytes] = []
    for topic in sorted({topic for topic, _ in minutes}):
        puts.append((schema.rollup_topic_row(topic), {schema.ROLLUP_COLUMN: b"1"}))
    for topic, minute_ms in sorted(minutes):
        bucket = compute_minute(store, topic, minute_ms, salt_buckets=salt_buckets)
        if bucket.sent:
            # Groups only ever join a minute (events are only added), so a put overwrites every column.
            puts.append((schema.rollup_row(topic, minute_ms), bucket.columns()))
        else:
            empty.append(schema.rollup_row(topic, minute_ms))
        if len(puts) >= chunk:
            store.put_rows(schema.ROLLUPS, puts)
            puts = []
    if puts:
        store.put_rows(schema.ROLLUPS, puts)
    for rows in (empty, done):
        for i in range(0, len(rows), chunk):
            store.delete_rows(schema.ROLLUPS, rows[i:i + chunk])
    return len(minutes)


# --- reading ---------------------------------------------------------------

def topics(store: Store) -> list[str]:
    """Every topic that has rollups, in order."""
    start, stop = keys.prefix_range((schema.ROLLUP_TOPIC,))
    return [str(keys.unpack(row)[1]) for row, _ in store.scan(schema.ROLLUPS, start, stop)]


def read_minutes(store: Store, topic: str, begin_ms: int, end_ms: int) -> list[MinuteBucket]:
    """The rollups of ``topic`` for the minutes from the one holding ``begin_ms`` to the one holding ``end_ms``."""
    start = schema.rollup_row(topic, schema.minute_of(begin_ms))
    stop = schema.rollup_row(topic, schema.minute_of(end_ms) + schema.MINUTE_MS)
    return [MinuteBucket.from_row(topic, row, cols) for row, cols in store.scan(schema.ROLLUPS, start, stop)]


def rows_of(buckets: Iterable[MinuteBucket]) -> list[Row]:
    """Rollup rows as the store holds them (tests compare against these)."""
    return [(schema.rollup_row(b.topic, b.minute_ms), b.columns()) for b in buckets]
