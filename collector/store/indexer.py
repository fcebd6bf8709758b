"""Turn decoded events into index rows and write them.

Idempotent by construction: every row key and column qualifier is computed from
the event alone (see :mod:`collector.store.schema`), so indexing the same events
again, or a duplicate of an event, rewrites identical cells.

Example::

    from collector.store import open_store
    from collector.store.indexer import index_records
    batch = wire.decode_batch(payload)
    index_records(open_store("local:index.sqlite3"), ((batch.header, e) for e in batch.events))
"""

from __future__ import annotations

from typing import Iterable

from collector.store import schema
from collector.store.base import Columns, Store
from tracehook.wire import Batch, BatchHeader, Event, EventType

DEFAULT_BATCH_SIZE = 1000
"""Rows buffered before they are written (one round trip per table)."""

IndexRow = tuple[str, bytes, Columns]

# Events that file the message under its keys, time and queue offset.  SUB_BEFORE too, so
# messages from producers without tracehook are still found; SUB_AFTER repeats SUB_BEFORE.
_SUMMARY_TYPES = frozenset((EventType.PUB, EventType.SUB_BEFORE, EventType.DEAD))
_QUEUE_TYPES = frozenset((EventType.PUB, EventType.SUB_BEFORE))
_CONSUME_TYPES = frozenset((EventType.SUB_BEFORE, EventType.SUB_AFTER))


def rows_for(header: BatchHeader, event: Event, *, salt_buckets: int = schema.DEFAULT_SALT_BUCKETS) -> list[IndexRow]:
    """Every ``(table, row key, columns)`` one event contributes to the index."""
    value = schema.encode_event_value(header.app, header.host, header.client_id, event)
    event_col = schema.column(schema.event_family(event), schema.event_qualifier(event, value))
    rows: list[IndexRow] = [(schema.MESSAGES, schema.message_row(event.msg_id), {event_col: value})]
    time_ms = schema.message_time(event)
    topic, msg_id = event.topic, event.msg_id
    if event.type in _CONSUME_TYPES:
        rows.append((schema.RECORDS, schema.records_row(topic, event.group, time_ms, msg_id), {event_col: value}))
    if event.type in _SUMMARY_TYPES:
        summary = {schema.summary_column(event): schema.encode_summary(event, time_ms)}
        bucket = schema.salt(msg_id, salt_buckets)
        rows.append((schema.TIMEIDX, schema.time_row(bucket, topic, time_ms, msg_id), summary))
        for key in set(event.keys.split()):
            rows.append((schema.KEYIDX, schema.key_row(topic, key, time_ms, msg_id), summary))
        if event.type == EventType.DEAD:
            rows.extend((schema.DEAD, row, summary) for row in schema.dead_rows(topic, event.group, time_ms, msg_id))
        if event.type in _QUEUE_TYPES and event.queue >= 0 and event.offset >= 0:
            rows.append((schema.QUEUEIDX, schema.queue_row(topic, event.queue, time_ms, event.offset), summary))
    return rows


class _Pending:
    """Rows waiting to be written, merged per (table, row) so one put carries all of a row's columns."""

    def __init__(self) -> None:
        self.tables: dict[str, dict[bytes, Columns]] = {}
        self.count = 0

    def add(self, table: str, row: bytes, columns: Columns) -> None:
        rows = self.tables.setdefault(table, {})
        existing = rows.get(row)
        if existing is None:
            rows[row] = dict(columns)
            self.count += 1
        else:
            existing.update(columns)

    def flush(self, store: Store) -> None:
        for table, rows in self.tables.items():
            store.put_rows(table, list(rows.items()))
        self.tables.clear()
        self.count = 0


def index_records(
    store: Store, records: Iterable[tuple[BatchHeader, Event]], batch_size: int = DEFAULT_BATCH_SIZE
) -> int:
    """Write every index row for ``records``; returns the number of events indexed.

    Rows are written ``batch_size`` at a time; when this returns, all of them are in the store.
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, not {batch_size}")
    pending = _Pending()
    events = 0
    for header, event in records:
        for table, row, columns in rows_for(header, event):
            pending.add(table, row, columns)
        events += 1
        if pending.count >= batch_size:
            pending.flush(store)
    pending.flush(store)
    return events


def index_batches(store: Store, batches: Iterable[Batch], batch_size: int = DEFAULT_BATCH_SIZE) -> int:
    """:func:`index_records` for decoded batches."""
    return index_records(store, ((b.header, e) for b in batches for e in b.events), batch_size)
