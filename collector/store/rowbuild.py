"""Index rows built by the optional C extension ``collector.store._rowbuild``, when it is built.

:func:`collector.store.indexer.batched_rows` spends most of its time making small objects:
the row keys, cells and stored value of every event. ``collector/store/_rowbuild.c`` builds
the same rows in C, byte for byte, merged and batched the same way; events it does not
model go through the Python row builder, which stays the definition of the layout
(tests/collector/store/test_rowbuild.py checks both paths against each other). It is an
optional extension: without a compiler at install time, or with the environment variable
:data:`ENV_PYTHON_ROWS` set to ``1``, the Python path does everything (:data:`FAST_PATH` is False).
"""

from __future__ import annotations

import logging
import os
from collections import namedtuple
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from collector.store import keys, schema
from collector.store.base import Row
from collector.store.schema import Cells
from tracehook import wire
from tracehook.wire import BatchHeader, Event

ENV_PYTHON_ROWS = "TRACEHOOK_PYTHON_ROWS"
"""Set to ``1`` to build index rows in Python even when the C extension is built."""

EventRows = Callable[[BatchHeader, Event], list[tuple[str, bytes, Cells]]]
"""Builds one event's rows: the Python path, for the events the extension does not model."""


MODELLED_FIELDS = wire.Event._fields.index("body_flags")
"""The extension models the fields before ``body_flags`` (the 25 of the wire format it was written for)."""
_ModelledEvent = namedtuple("_ModelledEvent", wire.Event._fields[:MODELLED_FIELDS])  # type: ignore[misc]
"""What the extension is given: an event cut to :data:`MODELLED_FIELDS`, when it keeps no body (:func:`_narrow`)."""
_BODY = wire.Event._fields.index("body")
_NO_BODY_TAIL = wire.DEFAULTS[MODELLED_FIELDS:]


def _narrow(records: Iterable[tuple[BatchHeader, Event]]) -> Iterator[tuple[BatchHeader, Any]]:
    """``records`` as the extension takes them: an event that carries no body (nor body flags, raw key
    or raw headers) cut to the fields it models; one that does stays an :class:`Event`, which the
    extension hands to the Python path (bodies go to their own table, :mod:`collector.store.bodies`)."""
    new, cut, tail = tuple.__new__, MODELLED_FIELDS, _NO_BODY_TAIL
    for header, event in records:
        if event[_BODY] is None and event[cut:] == tail:
            yield header, new(_ModelledEvent, event[:cut])
        else:
            yield header, event


def _load() -> Any:
    if os.environ.get(ENV_PYTHON_ROWS, "") == "1":
        return None
    try:
        from collector.store import _rowbuild
    except ImportError:  # not built (no compiler when installed)
        return None
    try:
        _rowbuild.configure(
            event_type=_ModelledEvent, fields=_ModelledEvent._fields, defaults=wire.DEFAULTS[:MODELLED_FIELDS],
            tables=(schema.MESSAGES, schema.RECORDS, schema.KEYIDX, schema.TRACEIDX, schema.DEAD, schema.PENDING,
                    schema.QUEUEIDX, schema.SEQIDX, schema.TIMEIDX, schema.ROLLUPS),
            index_cells=schema.INDEX_CELLS, received_cells=schema.RECEIVED_CELLS,
            send_prefix=schema.column(schema.SEND_FAMILY, b""),
            consume_prefix=schema.column(schema.CONSUME_FAMILY, b""), received_column=schema.RECEIVED_COLUMN,
            dead_all=schema._DEAD_ALL_B, dead_one=schema._DEAD_ONE_B,
            dirty_msg=keys.pack_one(schema.ROLLUP_DIRTY_MSG))
    except (ValueError, TypeError):  # a wire format it does not model: stay exact
        logging.getLogger(__name__).warning("collector.store._rowbuild does not model this wire format; "
                                            "building index rows in Python", exc_info=True)
        return None
    return _rowbuild


_rowbuild = _load()
FAST_PATH = _rowbuild is not None
"""True when :func:`collector.store.indexer.batched_rows` builds rows with the C extension."""


def new_builder(event_rows: EventRows, *, batch_size: int, salt_buckets: int, mark: Cells | None) -> Any:
    """A ``_rowbuild.RowBuilder`` for one :func:`collector.store.indexer.batched_rows` run, or None
    when the extension is not in use or cannot take these arguments (the Python path then runs).
    After :func:`feed`, its ``too_long`` counts the rows left out for a key over
    :data:`collector.store.schema.MAX_ROW_KEY_BYTES` and the rest comes from :func:`drain`."""
    if not FAST_PATH or type(salt_buckets) is not int or not 1 <= salt_buckets <= keys.INT_MAX:
        return None
    if type(batch_size) is not int or not keys.INT_MIN <= batch_size <= keys.INT_MAX:
        return None
    def fallback(header: BatchHeader, event: Any) -> list[tuple[str, bytes, Cells]]:
        if type(event) is _ModelledEvent:  # one the extension was given but does not model after all
            event = tuple.__new__(Event, event + _NO_BODY_TAIL)
        return event_rows(header, event)

    return _rowbuild.RowBuilder(fallback, salt_buckets, mark, batch_size, schema.MAX_ROW_KEY_BYTES)


def feed(builder: Any, records: Iterable[tuple[BatchHeader, Event]]) -> Iterator[tuple[str, list[Row]]]:
    """Every batch that fills up while ``builder`` takes ``records`` (the rest waits for :func:`drain`)."""
    it = _narrow(records)
    while True:
        # The cyclic GC stays off while a batch's rows are built (many small containers, no cycles;
        # `records` is iterated meanwhile), as it does while wire.decode_batch unpacks; it is back
        # on while the caller has a batch.
        with wire.no_gc():
            full = builder.feed(it)
        if not full:
            return
        yield from full


def drain(builder: Any) -> list[tuple[str, list[Row]]]:
    """Every table's rows that ``builder`` has not handed out yet (after :func:`feed`)."""
    with wire.no_gc():
        return builder.drain()
