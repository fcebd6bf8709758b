"""The stored value of an event (a message cell): its encoding, its qualifier, and reading it back.

A layout 3 value is one flat msgpack array: the sender (app, host, client_id, from the batch
header) and the trimmed wire event without its msg_id, which the message row key holds::

    [app, host, client_id, type, time_ms, group, topic, broker_msg_id, ..., span_id]

Born and store times are kept as their difference from the event's time (a few bytes instead of
nine), lower-case hex ids (broker, request, trace and span ids) as the bytes they spell (msgpack
bin: half the size), trailing fields equal to their defaults are left off (:func:`tracehook.wire.trim`).
A layout 2 value is ``[app, host, client_id, [the same event with its msg_id]]``: a store upgraded
in place keeps those cells, so every reader here takes both (:func:`value_layout` tells them apart
by the first byte: a layout 3 array never has four items).

The qualifier of a cell is the BLAKE2b-64 of the event's layout 2 value (:func:`encode_event`):
identical events collapse into one cell, and an event indexed again after an in-place upgrade
overwrites its layout 2 cell instead of appearing twice.  ``collector/store/_rowbuild.c`` writes
the same bytes (tests/collector/store/test_rowbuild.py).

Example::

    from collector.store import codec
    qualifier, value = codec.encode_event("shop", "host-a", "client-1", event)
    stored = codec.decode_event_value(event.msg_id, value)     # StoredEvent, validated
    events = codec.decode_events(event.msg_id, [value])        # [Event], trusted (the rollups)
"""

from __future__ import annotations

import functools
import hashlib
import re
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

import msgspec

from collector.store.errors import StoredValueError
from tracehook import wire
from tracehook.wire import Event, EventType

LAYOUT_2, LAYOUT_3 = 2, 3
"""The value layouts :func:`value_layout` tells apart."""
_V2_HEAD = 0x94
"""The first byte of every layout 2 value (a 4-item array); never a layout 3 value's (7 items or more)."""


def value_layout(value: bytes) -> int:
    """:data:`LAYOUT_2` or :data:`LAYOUT_3`: which encoding a stored event value has (by its first byte)."""
    return LAYOUT_2 if value[:1] == b"\x94" else LAYOUT_3


# --- encoding ------------------------------------------------------------------

_BORN, _STORE = Event._fields.index("born_ms"), Event._fields.index("store_ms")
_MSG_ID = Event._fields.index("msg_id")
_HEX_FIELDS = tuple(Event._fields.index(f) for f in ("msg_id", "broker_msg_id", "request_id", "trace_id", "span_id"))
"""Id fields that are often lower-case hex (tracehook's own ids): kept as half as many bytes (msgpack bin)."""
_SENDER_ITEMS = 3
_packb = msgspec.msgpack.Encoder().encode
"""msgpack as msgpack.packb(use_bin_type=True) writes it (the same bytes; a few times faster)."""
_is_hex = re.compile("(?:[0-9a-f]{2})+").fullmatch


def hex_bytes(text: str) -> str | bytes:
    """``text`` as the bytes its lower-case hex digits spell (``bytes.hex()`` gives ``text`` back), else ``text``."""
    return bytes.fromhex(text) if _is_hex(text) else text


def _array_header(n: int) -> bytes:
    return bytes((0x90 | n,)) if n < 16 else b"\xdc" + n.to_bytes(2, "big")


_HEADERS = tuple(_array_header(n) for n in range(wire.FIELD_COUNT + _SENDER_ITEMS + 1))


@functools.lru_cache(maxsize=1024)
def _sender(app: str, host: str, client_id: str) -> bytes:
    """The sender's three strings, packed: the same for a whole batch."""
    return b"".join(_packb(v) for v in (app, host, client_id))


def _stored_raw(event: tuple[Any, ...]) -> list[Any]:
    """The trimmed event as stored: born and store times relative to time_ms, hex ids as bytes."""
    raw = wire.trim(event)
    n = len(raw)
    if n > _BORN:
        raw[_BORN] -= raw[1]
        if n > _STORE:
            raw[_STORE] -= raw[1]
    for i in _HEX_FIELDS:
        if i < n and raw[i]:
            raw[i] = hex_bytes(raw[i])
    return raw


def without_body(event: Event) -> tuple[Any, ...]:
    """``event``'s fields without what the bodies table keeps (body, body_flags, raw_key, raw_headers):
    the event itself when it carries none of them (:mod:`collector.store.bodies`)."""
    if event[_BODY] is None and event[_BODY_FLAGS:] == _NO_BODY_TAIL:
        return event
    return event[:_BODY] + (None,) + event[_BODY + 1:_BODY_FLAGS]


_BODY, _BODY_FLAGS = Event._fields.index("body"), Event._fields.index("body_flags")
CELL_FIELDS = _BODY_FLAGS
"""The event fields a cell can hold (those before body_flags): the C read-back and row builder model these."""
_NO_BODY_TAIL = wire.DEFAULTS[_BODY_FLAGS:]
"""The defaults of the fields from body_flags on (all of them kept in ``bodies``, never in a cell)."""


def encode_event(app: str, host: str, client_id: str, event: Event) -> tuple[bytes, bytes]:
    """A message cell of ``event`` sent by (app, host, client_id): ``(qualifier, layout 3 value)``.
    The captured body and the kept record are left out (:func:`without_body`)."""
    raw = _stored_raw(without_body(event))
    n = len(raw)
    sender = _sender(app, host, client_id)
    head = _packb(raw[:_MSG_ID])[1:]  # type, time, group, topic (a 4-item array's header is one byte)
    tail = _packb(raw[_MSG_ID + 1:])[1 if n - _MSG_ID - 1 < 16 else 3:]
    qualifier = hashlib.blake2b(
        b"".join((b"\x94", sender, _HEADERS[n], head, _packb(raw[_MSG_ID]), tail)), digest_size=8).digest()
    return qualifier, b"".join((_HEADERS[n - 1 + _SENDER_ITEMS], sender, head, tail))


def encode_event_value(app: str, host: str, client_id: str, event: Event) -> bytes:
    """The layout 3 value of ``event`` (:func:`encode_event` without the qualifier)."""
    return encode_event(app, host, client_id, event)[1]


def encode_event_value_v2(app: str, host: str, client_id: str, event: Event) -> bytes:
    """The layout 2 value of ``event``: what older indexers stored; its hash is the cell's qualifier."""
    return b"\x94" + _sender(app, host, client_id) + _packb(_stored_raw(without_body(event)))


def event_id(value_v2: bytes) -> bytes:
    """The qualifier of a cell whose event has this layout 2 value (BLAKE2b-64): identical events collapse."""
    return hashlib.blake2b(value_v2, digest_size=8).digest()


# --- decoding ------------------------------------------------------------------

class _Stored(msgspec.Struct, array_like=True, forbid_unknown_fields=True):
    """A layout 3 value as msgspec reads it (hex ids: str, or bytes when they were hex; born and
    store times: None when left off, else relative to time_ms)."""

    app: str
    host: str
    client_id: str
    type: int
    time_ms: int
    group: str
    topic: str
    broker_msg_id: Any = ""
    keys: str = ""
    tags: str = ""
    broker: str = ""
    queue: int = -1
    offset: int = -1
    born_ms: int | None = None
    store_ms: int | None = None
    cost_us: int = 0
    status: int = wire.Status.OK  # wire.DEFAULTS' objects: the trusted read gives what validate_event pads with
    error: str = ""
    retry: int = 0
    body_len: int = 0
    props: dict[str, str] | None = None
    request_id: Any = ""
    tx_id: str = ""
    tx_state: int = wire.TxState.UNKNOWN
    body: bytes | None = None
    trace_id: Any = ""
    span_id: Any = ""


_V3_FIELDS = _Stored.__struct_fields__[_SENDER_ITEMS:]
assert _V3_FIELDS == Event._fields[:_MSG_ID] + Event._fields[_MSG_ID + 1:_BODY_FLAGS], "codec._Stored must follow wire.Event"
_BODY_TABLE_TAIL = wire.DEFAULTS[_BODY_FLAGS:]
"""What a trusted read pads an event with: the fields a cell never holds (the bodies table's)."""
_decode_v3 = msgspec.msgpack.Decoder(_Stored).decode
_decode_v3_all = msgspec.msgpack.Decoder(list[_Stored]).decode


def _event_v3(msg_id: str, s: _Stored) -> tuple[Any, ...]:
    """The fields of a decoded layout 3 value in :class:`Event` order, times and hex ids restored, padded
    with the defaults of the bodies table's fields (a cell never holds them)."""
    t, born, store = s.time_ms, s.born_ms, s.store_ms
    broker_msg_id, request_id, trace_id, span_id = s.broker_msg_id, s.request_id, s.trace_id, s.span_id
    return (  # a string field is bytes only when it was hex
        s.type, t, s.group, s.topic, msg_id, broker_msg_id if type(broker_msg_id) is not bytes else broker_msg_id.hex(),
        s.keys, s.tags, s.broker, s.queue, s.offset, 0 if born is None else born + t, 0 if store is None else store + t,
        s.cost_us, s.status, s.error, s.retry, s.body_len, s.props,
        request_id if type(request_id) is not bytes else request_id.hex(), s.tx_id, s.tx_state, s.body,
        trace_id if type(trace_id) is not bytes else trace_id.hex(), span_id if type(span_id) is not bytes else span_id.hex(),
        *_BODY_TABLE_TAIL)


def _raw_event(msg_id: str, value: bytes) -> tuple[Any, Any, Any, list[Any]]:
    """A value of either layout as stored (untyped, trailing defaults left off): its sender and its
    event's fields with the row's msg_id in place and the times and hex ids restored."""
    items = _decode_any(value)
    if type(items) is not list or len(items) < _SENDER_ITEMS + 1:
        raise StoredValueError(f"message {msg_id!r}: a stored event is not an array of its sender and fields")
    if value[0] == _V2_HEAD:
        raw = items[_SENDER_ITEMS]
        if type(raw) is not list or len(raw) <= _MSG_ID:
            raise StoredValueError(f"message {msg_id!r}: a layout 2 event is not an array of 5 fields or more")
        raw[_MSG_ID] = msg_id  # the row's: the same id
    else:
        raw = items[_SENDER_ITEMS:]
        raw.insert(_MSG_ID, msg_id)
    n = len(raw)
    if n > _BORN:
        raw[_BORN] += raw[1]
        if n > _STORE:
            raw[_STORE] += raw[1]
    for i in _HEX_FIELDS:
        if i < n and type(raw[i]) is bytes:  # a string field is bytes only when it was hex
            raw[i] = raw[i].hex()
    return items[0], items[1], items[2], raw


_decode_any = msgspec.msgpack.Decoder().decode


@dataclass(frozen=True)
class StoredEvent:
    """An event read back from the store, with the sender fields from its batch header."""

    app: str
    host: str
    client_id: str
    event: Event

    def to_dict(self) -> dict[str, Any]:
        d = self.event._asdict()
        d["trace_id"] = wire.trace_id_of(self.event)  # "" on the wire means the message's own trace
        d["type_name"] = _TYPE_NAMES[self.event.type]
        d["status_name"] = _STATUS_NAMES[self.event.status]
        if d["body"] is not None:  # a cell written before bodies had a table of their own
            d["body"] = d["body"].hex()
        for name in _BODY_TABLE_FIELDS:  # never in a cell (encode_event): the message's body says
            del d[name]
        d["app"], d["host"], d["client_id"] = self.app, self.host, self.client_id
        return d


_TYPE_NAMES = {int(t): t.name for t in EventType}
_BODY_TABLE_FIELDS = ("body_flags", "raw_key", "raw_headers")
_STATUS_NAMES = {int(s): s.name for s in wire.Status}


def decode_event_value(msg_id: str, value: bytes) -> StoredEvent:
    """The stored event of message ``msg_id`` (the row's) with its sender, validated as the wire
    format requires (the query path); either layout.  Raises :class:`StoredValueError`."""
    try:
        app, host, client_id, raw = _raw_event(msg_id, value)
        if not (type(app) is type(host) is type(client_id) is str):
            raise StoredValueError(f"message {msg_id!r}: a stored event's sender is not three strings")
        return StoredEvent(app, host, client_id, wire.validate_event(raw))
    except StoredValueError:
        raise
    except (ValueError, TypeError, IndexError, msgspec.DecodeError, wire.WireError) as exc:
        raise StoredValueError(f"message {msg_id!r}: a stored event does not decode: {exc}") from None


def decode_events(msg_id: str, values: Collection[bytes]) -> list[Event]:
    """The events of message ``msg_id`` from values this index wrote, not validated again:
    ``decode_event_value(msg_id, v).event`` of each, in order (the rollups' read-back).

    Layout 3 values are read as one array, in one call; a row holding a layout 2 value is read
    value by value.
    """
    new = tuple.__new__
    try:
        stored = _decode_v3_all(_ARRAY32 + len(values).to_bytes(4, "big") + b"".join(values))
    except msgspec.ValidationError:  # a layout 2 value among them
        return [new(Event, _padded(_raw_event(msg_id, v)[3]) if v[0] == _V2_HEAD else _event_v3(msg_id, _decode_v3(v)))
                for v in values]
    return [new(Event, _event_v3(msg_id, s)) for s in stored]


def _padded(raw: list[Any]) -> list[Any]:
    raw.extend(wire.DEFAULTS[len(raw):])  # as validate_event pads
    return raw


_ARRAY32 = b"\xdd"
"""msgpack's header of an array with a 4-byte length."""
