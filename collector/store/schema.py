"""Tables, families, TTLs and row keys of the index: the layout both stores share.

One place decides how every row key is built (through :mod:`collector.store.keys`) and
which column a value lands in (message cells' values: :mod:`collector.store.codec`), so the indexer and the
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
under the same key write the same cell (and merge within a batch).  Their tables (and
``records``, whose values are empty) say so (:attr:`Table.qualifiers`, :attr:`Table.values`): the
embedded store keeps an index row as its key alone, and a table of one family's cells without it
(:mod:`collector.store.sqlite_tables`; HBase keeps cells as given).

"msg time" is the broker's store time when known, else the born time, else the
event's own time (:func:`message_time`).  Only a message's send places it (the
message model, collector/store/model.py): the time, queue and position indexes are
written by PUB events, and by consume events only when they carry the broker's store
time.  A dead letter cannot know its message's placement, so it is filed under its own
time and parked in ``pending``; :func:`collector.index.indexer.finish_batch` moves it
to the placement time once the send is indexed.  Queries keep an index row only when
its time is the message's listing time (:class:`collector.store.model.MessageTrace`),
so a stray row never lists a message twice or in the wrong window.
Rollup rows are recomputed by :mod:`collector.index.rollup` after every batch: each
marked message's part is rebuilt from its message row, then each touched minute from its parts.
A message cell's qualifier and value are :mod:`collector.store.codec`'s: the value leaves out the
msg_id the row key holds, and a duplicate event overwrites itself.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import NamedTuple

import msgpack

from collector.store import keys
from collector.store.codec import hex_bytes as _hex_bytes
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
    qualifiers: bool = True
    """False: every row holds one cell, its family's empty qualifier (``i:``), and nothing else."""
    values: bool = True
    """False: every cell's value is empty.  A store may keep no more than can differ (the embedded
    store does, :mod:`collector.store.sqlite_tables`) and refuse any other cell."""


TABLES: tuple[Table, ...] = (
    Table(MESSAGES, (SEND_FAMILY, CONSUME_FAMILY)),
    Table(KEYIDX, (INDEX_FAMILY,), qualifiers=False, values=False),
    Table(TIMEIDX, (INDEX_FAMILY,), qualifiers=False, values=False),
    Table(DEAD, (INDEX_FAMILY,), qualifiers=False, values=False),
    Table(RECORDS, (CONSUME_FAMILY,), values=False),
    Table(QUEUEIDX, (INDEX_FAMILY,), qualifiers=False, values=False),
    Table(SEQIDX, (INDEX_FAMILY,), qualifiers=False, values=False),
    Table(PENDING, (SEND_FAMILY,)),
    Table(TRACEIDX, (INDEX_FAMILY,), qualifiers=False, values=False),
    Table(PROPIDX, (INDEX_FAMILY,), qualifiers=False, values=False),
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
