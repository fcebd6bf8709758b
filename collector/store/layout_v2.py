"""Layout 2, frozen: how ``tracehook migrate-store`` reads the events of a layout-2 store.

Layout 3 reads a layout-2 store in place (``tracehook upgrade-store``, :mod:`collector.store.upgrade`);
this module is for the other path, a copy into a new store.  Layout 2's ``messages`` table has
layout 1's row key, ``keys.pack((hash4(msg_id), msg_id))``, and one cell per event, valued
``msgpack([app, host, client_id, trimmed wire event])`` where the event's born and store times are
kept as their difference from its time and its lower-case hex ids (msg, broker msg, request, trace
and span id) as the bytes they spell (msgpack bin).  :func:`decode_event` undoes both, then
validates the event as the wire format does.  The rows are read as layout 1's are
(:func:`collector.store.layout_v1.message_reader`: the same table, the same row order); every other
table is derived and rebuilt by re-indexing.

Like :mod:`collector.store.layout_v1`, this never imports :mod:`collector.store.schema`, which
describes the current layout and may change.
"""

from __future__ import annotations

from typing import Any

import msgpack

from collector.store.layout_v1 import StoredEvent, message_reader, row_hash_fraction
from tracehook import wire
from tracehook.wire import BatchHeader

__all__ = ["VERSION", "TABLES", "StoredEvent", "decode_event", "message_reader", "row_hash_fraction"]

VERSION = 2
TABLES = ("messages", "keyidx", "timeidx", "dead", "records", "queueidx", "seqidx", "pending", "traceidx", "rollups")
"""Layout 2's tables (besides ``meta``): a layout-3 upgrade in place adds the others."""
_BORN, _STORE = 11, 12
"""Positions of ``born_ms`` and ``store_ms`` in a wire event's array."""
_HEX_FIELDS = (4, 5, 19, 23, 24)
"""Positions of msg_id, broker_msg_id, request_id, trace_id and span_id: bytes when they were hex."""


def decode_event(value: bytes) -> StoredEvent:
    """A layout-2 message cell's value; ``wire.WireError`` (or msgpack's) when it is not one."""
    app, host, client_id, raw = msgpack.unpackb(value, raw=False, use_list=True)
    return StoredEvent(BatchHeader(client_id, 0, app=app, host=host), wire.validate_event(_restored(raw)))


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
