"""Tables, families, TTLs and row keys of the index: the layout both stores share.

One place decides how every row key is built (through :mod:`collector.store.keys`),
which column a value lands in and how values are encoded, so the indexer and the
query side cannot disagree and the SQLite and HBase adapters stay thin.

Tables (logical names; HBase tables are ``<namespace>_<name>``):

========== =============================================== ==========================================
table      row key                                         columns
========== =============================================== ==========================================
messages   (hash4(msg_id), msg_id)                         ``s:<event id>`` PUB / END_TX / DEAD / REPLAY events,
                                                           ``c:<event id>`` SUB_BEFORE / SUB_AFTER events
keyidx     (topic, key, reversed msg time, msg_id)         ``i:`` empty (:data:`INDEX_CELLS`)
timeidx    (salt, topic, msg time, msg_id)                 ``i:`` empty
dead       (topic, ALL, reversed msg time, msg_id, group)  ``i:`` empty (all groups)
           (topic, ONE, group, reversed msg time, msg_id)  ``i:`` empty, per consumer group
records    (topic, group, msg time, msg_id)                ``c:`` empty: the group received it;
                                                           ``c:<queue, offset>`` empty: a SUB_AFTER there
queueidx   (topic, queue, msg time, offset)                ``i:`` empty
seqidx     (topic, broker, offset, queue, msg_id)          ``i:`` empty
pending    (hash4(msg_id), msg_id)                         ``s:<event id>`` DEAD events not yet placed
traceidx   (trace id, msg_id)                              ``i:`` empty
propidx    (topic, name, value prefix, reversed msg time,  ``i:`` empty: an indexed property
           msg_id)                                         (:mod:`collector.store.props`)
rollups    (TOPIC, topic)                                  ``r:`` marker: the topics with rollups
           (MINUTE, topic, minute)                         ``r:`` topic counts, ``r:<group>`` the group's
           (HOUR, hour, topic)                             as MINUTE: the hour's minutes merged (hour first)
           (PARTS, topic, minute)                          ``r:<msg_id>`` each message's part of the minute
           (DIRTY_MSG, hash4(msg_id), msg_id)              ``r:`` marker: an event of this message landed
           (DIRTY, topic, minute)                          ``r:`` marker of older indexers: recompute the minute
bodies     (hash4(msg_id), msg_id)                         ``b:s`` the body a send-side event kept, ``b:c`` the one
                                                           a consume kept (:mod:`collector.store.bodies`); the
                                                           only table on the body TTL (``body_ttl_days``)
           (hash4(msg_id), msg_id, 0)                      ``b:x`` marker: the message's body was erased
========== =============================================== ==========================================

Kept bodies live apart from the trace: the indexer writes an event's body, flags, raw key and raw
headers to ``bodies`` and leaves them out of the event's cell in ``messages``, so bodies expire on
their own TTL and are erased without touching the trace.

Index rows only point at the message row, the one place a message's fields live: their
key holds everything their own query reads (time, msg_id, group, queue, offset) and they
have one constant empty cell, so the PUB, SUB_BEFORE and DEAD events that file one message
under the same key write the same cell (and merge within a batch).

"msg time" is the broker's store time when known, else the born time, else the
event's own time (:func:`message_time`).  Only a message's send places it (the
message model, collector/store/model.py): the time, queue and position indexes are
written by PUB events, and by consume events only when they carry the broker's store
time.  A dead letter cannot know its message's placement, so it is filed under its own
time and parked in ``pending``; :func:`collector.store.indexer.finish_batch` moves it
to the placement time once the send is indexed.  Queries keep an index row only when
its time is the message's listing time (:class:`collector.store.model.MessageTrace`),
so a stray row never lists a message twice or in the wrong window.
Rollup rows are recomputed by :mod:`collector.store.rollup` after every batch: each
marked message's part is rebuilt from its message row, then each touched minute from its parts.
Event ids are a hash of the stored value, so a duplicate event overwrites itself.
"""

from __future__ import annotations

import functools
import hashlib
import re
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, NamedTuple

import msgpack

from collector.store import keys
from tracehook import wire
from tracehook.wire import Event, EventType

DEFAULT_TTL_S = 30 * 24 * 3600
"""Retention of every index cell (HBase column-family TTL; the same rule locally)."""
DEFAULT_BODY_TTL_S = 7 * 24 * 3600
"""Retention of kept message bodies (the ``bodies`` table), shorter than the trace's by default."""
MAX_ROW_KEY_BYTES = 32767
"""HBase's row-key limit (``HConstants.MAX_ROW_LENGTH``); longer rows are not indexed."""
DEFAULT_SALT_BUCKETS = 8
"""Buckets of the time index: spreads one busy topic's writes over regions."""

MESSAGES, KEYIDX, TIMEIDX, DEAD, RECORDS, QUEUEIDX, SEQIDX, PENDING, TRACEIDX, ROLLUPS, BODIES = (
    "messages", "keyidx", "timeidx", "dead", "records", "queueidx", "seqidx", "pending", "traceidx", "rollups",
    "bodies",
)
PROPIDX = "propidx"
SEND_FAMILY, CONSUME_FAMILY, INDEX_FAMILY, ROLLUP_FAMILY, BODY_FAMILY = "s", "c", "i", "r", "b"
INDEX_TTL, BODY_TTL = "index", "body"
"""The retentions a table's families can have: the index's (``ttl_days``) or the bodies' (``body_ttl_days``)."""
MAX_PROP_NAME_BYTES = 256
"""Longest property name (UTF-8) that can be indexed (``tracehook props set`` refuses longer ones)."""
MAX_PROP_VALUE_BYTES = 256
"""Bytes (UTF-8) of a property value the index holds: a longer value is filed under its first
bytes (:func:`prop_value_prefix`) and a query compares the whole value with the message's."""


@dataclass(frozen=True)
class Table:
    """A table, its column families and which retention they all keep (:attr:`StoreOptions.ttl_of`)."""

    name: str
    families: tuple[str, ...]
    ttl: str = INDEX_TTL


TABLES: tuple[Table, ...] = (
    Table(MESSAGES, (SEND_FAMILY, CONSUME_FAMILY)),
    Table(KEYIDX, (INDEX_FAMILY,)),
    Table(TIMEIDX, (INDEX_FAMILY,)),
    Table(DEAD, (INDEX_FAMILY,)),
    Table(RECORDS, (CONSUME_FAMILY,)),
    Table(QUEUEIDX, (INDEX_FAMILY,)),
    Table(SEQIDX, (INDEX_FAMILY,)),
    Table(PENDING, (SEND_FAMILY,)),
    Table(TRACEIDX, (INDEX_FAMILY,)),
    Table(PROPIDX, (INDEX_FAMILY,)),
    Table(ROLLUPS, (ROLLUP_FAMILY,)),
    Table(BODIES, (BODY_FAMILY,), ttl=BODY_TTL),
)
TABLES_BY_NAME = {t.name: t for t in TABLES}

_CONSUME_TYPES = frozenset((EventType.SUB_BEFORE, EventType.SUB_AFTER))
_DEAD_ALL, _DEAD_ONE = 0, 1  # the two row kinds of the dead table
_DEAD_ALL_B, _DEAD_ONE_B = keys.pack_one(_DEAD_ALL), keys.pack_one(_DEAD_ONE)
# Row keys are their elements' encodings concatenated (keys.pack(a + b) == keys.pack(a) + keys.pack(b)):
# built piece by piece, as the indexer builds several per event.
_one = keys.pack_one
# The row kinds of the rollups table.
ROLLUP_TOPIC, ROLLUP_MINUTE, ROLLUP_DIRTY, ROLLUP_DIRTY_MSG, ROLLUP_PARTS, ROLLUP_HOUR = 0, 1, 2, 3, 4, 5
MINUTE_MS = 60_000
HOUR_MS = 3_600_000
KEY_SEPARATOR = " "
"""Separates the business keys in an event's ``keys``, each filed in ``keyidx`` (RocketMQ's ``MessageConst.KEY_SEPARATOR``)."""


# --- times -----------------------------------------------------------------

def message_time(event: Event) -> int:
    """The time a message is filed under in every index: store, else born, else event time."""
    return event.store_ms if event.store_ms > 0 else event.born_ms if event.born_ms > 0 else event.time_ms


# --- row keys --------------------------------------------------------------

@functools.lru_cache(maxsize=4096)
def msg_hash(msg_id: str) -> bytes:
    """4 bytes of hash in front of the msg_id: spreads sequential ids over regions."""
    # Cached: every event of a message needs it twice (message row and time-index salt).
    return hashlib.blake2b(msg_id.encode("utf-8"), digest_size=4).digest()


def salt(msg_id: str, buckets: int) -> int:
    return int.from_bytes(msg_hash(msg_id), "big") % buckets


@functools.lru_cache(maxsize=8192)
def message_row(msg_id: str) -> bytes:
    # Cached: each of a message's events (often in one batch) writes this row.
    return keys.pack((msg_hash(msg_id), msg_id))


def message_rows(msg_ids: Iterable[str]) -> list[bytes]:
    """:func:`message_row` of each id, computed afresh: the rollup read-back asks for every message
    of a batch once, where the caches only add a lookup and an eviction to each (measured: 2.7 vs
    1.5 µs per id)."""
    pack, digest = keys.pack, msg_hash.__wrapped__
    return [pack((digest(m), m)) for m in msg_ids]


class EventKey(NamedTuple):
    """The elements an event's index rows share, each packed once (:func:`event_key`)."""

    topic: bytes
    msg_id: bytes
    time: bytes
    """The message time (:func:`message_time`)."""
    reversed_time: bytes
    """The same, newest first (:func:`collector.store.keys.reverse_int`)."""


@functools.lru_cache(maxsize=4096)
def event_key(topic: str, msg_id: str, time_ms: int) -> EventKey:
    # Cached: a message's events mostly share their topic, msg_id and message time.
    return EventKey(_one(topic), _one(msg_id), _one(time_ms), _one(keys.reverse_int(time_ms)))


def key_prefix(topic: str, key: str) -> tuple[keys.Element, ...]:
    return (topic, key)


def key_row(k: EventKey, key: str) -> bytes:
    """(topic, key, reversed msg time, msg_id)."""
    return k.topic + _one(key) + k.reversed_time + k.msg_id


def prop_value_prefix(value: str) -> str:
    """The part of a property value its index row holds: the first :data:`MAX_PROP_VALUE_BYTES` bytes
    of its UTF-8, cut before a character they would split."""
    if len(value) * 4 <= MAX_PROP_VALUE_BYTES:  # short enough whatever its characters
        return value
    raw = value.encode("utf-8")
    return value if len(raw) <= MAX_PROP_VALUE_BYTES else raw[:MAX_PROP_VALUE_BYTES].decode("utf-8", "ignore")


def prop_prefix(topic: str, name: str, value: str) -> tuple[keys.Element, ...]:
    return (topic, name, prop_value_prefix(value))


def prop_rows(topic: str, msg_id: str, time_ms: int, props: Iterable[tuple[str, str]]) -> list[bytes]:
    """The rows of a message's ``(name, value)`` properties filed at message time ``time_ms``:
    (topic, property name, value prefix, reversed msg time, msg_id), as :func:`key_row` per property."""
    tail = _one(keys.reverse_int(time_ms)) + _one(msg_id)
    return [_topic_name(topic, name) + _one(prop_value_prefix(value)) + tail for name, value in props]


@functools.lru_cache(maxsize=4096)
def _topic_name(topic: str, name: str) -> bytes:
    # Cached: a few names per topic start every property row.
    return _one(topic) + _one(name)


def time_prefix(bucket: int, topic: str) -> tuple[keys.Element, ...]:
    return (bucket, topic)


def time_row(k: EventKey, bucket: int) -> bytes:
    """(salt bucket, topic, msg time, msg_id)."""
    return _bucket(bucket) + k.topic + k.time + k.msg_id


_bucket = functools.lru_cache(maxsize=1024)(keys.pack_one)


def dead_prefix(topic: str, group: str | None) -> tuple[keys.Element, ...]:
    return (topic, _DEAD_ALL) if group is None else (topic, _DEAD_ONE, group)


def dead_rows(topic: str, group: str, time_ms: int, msg_id: str) -> tuple[bytes, bytes]:
    """The all-groups row and the per-group row of one dead letter."""
    return dead_rows_of(event_key(topic, msg_id, time_ms), group)


def dead_rows_of(k: EventKey, group: str) -> tuple[bytes, bytes]:
    """:func:`dead_rows` from an :class:`EventKey`."""
    group_b = _one(group)
    return (k.topic + _DEAD_ALL_B + k.reversed_time + k.msg_id + group_b,
            k.topic + _DEAD_ONE_B + group_b + k.reversed_time + k.msg_id)


def records_prefix(topic: str, group: str) -> tuple[keys.Element, ...]:
    return (topic, group)


def records_row(k: EventKey, group: str) -> bytes:
    """(topic, group, msg time, msg_id)."""
    return k.topic + _one(group) + k.time + k.msg_id


def queue_prefix(topic: str, queue: int) -> tuple[keys.Element, ...]:
    return (topic, queue)


def queue_row(k: EventKey, queue: int, offset: int) -> bytes:
    """(topic, queue, msg time, offset)."""
    return k.topic + _one(queue) + k.time + _one(offset)


def trace_prefix(trace_id: str) -> tuple[keys.Element, ...]:
    # A W3C trace id (32 lower-case hex digits) as the 16 bytes it spells: half the key.
    return (_hex_bytes(trace_id),)


def trace_row(trace_id: str, k: EventKey) -> bytes:
    """The messages of one W3C trace (an app's OTel trace may hold many): (trace id, msg_id)."""
    return _trace_element(trace_id) + k.msg_id


@functools.lru_cache(maxsize=4096)
def _trace_element(trace_id: str) -> bytes:
    # Cached: a message's events share its trace id.
    return _one(_hex_bytes(trace_id))


def seq_prefix(topic: str, broker: str, offset: int, queue: int | None = None) -> tuple[keys.Element, ...]:
    """Rows of one (broker, offset): every queue's, or one queue's."""
    return (topic, broker, offset) if queue is None else (topic, broker, offset, queue)


def seq_row(k: EventKey, broker: str, offset: int, queue: int) -> bytes:
    """QMQ's brokerGroup + sequence lookup: (topic, broker, offset, queue, msg_id).  Offset
    before queue: a brokerGroup without a queue is one prefix scan over all queues; msg_id
    last so two messages at one position (a reset broker) stay apart."""
    return k.topic + _one(broker) + _one(offset) + _one(queue) + k.msg_id


def minute_of(time_ms: int) -> int:
    """The start of the minute ``time_ms`` falls in (rollup buckets are minutes)."""
    return time_ms - time_ms % MINUTE_MS


def rollup_topic_row(topic: str) -> bytes:
    return keys.pack((ROLLUP_TOPIC, topic))


def rollup_row(topic: str, minute_ms: int) -> bytes:
    return keys.pack((ROLLUP_MINUTE, topic, minute_ms))


def rollup_hour_row(topic: str, hour_ms: int) -> bytes:
    """One topic's hourly rollup: its minutes' rollups merged (``hour_ms`` is the hour's start).
    Keyed hour first, so one range scan (:func:`rollup_hour_prefix`) reads every topic's hours."""
    return keys.pack((ROLLUP_HOUR, hour_ms, topic))


def rollup_hour_prefix(hour_ms: int) -> bytes:
    """Where the hour rows of ``hour_ms`` start, every topic's (a scan to the next hour's reads them)."""
    return keys.pack((ROLLUP_HOUR, hour_ms))


def rollup_row_minute(row: bytes) -> int:
    """The minute of a :func:`rollup_row` key (its last element), without decoding the topic."""
    return keys.unpack(row[-keys.INT_BYTES:])[0]  # type: ignore[return-value]


def rollup_dirty_row(topic: str, minute_ms: int) -> bytes:
    """Marks a minute whose rollup must be recomputed from its messages (written by indexers before
    parts rows existed; still honoured, so an upgrade mid-run loses nothing)."""
    return keys.pack((ROLLUP_DIRTY, topic, minute_ms))


def rollup_dirty_msg_row(msg_id: str) -> bytes:
    """Marks a message whose part of its minute's rollup must be rebuilt (an event of it was indexed)."""
    return keys.pack((ROLLUP_DIRTY_MSG, msg_hash(msg_id), msg_id))


def rollup_parts_row(topic: str, minute_ms: int) -> bytes:
    """The row holding each placed message's part of one minute's rollup (one column per message)."""
    return keys.pack((ROLLUP_PARTS, topic, minute_ms))


def rollup_part_column(msg_id: str) -> bytes:
    return column(ROLLUP_FAMILY, msg_id.encode("utf-8"))


def rollup_part_msg_id(col: bytes) -> str:
    return col[len(ROLLUP_FAMILY) + 1:].decode("utf-8")


ROLLUP_COLUMN = b"r:"
"""The topic's counts in a minute row; also the only column of marker rows."""


def rollup_group_column(group: str) -> bytes:
    return column(ROLLUP_FAMILY, keys.pack((group,)))


# --- columns and values ----------------------------------------------------

def column(family: str, qualifier: bytes) -> bytes:
    """HBase-style ``family:qualifier`` column name (qualifiers may be any bytes)."""
    return family.encode("ascii") + b":" + qualifier


def split_column(name: bytes) -> tuple[str, bytes]:
    family, _, qualifier = name.partition(b":")
    return family.decode("ascii"), qualifier


def event_family(event: Event) -> str:
    return CONSUME_FAMILY if event.type in _CONSUME_TYPES else SEND_FAMILY


def encode_event_value(app: str, host: str, client_id: str, event: Event) -> bytes:
    """A stored event: who sent it (from the batch header) and the trimmed wire event.

    Born and store times are kept as their difference from the event's time (a few bytes
    instead of nine), and lower-case hex ids (msg, request, trace and span ids) as the bytes
    they spell (msgpack bin: half the size); :func:`decode_event_value` restores both.  The
    captured body, its flags, raw key and raw headers are left out: they live in ``bodies``
    (:mod:`collector.store.bodies`).
    """
    raw = wire.trim(without_body(event))
    n = len(raw)
    if n > _BORN:
        raw[_BORN] -= raw[1]
        if n > _STORE:
            raw[_STORE] -= raw[1]
    for i in _HEX_FIELDS:
        if i < n and raw[i]:
            raw[i] = _hex_bytes(raw[i])
    # msgpack of [app, host, client_id, raw]: the sender's part is the same for a whole batch.
    return _sender(app, host, client_id) + msgpack.packb(raw, use_bin_type=True)


def without_body(event: Event) -> tuple[Any, ...]:
    """``event``'s fields without what the bodies table keeps (body, body_flags, raw_key, raw_headers):
    the event itself when it carries none of them."""
    if event[_BODY] is None and event[_BODY_FLAGS:] == _NO_BODY_TAIL:
        return event
    return event[:_BODY] + (None,) + event[_BODY + 1:_BODY_FLAGS]


_BODY, _BODY_FLAGS = wire.Event._fields.index("body"), wire.Event._fields.index("body_flags")
_NO_BODY_TAIL = wire.DEFAULTS[_BODY_FLAGS:]
"""The defaults of the fields from body_flags on (all of them body fields, kept in ``bodies``)."""


@functools.lru_cache(maxsize=1024)
def _sender(app: str, host: str, client_id: str) -> bytes:
    """The start of a stored event's msgpack array: its 4-item header and the sender's three strings."""
    return b"\x94" + b"".join(msgpack.packb(v, use_bin_type=True) for v in (app, host, client_id))


_BORN, _STORE = wire.Event._fields.index("born_ms"), wire.Event._fields.index("store_ms")
_HEX_FIELDS = tuple(wire.Event._fields.index(f)
                    for f in ("msg_id", "broker_msg_id", "request_id", "trace_id", "span_id"))
"""Id fields that are often lower-case hex (tracehook's own ids): kept as half as many bytes (msgpack bin)."""


def _hex_bytes(text: str) -> str | bytes:
    """``text`` as the bytes its lower-case hex digits spell (``bytes.hex()`` gives ``text`` back), else ``text``."""
    return bytes.fromhex(text) if _is_hex(text) else text


_is_hex = re.compile("(?:[0-9a-f]{2})+").fullmatch


def event_id(value: bytes) -> bytes:
    """Deterministic column qualifier of a stored event: identical events collapse."""
    return hashlib.blake2b(value, digest_size=8).digest()


def event_qualifier(event: Event, value: bytes) -> bytes:
    """A stored event's qualifier: the hash of its value (nothing reads qualifiers back)."""
    return event_id(value)


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
        for name in _BODY_TABLE_FIELDS:  # never in a cell (encode_event_value): the message's body says
            del d[name]
        d["app"], d["host"], d["client_id"] = self.app, self.host, self.client_id
        return d


_TYPE_NAMES = {int(t): t.name for t in EventType}
_BODY_TABLE_FIELDS = ("body_flags", "raw_key", "raw_headers")
_STATUS_NAMES = {int(s): s.name for s in wire.Status}


def decode_event_value(value: bytes) -> StoredEvent:
    """A stored event with its sender, validated as the wire format requires (the query path)."""
    app, host, client_id, raw = msgpack.unpackb(value, raw=False, use_list=True)
    return StoredEvent(app, host, client_id, wire.validate_event(_restored(raw)))


def decode_events(values: Collection[bytes]) -> list[Event]:
    """The events of values this index wrote, not validated again: ``decode_event_value(v).event`` of each.

    Only for values :func:`encode_event_value` made of events the wire format accepted (every
    value an indexer writes): the rollup read-back decodes every touched message after each
    batch.  The values are unpacked as one array, in one call (a call per value costs about as
    much as the value's unpacking).
    """
    out: list[Event] = []
    append = out.append
    for stored in msgpack.unpackb(_ARRAY32 + len(values).to_bytes(4, "big") + b"".join(values),
                                  raw=False, use_list=True):
        raw = _restored(stored[3])
        n = len(raw)
        if n < _FIELD_COUNT:
            raw.extend(_DEFAULTS[n:])  # as validate_event pads
        append(_new_tuple(Event, raw))
    return out


_ARRAY32 = b"\xdd"
"""msgpack's header of an array with a 4-byte length."""
_FIELD_COUNT, _DEFAULTS, _new_tuple = wire.FIELD_COUNT, wire.DEFAULTS, tuple.__new__


def _restored(raw: list[Any]) -> list[Any]:
    """A stored event's raw array with its born and store times and its hex ids restored (in place)."""
    n = len(raw)
    if n > _BORN:
        raw[_BORN] += raw[1]
        if n > _STORE:
            raw[_STORE] += raw[1]
    for i in _HEX_FIELDS:
        if i < n and type(raw[i]) is bytes:  # a string field is bytes only when it was hex
            raw[i] = raw[i].hex()
    return raw


Cells = Mapping[bytes, bytes]
"""An index row's cells as the indexer builds them: a dict, or one of the shared read-only constants below."""
INDEX_COLUMN = b"i:"
"""The one column of every index row (keyidx, timeidx, dead, queueidx, seqidx, traceidx)."""
INDEX_CELLS: Cells = MappingProxyType({INDEX_COLUMN: b""})
"""An index row's cells: one empty cell, the same whichever event files the row."""
RECEIVED_COLUMN = b"c:"
"""A records row's cell saying the group received the message (SUB_BEFORE, and a SUB_AFTER without a position)."""
RECEIVED_CELLS: Cells = MappingProxyType({RECEIVED_COLUMN: b""})


def record_columns(event: Event) -> Cells:
    """The records cell of a consume event: a finished one (SUB_AFTER) that knows its queue and
    offset names them in the qualifier, the position backtracking reads; any other says received."""
    if event.type == EventType.SUB_AFTER and event.queue >= 0 and event.offset >= 0:
        # msgpack ints: small queues and offsets take a byte or a few, not eight each.
        return {RECEIVED_COLUMN + msgpack.packb((event.queue, event.offset)): b""}
    return RECEIVED_CELLS


def record_positions(columns: Mapping[bytes, bytes]) -> list[tuple[int, int]]:
    """The (queue, offset) of every finished consume in a records row's cells."""
    n = len(RECEIVED_COLUMN)
    return [tuple(msgpack.unpackb(col[n:])) for col in columns if len(col) > n]  # type: ignore[misc]
