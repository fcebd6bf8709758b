"""Layout 2, frozen: how ``tracehook migrate-store`` reads the events of a layout-2 store.

Layout 3 reads a layout-2 store in place (``tracehook upgrade-store``, :mod:`collector.store.upgrade`);
this module is for the other path, a copy into a new store.  Layout 2's ``messages`` table has
layout 1's row key, ``keys.pack((hash4(msg_id), msg_id))``, and one cell per event, valued
``msgpack([app, host, client_id, trimmed wire event])`` where the event's born and store times are
kept as their difference from its time and its lower-case hex ids (msg, broker msg, request, trace
and span id) as the bytes they spell (msgpack bin).  :func:`decode_event` undoes both.  Every such
value was written by a layout-2 indexer from an event the wire format had accepted, so, as the
rollups' read-back does (:func:`collector.store.codec.decode_events`), an event whose fields have
the wire format's types is not checked again field by field (measured: 30 µs per event with the
full check, most of a copy's cost); any other is, and a cell that fails is counted and left out.  The rows are read as layout 1's are
(:func:`collector.store.layout_v1.message_reader`: the same table, the same row order); every other
table is derived and rebuilt by re-indexing.

Like :mod:`collector.store.layout_v1`, this never imports :mod:`collector.store.schema`, which
describes the current layout and may change.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from typing import Any

import msgpack

from collector.store.layout_v1 import StoredEvent, message_reader, row_hash_fraction
from tracehook import wire
from tracehook.wire import BatchHeader, Event

__all__ = ["VERSION", "TABLES", "StoredEvent", "decode_event", "decode_events", "message_reader", "row_hash_fraction"]

VERSION = 2
TABLES = ("messages", "keyidx", "timeidx", "dead", "records", "queueidx", "seqidx", "pending", "traceidx", "rollups")
"""Layout 2's tables (besides ``meta``): a layout-3 upgrade in place adds the others."""
_BORN, _STORE = 11, 12
"""Positions of ``born_ms`` and ``store_ms`` in a wire event's array."""
_HEX_FIELDS = (4, 5, 19, 23, 24)
"""Positions of msg_id, broker_msg_id, request_id, trace_id and span_id: bytes when they were hex."""


def decode_event(value: bytes) -> StoredEvent:
    """A layout-2 message cell's value; ``wire.WireError`` (or msgpack's, or ``TypeError``) when it is not one."""
    app, host, client_id, raw = msgpack.unpackb(value, raw=False, use_list=True)
    header = _header(app, host, client_id)
    raw = _restored(raw)
    n = len(raw)
    if tuple(map(type, raw)) in _TYPINGS and raw[3] and raw[4]:
        if n < _COUNT:
            raw.extend(_DEFAULTS[n:])
        return StoredEvent(header, _new_event(wire.Event, raw))
    return StoredEvent(header, wire.validate_event(raw))  # a damaged cell, or a field of another type


def decode_events(values: Iterable[bytes]) -> tuple[list[tuple[BatchHeader, Event]], int]:
    """:func:`decode_event` of each of ``values`` in one loop (a migration's chunk, without a call and a
    :class:`StoredEvent` per event): the header and event of each value that decodes, and how many did not."""
    out: list[tuple[BatchHeader, Event]] = []
    bad = 0
    unpackb, header_of, typings, hex_fields = msgpack.unpackb, _header, _TYPINGS, _HEX_FIELDS
    born, store, count, defaults, new, event_type = _BORN, _STORE, _COUNT, _DEFAULTS, _new_event, wire.Event
    for value in values:
        try:
            app, host, client_id, raw = unpackb(value, raw=False, use_list=True)
            n = len(raw)
            if n > born:  # _restored, inlined
                raw[born] += raw[1]
                if n > store:
                    raw[store] += raw[1]
            for i in hex_fields:
                if i < n and type(raw[i]) is bytes:
                    raw[i] = raw[i].hex()
            if tuple(map(type, raw)) in typings and raw[3] and raw[4]:
                if n < count:
                    raw.extend(defaults[n:])
                event = new(event_type, raw)
            else:
                event = wire.validate_event(raw)  # a damaged cell, or a field of another type
            out.append((header_of(app, host, client_id), event))
        except Exception:  # noqa: BLE001 - any cell that does not decode is counted, as decode_event raises
            bad += 1
    return out, bad


@functools.lru_cache(maxsize=4096)
def _header(app: str, host: str, client_id: str) -> BatchHeader:
    """One header per sender (frozen: shared by its events)."""
    return BatchHeader(client_id, 0, app=app, host=host)


_MIN, _COUNT, _DEFAULTS, _new_event = wire.MIN_FIELDS, wire.FIELD_COUNT, wire.DEFAULTS, tuple.__new__
_TYPES = (int, int, str, str, str, str, str, str, str, int, int, int, int, int, int, str, int, int, dict, str, str,
          int, bytes, str, str)
"""The type each field of a layout-2 event decodes to."""
_NULLABLE = (18, 22)
"""props and body: None when absent."""
_TYPINGS = frozenset(
    tuple(type(None) if i in nulls else t for i, t in enumerate(_TYPES[:n]))
    for n in range(_MIN, min(_COUNT, len(_TYPES)) + 1)
    for nulls in ((), (18,), (22,), _NULLABLE))
"""Every field-type sequence of a trimmed layout-2 event (each length, props and body absent or not)."""


def _restored(raw: list[Any]) -> list[Any]:
    n = len(raw)
    if n > _BORN:
        raw[_BORN] += raw[1]
        if n > _STORE:
            raw[_STORE] += raw[1]
    for i in _HEX_FIELDS:
        if i < n and type(raw[i]) is bytes:  # a string field is bytes only when it was hex
            raw[i] = raw[i].hex()
    return raw
