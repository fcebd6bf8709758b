"""Kept message bodies: the ``bodies`` table, apart from the trace, on a TTL of its own, erasable.

The indexer writes each event's captured body (with its flags, the record's raw key and raw
headers) to the message's row of ``bodies`` (:func:`body_row`) and leaves all four out of the
event's cell in ``messages`` (:func:`collector.store.codec.encode_event`), so the trace
never carries a body and a body can be erased without touching the trace.  One row per message,
keyed like its message row, with a cell per kind of event that kept one, and a marker row once erased:

============================ ======= ====================================================================
row                          cell
============================ ======= ====================================================================
(hash4(msg_id), msg_id)      ``b:s`` the body a send-side event kept (PUB, END_TX, DEAD, REPLAY; the last indexed)
                             ``b:c`` the body a consume kept (SUB_BEFORE / SUB_AFTER), read when there is no ``b:s``
(hash4(msg_id), msg_id, 0)   ``b:x`` the body was erased (at this time): the body row is never served again
============================ ======= ====================================================================

The marker has a row of its own (not a cell of the body row) so that erasing is a row delete plus
a put, in either order of the store's clocks: HBase's row delete hides every cell of the row
written up to the delete's own (server) time, a marker written there just after included.

A body cell is msgpack ``[topic, message time, flags, body, body_len, raw_key, raw_headers]``
(``flags``: :data:`tracehook.wire.BODY_TRUNCATED`, :data:`tracehook.wire.BODY_ZLIB`).

Example::

    from collector.store.bodies import read_body, erase_messages
    kept = read_body(store, "msg-1")          # KeptBody, or None when none was kept
    erase_messages(store, ["msg-1"])          # a person's data: gone, the trace stays
"""

from __future__ import annotations

import time
import zlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import msgpack

from collector.store import keys, schema
from collector.store.base import Columns, Store
from tracehook import wire
from tracehook.wire import Event

SEND_COLUMN = schema.column(schema.BODY_FAMILY, b"s")
CONSUME_COLUMN = schema.column(schema.BODY_FAMILY, b"c")
ERASED_COLUMN = schema.column(schema.BODY_FAMILY, b"x")
MAX_PLAIN_BYTES = wire.MAX_BODY_LEN
"""Most bytes a compressed body is inflated to when read (a longer one is cut there and shown truncated)."""
ERASE_CHUNK = 1000
"""Rows per delete (and per tombstone put) of an erasure."""


def has_kept_body(event: Event) -> bool:
    """Whether ``event`` carries anything the bodies table keeps: a body, a raw key or raw headers."""
    return event.body is not None or event.raw_key is not None or event.raw_headers is not None


def body_row(event: Event) -> tuple[bytes, Columns]:
    """The bodies row and cell of an event that :func:`has_kept_body`."""
    column = CONSUME_COLUMN if schema.event_family(event) == schema.CONSUME_FAMILY else SEND_COLUMN
    value = msgpack.packb([event.topic, schema.message_time(event), event.body_flags, event.body, event.body_len,
                           event.raw_key, event.raw_headers], use_bin_type=True)
    return schema.message_row(event.msg_id), {column: value}


@dataclass(frozen=True)
class KeptBody:
    """One message's kept body as stored (``body`` compressed when ``flags`` say so)."""

    topic: str
    time_ms: int
    """The message time of the event that kept it (what ``erase --since/--until`` compare)."""
    flags: int
    body: bytes | None
    body_len: int
    raw_key: bytes | None
    raw_headers: list[list[Any]] | None

    @property
    def truncated(self) -> bool:
        return bool(self.flags & wire.BODY_TRUNCATED)

    def plain(self) -> tuple[bytes | None, bool]:
        """``(the body as the app sent it, truncated)``: inflated when compressed, at most
        :data:`MAX_PLAIN_BYTES`; ``(None, False)`` when a compressed body does not inflate."""
        if self.body is None or not self.flags & wire.BODY_ZLIB:
            return self.body, self.truncated
        inflater = zlib.decompressobj()
        try:
            out = inflater.decompress(self.body, MAX_PLAIN_BYTES)
        except zlib.error:
            return None, False
        return out, self.truncated or bool(inflater.unconsumed_tail)

    def to_json(self) -> dict[str, Any]:
        """The API's fields: ``body`` (hex), ``body_len``, ``body_truncated``, ``raw_key`` (hex) and
        ``raw_headers`` (``[[name, hex value], ...]``); ``body_corrupt`` when a compressed body does not inflate."""
        body, truncated = self.plain()
        doc: dict[str, Any] = {
            "body": None if body is None else body.hex(), "body_len": self.body_len, "body_truncated": truncated,
            "raw_key": None if self.raw_key is None else self.raw_key.hex(),
            "raw_headers": None if self.raw_headers is None else [[n, v.hex()] for n, v in self.raw_headers],
        }
        if body is None and self.body is not None:
            doc["body_corrupt"] = True
        return doc


def decode_body(value: bytes) -> KeptBody:
    topic, time_ms, flags, body, body_len, raw_key, raw_headers = msgpack.unpackb(value, raw=False)
    return KeptBody(topic, time_ms, flags, body, body_len, raw_key, raw_headers)


@dataclass(frozen=True)
class BodyLookup:
    """What the bodies table holds for one message: its kept body, or that it was erased (or neither)."""

    kept: KeptBody | None = None
    erased: bool = False


def erased_row(msg_id: str) -> bytes:
    """The row marking ``msg_id``'s body erased: its body row's key with one more element."""
    return schema.message_row(msg_id) + _ERASED_SUFFIX


_ERASED_SUFFIX = keys.pack_one(0)


def lookup(columns: Columns, marker: Columns) -> BodyLookup:
    """A body row's cells and its marker row's as a :class:`BodyLookup`: the send's body before a
    consume's, none once erased."""
    if ERASED_COLUMN in marker:
        return BodyLookup(erased=True)
    value = columns.get(SEND_COLUMN) or columns.get(CONSUME_COLUMN)
    return BodyLookup(kept=None if value is None else decode_body(value))


def read_body(store: Store, msg_id: str) -> BodyLookup:
    """The kept body of ``msg_id`` (one multi-row read: its body row and its marker row)."""
    columns, marker = store.get_rows(schema.BODIES, [schema.message_row(msg_id), erased_row(msg_id)])
    return lookup(columns, marker)


def erase_messages(store: Store, msg_ids: Iterable[str], *, now_ms: int | None = None) -> int:
    """Erase the kept bodies of ``msg_ids`` (deleted rows, then an erased marker row each, so the
    message page says so and a body indexed again later is not served); returns how many had one."""
    ids = list(dict.fromkeys(msg_ids))
    rows = [schema.message_row(m) for m in ids]
    return _erase(store, [(m, r) for m, r, found in zip(ids, rows, _present(store, rows), strict=True) if found],
                  now_ms)


def erase_topic(store: Store, topic: str, since_ms: int | None = None, until_ms: int | None = None,
                *, now_ms: int | None = None) -> int:
    """Erase every kept body of ``topic`` whose message time is in ``[since_ms, until_ms)`` (open ends
    when None); returns how many.  Reads the whole bodies table (it holds only the allowed topics'
    bodies of the last ``body_ttl_days``): a message is found by its body's own topic and time,
    whether its send was traced or not."""
    def wanted(kept: KeptBody) -> bool:
        return kept.topic == topic and (since_ms is None or kept.time_ms >= since_ms) and (
            until_ms is None or kept.time_ms < until_ms)

    return _erase(store, list(_matching_rows(store, wanted)), now_ms)


def _matching_rows(store: Store, wanted: Callable[[KeptBody], bool]) -> Iterable[tuple[str, bytes]]:
    start, stop = keys.prefix_range(())
    for row, columns in store.scan(schema.BODIES, start, stop):
        values = [v for c, v in columns.items() if c in _BODY_COLUMNS]  # marker rows have none
        if values:
            found = [decode_body(v) for v in values]
            if any(wanted(k) for k in found):  # an erased message a later index run gave a body again too
                yield _msg_id(row), row


_BODY_COLUMNS = frozenset((SEND_COLUMN, CONSUME_COLUMN))


def _msg_id(row: bytes) -> str:
    return keys.unpack(row)[1]  # type: ignore[return-value]


def _present(store: Store, rows: list[bytes]) -> list[bool]:
    found: list[bool] = []
    for i in range(0, len(rows), ERASE_CHUNK):
        found += [not _BODY_COLUMNS.isdisjoint(c) for c in store.get_rows(schema.BODIES, rows[i:i + ERASE_CHUNK])]
    return found


def _erase(store: Store, found: list[tuple[str, bytes]], now_ms: int | None) -> int:
    """Delete the body rows of ``found`` (msg id, body row), then mark each message erased."""
    marker = {ERASED_COLUMN: str(int(time.time() * 1000) if now_ms is None else now_ms).encode("ascii")}
    for i in range(0, len(found), ERASE_CHUNK):
        chunk = found[i:i + ERASE_CHUNK]
        store.delete_rows(schema.BODIES, [row for _, row in chunk])
        store.put_rows(schema.BODIES, [(erased_row(m), dict(marker)) for m, _ in chunk])
    return len(found)
