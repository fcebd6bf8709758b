"""Index rows built by the optional C extension ``collector.store._rowbuild``, when it is built.

:func:`collector.index.indexer.batched_rows` spends most of its time making small objects:
the row keys, cells and stored value of every event. ``collector/store/_rowbuild.c`` builds
the same rows in C, byte for byte, merged and batched the same way; events it does not
model go through the Python row builder (:func:`collector.index.rows.event_rows`, below this module:
an event's rows never go back up to the indexer), which stays the definition of the layout
(tests/collector/store/test_rowbuild.py checks both paths against each other). It is an
optional extension: without a compiler at install time, or with ``TRACEHOOK_NO_EXTENSIONS=1`` or
``TRACEHOOK_PYTHON_ROWS=1`` in the environment (:mod:`collector.extensions`), the Python path does
everything (:data:`FAST_PATH` is False).
"""

from __future__ import annotations

import logging
from collections import namedtuple
from collections.abc import Iterable, Iterator
from typing import Any

from collector import extensions
from collector.index import rows
from collector.store import codec, keys, schema
from collector.store.base import Row
from collector.store.schema import Cells
from tracehook import wire
from tracehook.context import trace_id_for
from tracehook.wire import BatchHeader, Event, EventType

ENV_PYTHON_ROWS = extensions.ENV_PYTHON_ROWS
"""Set to ``1`` to build index rows in Python even when the C extension is built."""

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


_TABLE_SLOTS = ("MESSAGES", "RECORDS", "KEYIDX", "TRACEIDX", "DEAD", "PENDING", "QUEUEIDX", "SEQIDX", "TIMEIDX",
                "ROLLUPS")


def python_layout() -> dict[str, Any]:
    """What ``_rowbuild.layout()`` must report: each constant compiled into collector/store/_rowbuild.c,
    computed here from its one definition (:mod:`collector.store.schema`, :mod:`collector.store.keys`,
    :mod:`tracehook.wire`). At import a difference turns the extension off (the Python path runs)
    and tests/collector/store/test_rowbuild_layout.py fails, naming the constant."""
    fields = _ModelledEvent._fields  # the extension models the fields before body_flags
    rules = wire.fast_path_rules()
    kinds = tuple(column[0] for column in rules["columns"][:MODELLED_FIELDS])
    sample = Event(EventType.SUB_AFTER, 1, "g", "t", "m", queue=1, offset=2)
    return {
        "fields": fields,
        "kinds": kinds,
        "int_defaults": tuple(d if i >= wire.MIN_FIELDS and kinds[i] == "int" else None
                              for i, d in enumerate(wire.DEFAULTS[:MODELLED_FIELDS])),
        "positions": {name: fields.index(name) for name in (
            "type", "time_ms", "group", "topic", "msg_id", "broker_msg_id", "keys", "broker", "queue", "offset",
            "born_ms", "store_ms", "props", "request_id", "body", "trace_id", "span_id")},
        "min_fields": wire.MIN_FIELDS,
        "hex_fields": codec._HEX_FIELDS,
        "event_types": {t.name: int(t) for t in (EventType.PUB, EventType.SUB_BEFORE, EventType.SUB_AFTER,
                                                 EventType.DEAD)},
        "key_tags": {"bytes": keys.pack_one(b"")[0], "str": keys.pack_one("")[0], "int": keys.pack_one(0)[0]},
        "key_end": keys.pack_one("")[-1],
        "key_escape": keys.pack_one("\0")[2],
        "key_int_bias": int.from_bytes(keys.pack_one(0)[1:], "big"),
        "reversed_from": keys.reverse_int(0),
        "msg_hash_bytes": len(schema.msg_hash("")),
        "event_id_bytes": len(codec.event_id(b"")),
        "own_trace_bytes": len(bytes.fromhex(trace_id_for(""))),
        "value_header": codec._V2_HEAD,
        "position_header": next(iter(schema.record_columns(sample)))[len(schema.RECEIVED_COLUMN)],
        "key_separator": schema.KEY_SEPARATOR,
        "table_slots": _TABLE_SLOTS,
    }


def _load() -> Any:
    _rowbuild = extensions.load("collector.store._rowbuild")
    if _rowbuild is None:  # not built, or switched off
        return None
    try:
        compiled, defined = _rowbuild.layout(), python_layout()
        if compiled != defined:
            differ = sorted(k for k in compiled.keys() | defined.keys() if compiled.get(k) != defined.get(k))
            raise ValueError(f"its compiled constants differ from the Python definitions: {', '.join(differ)}")
        _rowbuild.configure(
            event_type=_ModelledEvent, fields=_ModelledEvent._fields, defaults=wire.DEFAULTS[:MODELLED_FIELDS],
            tables=tuple(getattr(schema, slot) for slot in compiled["table_slots"]),
            index_cells=schema.INDEX_CELLS, received_cells=schema.RECEIVED_CELLS,
            send_prefix=schema.column(schema.SEND_FAMILY, b""),
            consume_prefix=schema.column(schema.CONSUME_FAMILY, b""), received_column=schema.RECEIVED_COLUMN,
            dead_all=schema._DEAD_ALL_B, dead_one=schema._DEAD_ONE_B,
            dirty_msg=keys.pack_one(schema.ROLLUP_DIRTY_MSG))
    except (ValueError, TypeError, AttributeError):  # a layout it does not model (or an older build): stay exact
        logging.getLogger(__name__).warning("collector.store._rowbuild does not model this layout; "
                                            "building index rows in Python", exc_info=True)
        return None
    return _rowbuild


_rowbuild = _load()
FAST_PATH = _rowbuild is not None
"""True when :func:`collector.index.indexer.batched_rows` builds rows with the C extension."""


def new_builder(*, batch_size: int, salt_buckets: int, mark: bool) -> Any:
    """A ``_rowbuild.RowBuilder`` for one :func:`collector.index.indexer.batched_rows` run, or None
    when the extension is not in use or cannot take these arguments (the Python path then runs).
    After :func:`feed`, its ``too_long`` counts the rows left out for a key over
    :data:`collector.store.schema.MAX_ROW_KEY_BYTES` and the rest comes from :func:`drain`.
    Events it does not model get their rows from :func:`collector.index.rows.event_rows`."""
    if not FAST_PATH or type(salt_buckets) is not int or not 1 <= salt_buckets <= keys.INT_MAX:
        return None
    if type(batch_size) is not int or not keys.INT_MIN <= batch_size <= keys.INT_MAX:
        return None
    def fallback(header: BatchHeader, event: Any) -> list[tuple[str, bytes, Cells]]:
        if type(event) is _ModelledEvent:  # one the extension was given but does not model after all
            event = tuple.__new__(Event, event + _NO_BODY_TAIL)
        return rows.event_rows(header, event, salt_buckets, mark)  # looked up per call: tests count its calls

    return _rowbuild.RowBuilder(fallback, salt_buckets, rows.MARK if mark else None, batch_size,
                                schema.MAX_ROW_KEY_BYTES)


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
