"""The index rows of one event: the Python definition of what an event writes.

:func:`rows_for` gives every ``(table, row key, columns)`` one event contributes (row keys and
cells from :mod:`collector.store.schema`); :func:`collector.index.indexer.batched_rows` merges
them into puts.  The optional C row builder (:mod:`collector.index.rowbuild`) makes the same
rows and calls :func:`event_rows` for the events it does not model, so an event's rows are
built here or below, never back up in the indexer.

Example::

    from collector.index.rows import rows_for
    for table, row, columns in rows_for(batch.header, event):
        ...
"""

from __future__ import annotations

import functools
from collections import Counter

from collector.store import bodies, codec, schema
from collector.store.base import Columns
from collector.store.model import could_place
from tracehook.context import trace_id_for
from tracehook.wire import BatchHeader, Event, EventType

KEY_SEPARATOR = schema.KEY_SEPARATOR
""":data:`collector.store.schema.KEY_SEPARATOR`."""
IndexRow = tuple[str, bytes, schema.Cells]

# Events that file the message under its keys (SUB_BEFORE and DEAD too: a message whose send was never
# traced is still found by the keys its consumers saw; SUB_AFTER repeats SUB_BEFORE).
_KEY_TYPES = frozenset((EventType.PUB, EventType.SUB_BEFORE, EventType.DEAD))
_CONSUME_TYPES = frozenset((EventType.SUB_BEFORE, EventType.SUB_AFTER))

MARK: Columns = {schema.ROLLUP_COLUMN: b"1"}
"""The rollup marker cell: the message's part of its minute's rollup is rebuilt after the batch."""

ROW_KEY_TOO_LONG = "row_key_too_long"
"""The ``dropped`` reason of a row left out because its key is over ``schema.MAX_ROW_KEY_BYTES``."""


def rows_for(
    header: BatchHeader, event: Event, *, salt_buckets: int = schema.DEFAULT_SALT_BUCKETS,
    dropped: Counter[str] | None = None, mark: bool = True,
) -> list[IndexRow]:
    """Every ``(table, row key, columns)`` one event contributes to the index.

    Rows left out are counted in ``dropped`` (by reason, :data:`ROW_KEY_TOO_LONG`) when given.
    ``mark=False`` leaves out the rollup marker: the caller reads the message's part back itself.
    Indexed properties' rows are not among them: they depend on the store's lists
    (:func:`collector.index.indexer.batched_rows`' ``props``, :mod:`collector.store.props`).
    """
    rows = event_rows(header, event, salt_buckets, mark)
    # HBase refuses a whole put with one over-long row key: leave such a row out of that
    # index rather than fail every later run on it (wire limits allow 16 KB topics and keys).
    kept = [r for r in rows if len(r[1]) <= schema.MAX_ROW_KEY_BYTES]
    if dropped is not None and len(kept) < len(rows):
        dropped[ROW_KEY_TOO_LONG] += len(rows) - len(kept)
    return kept


def event_rows(header: BatchHeader, event: Event, salt_buckets: int, mark: bool) -> list[IndexRow]:
    """:func:`rows_for`, long row keys included."""
    qualifier, value = codec.encode_event(header.app, header.host, header.client_id, event)
    msg_id, etype = event.msg_id, event.type
    event_col = (_CONSUME_PREFIX if etype in _CONSUME_TYPES else _SEND_PREFIX) + qualifier
    rows: list[IndexRow] = [(_MESSAGES, schema.message_row(msg_id), {event_col: value})]
    time_ms = schema.message_time(event)
    k = schema.event_key(event.topic, msg_id, time_ms)  # packed once, shared by every row below
    if etype in _CONSUME_TYPES:
        rows.append((_RECORDS, schema.records_row(k, event.group), schema.record_columns(event)))
    if etype in _KEY_TYPES:
        cells = _CELLS  # index rows only point at the message row: one empty cell
        # Split on spaces only (RocketMQ's KEY_SEPARATOR): str.split() would also cut a key at
        # tabs, \x1c..\x1f or U+00A0, and a message would never be found by its whole key.
        for key in {s for s in event.keys.split(KEY_SEPARATOR) if s}:
            rows.append((_KEYIDX, schema.key_row(k, key), cells))
        # trace_id_of(event), with the message's own trace id computed once per message.
        rows.append((_TRACEIDX, schema.trace_row(event.trace_id or _own_trace_id(msg_id), k), cells))
        placing = could_place(event)  # only the send, or an event that knew the store time, files it by time
        if etype == EventType.DEAD:
            rows.extend((_DEAD, row, cells) for row in schema.dead_rows_of(k, event.group))
            # Placed under the send's time later, by finish_batch (the send may be in another partition).
            rows.append((_PENDING, schema.message_row(msg_id), {event_col: value}))
        elif event.offset >= 0:
            if placing and event.queue >= 0:
                rows.append((_QUEUEIDX, schema.queue_row(k, event.queue, event.offset), cells))
            if event.broker:
                rows.append((_SEQIDX, schema.seq_row(k, event.broker, event.offset, event.queue), cells))
        if placing:
            rows.append((_TIMEIDX, schema.time_row(k, schema.salt(msg_id, salt_buckets)), cells))
    if mark:  # after this batch the message's part of its minute's rollup is rebuilt (collector.index.rollup)
        rows.append((schema.ROLLUPS, schema.rollup_dirty_msg_row(msg_id), MARK))
    if bodies.has_kept_body(event):  # apart from the trace (the message cell above left it out)
        rows.append((schema.BODIES, *bodies.body_row(event)))
    return rows


_MESSAGES, _RECORDS, _KEYIDX, _TRACEIDX, _DEAD, _PENDING, _QUEUEIDX, _SEQIDX, _TIMEIDX = (
    schema.MESSAGES, schema.RECORDS, schema.KEYIDX, schema.TRACEIDX, schema.DEAD, schema.PENDING,
    schema.QUEUEIDX, schema.SEQIDX, schema.TIMEIDX)
_SEND_PREFIX = schema.column(schema.SEND_FAMILY, b"")
_CONSUME_PREFIX = schema.column(schema.CONSUME_FAMILY, b"")
_CELLS = schema.INDEX_CELLS
_own_trace_id = functools.lru_cache(maxsize=4096)(trace_id_for)
