"""The rollup read-back's per-message work: each stored event cut down to what a part reads.

:func:`collector.index.rollup.read_parts` reads every message a batch touched back after the
batch's writes and computes its part of its minute's rollup from its stored events
(:mod:`collector.index.rollup_parts`).  A part reads nine of an event's 25 fields, so the
read-back decodes only those (:class:`PartEvent`), computes the part of a message of sends,
consume attempts paired by request id and dead letters without them (:func:`parts`: most messages), and builds the
message row keys in key order (:func:`sorted_message_rows`), in C when the optional extension
``collector/store/_readback.c`` is built (:data:`FAST_PATH`); a value the extension does not
model, and every value without it, is decoded with msgspec (:func:`py_part_events`, as
:func:`collector.store.codec.decode_events` reads it), which stays the definition
(tests/collector/store/test_readback.py and test_partof.py check both paths against each other).
Both read layout 3 values and the layout 2 ones a store upgraded in place keeps.

Example::

    from collector.index.readback import part_events
    events = part_events(message_row_cells.values())   # [PartEvent(time_ms, type, ...), ...]
"""

from __future__ import annotations

import operator
from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import Any, NamedTuple

import msgspec

from collector import extensions
from collector.index.rollup_buckets import _VERSION
from collector.store import codec, schema
from tracehook.wire import Event

_NONE = msgspec.Raw()


class PartEvent(NamedTuple):
    """The fields of a stored event a rollup part reads, named as :class:`tracehook.wire.Event`'s
    (so :func:`collector.store.model.could_place`, :func:`collector.store.schema.message_time` and
    :func:`collector.store.model.pair_attempts` read it as they read an event); the first three
    are the order a message's events are read in (:data:`ORDER`)."""

    time_ms: int
    type: int
    request_id: str
    group: str
    topic: str
    store_ms: int
    born_ms: int
    status: int
    retry: int


ORDER = operator.itemgetter(0, 1, 2)
""":data:`collector.store.model.event_order` for a :class:`PartEvent`: (time ms, type, request id)."""


def _load() -> Any:
    return extensions.load("collector.store._readback")  # None: not built, or switched off


_readback = _load()
FAST_PATH = _readback is not None
"""True when the C extension builds the read-back's row keys (:func:`sorted_message_rows`) and decodes its events
(:func:`parts`, :func:`part_events`)."""


def message_rows(msg_ids: Sequence[str]) -> list[bytes]:
    """:func:`collector.store.schema.message_rows`, in C when the extension is built."""
    if _readback is not None:
        found: list[bytes] | None = _readback.message_rows(msg_ids)
        if found is not None:
            return found
    return schema.message_rows(msg_ids)


PartValues = dict[tuple[str, int], bytes]
"""A message's part values: ``{(topic, minute): part or MOVED}``, what ``rollup._part_values`` gives."""


def sorted_message_rows(msg_ids: Iterable[str]) -> tuple[list[bytes], list[str]]:
    """The :func:`message_rows` of ``msg_ids`` in key order, and the ids in that order: the read-back
    looks its rows up in key order (hash-keyed rows: each multi-get then reads a narrow key range)."""
    if _readback is not None:
        found: tuple[list[bytes], list[str]] | None = _readback.sorted_message_rows(msg_ids)
        if found is not None:
            return found
    ids = list(msg_ids)
    rows = schema.message_rows(ids)
    order = sorted(range(len(ids)), key=rows.__getitem__)
    return [rows[i] for i in order], [ids[i] for i in order]


def parts(rows: Sequence[Mapping[bytes, bytes]]) -> list[PartValues | list[PartEvent]]:
    """For each message row's cells: the :data:`PartValues` of a message whose stored events are sends,
    consume attempts with request ids and dead letters (a message only sent, or consumed, retried,
    failed or dead-lettered by a group or two: collector/store/_partof.h), else the :class:`PartEvent`
    of each cell, for ``rollup._part_values`` (replays, transactions, id-less consumes)."""
    if _readback is None:
        return [py_part_events(columns.values()) for columns in rows]
    found = _readback.parts(rows, PartEvent, _VERSION, schema.MINUTE_MS)
    return [got if got is not None else py_part_events(columns.values()) for got, columns in zip(found, rows)]


def part_events(values: Collection[bytes]) -> list[PartEvent]:
    """The :class:`PartEvent` of each stored value (in the order of ``values``), as
    ``codec.decode_events(msg_id, values)`` reads them: only for values an indexer wrote (not validated)."""
    if _readback is not None:
        found: list[PartEvent] | None = _readback.part_events(values, PartEvent)
        if found is not None:
            return found
    return py_part_events(values)


def py_part_events(values: Collection[bytes]) -> list[PartEvent]:
    """:func:`part_events` without the C extension (msgspec): the definition the C is tested against."""
    try:
        stored = _decode_parts(_ARRAY32 + len(values).to_bytes(4, "big") + b"".join(values))
    except msgspec.ValidationError:  # a layout 2 value among them (a store upgraded in place)
        # The msg_id is not a part's field: any will do.
        return [_new_tuple(PartEvent, _PART_FIELDS(e)) for e in codec.decode_events("", values)]
    out: list[PartEvent] = []
    append = out.append
    for s in stored:
        time_ms, born, store, request_id = s.time_ms, s.born_ms, s.store_ms, s.request_id
        append(_new_tuple(PartEvent, (
            time_ms, s.type, request_id.hex() if type(request_id) is bytes else request_id, s.group, s.topic,
            0 if store is None else store + time_ms, 0 if born is None else born + time_ms, s.status, s.retry)))
    return out


class _PartStored(msgspec.Struct, array_like=True):
    """The fields of a layout 3 value (:class:`collector.store.codec._Stored`) up to the last one a
    part reads; the others are left unread (Raw), and the rest of the array is skipped."""

    app: msgspec.Raw
    host: msgspec.Raw
    client_id: msgspec.Raw
    type: int
    time_ms: int
    group: str
    topic: str
    broker_msg_id: msgspec.Raw = _NONE
    keys: msgspec.Raw = _NONE
    tags: msgspec.Raw = _NONE
    broker: msgspec.Raw = _NONE
    queue: msgspec.Raw = _NONE
    offset: msgspec.Raw = _NONE
    born_ms: int | None = None
    store_ms: int | None = None
    cost_us: msgspec.Raw = _NONE
    status: int = 0
    error: msgspec.Raw = _NONE
    retry: int = 0
    body_len: msgspec.Raw = _NONE
    props: msgspec.Raw = _NONE
    request_id: Any = ""


assert _PartStored.__struct_fields__ == codec._Stored.__struct_fields__[:len(_PartStored.__struct_fields__)]
_decode_parts = msgspec.msgpack.Decoder(list[_PartStored]).decode
_ARRAY32 = b"\xdd"
_PART_FIELDS = operator.itemgetter(*(Event._fields.index(f) for f in PartEvent._fields))
"""An :class:`Event`'s values of the :class:`PartEvent` fields, in their order."""
_new_tuple = tuple.__new__  # a NamedTuple's __new__ names every field: about three times the cost
