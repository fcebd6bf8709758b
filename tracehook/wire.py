"""The wire format shared by the library, the collector and the index job.

An event is a positional array (a tuple on the sending side, an :class:`Event`
after decoding); a batch is a positional array too::

    batch = [version, client_id, seq, app, host, sent_ms, client_stats, events]

Fields are only ever appended, never reordered, so an older event (a shorter
array) still decodes: missing trailing fields take their defaults.  Trailing
fields equal to their defaults are left off on the wire to keep events small.

What a collector refuses (:func:`decode_batch` raises :class:`WireError` with the reason):
anywhere in a body, a string over :data:`MAX_STR_LEN` bytes, a bin over
:data:`MAX_BODY_LEN`, an array over :data:`MAX_EVENTS_PER_BATCH` items, a map over 1,024
entries, an ext value or a map key that is neither a string nor bytes are refused while unpacking
(``bad_msgpack``); data after the batch is ``trailing_bytes``. Then, in the batch (which may
have more than 8 fields): an unknown version (``unknown_version``), a wrong type, an empty
client_id, a negative seq, a sent_ms outside 0..:data:`MAX_TIME_MS` (``bad_batch``); in an event: not an array of
:data:`MIN_FIELDS`..:data:`FIELD_COUNT` fields (``bad_event``), an empty topic or msg_id
(``missing_field``), a wrong type, an unknown enum value, more than :data:`MAX_PROPS` props
or props that are not strings, body_flags with an unknown bit, raw_headers that are not at most
:data:`MAX_RAW_HEADERS` [str, bytes] pairs of :data:`MAX_RAW_HEADERS_BYTES` in all, an integer
outside its field's range (``bad_field``). The
ranges (:data:`INT_RANGES`): times are epoch ms no later than :data:`MAX_TIME_MS` (the end of
the year 9999), time_ms from 0 and born_ms / store_ms from -1 (0 and -1: unknown); queue and
offset from -1 (unknown) to the signed 64-bit maximum; cost_us, retry and body_len any signed
64-bit value. The batch's sent_ms is a time too (0..:data:`MAX_TIME_MS`). A bool is not an integer.
Whatever this accepts, the index stores and answers for (docs/collector.md, "Accepted ranges").

Example::

    from tracehook import wire
    ev = wire.make_event(wire.EventType.PUB, 1700000000000, "g", "orders", "id-1")
    data = wire.encode_batch(wire.BatchHeader("client-1", 7, "shop", "host-a"), [ev])
    batch = wire.decode_batch(data)        # raises wire.WireError on bad input
"""

from __future__ import annotations

import datetime
import decimal
import gc
import operator
import zlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any, NamedTuple

import msgpack

from tracehook.errors import WireError  # noqa: F401  (raised here; callers catch wire.WireError)

from .context import trace_id_for

SCHEMA_VERSION = 1
"""The newest batch version this code writes; it reads every version from 1 up."""

MAX_STR_LEN = 16 * 1024
"""Longest string accepted in any field (topics, keys and ids up to 10 KB round-trip)."""
MAX_BODY_LEN = 64 * 1024
"""Longest captured body accepted (capture is off by default, see tracehook.config)."""
MAX_EVENTS_PER_BATCH = 100_000
MAX_PROPS = 64
"""Most user properties kept per event."""
MAX_INT = 2**63 - 1
"""Integers travel as signed 64-bit values (HBase row keys use the same width)."""
MIN_INT = -(2**63)
"""The smallest integer accepted in any field (row-key fields take -1 at the least)."""
MAX_TIME_MS = 253_402_300_799_999
"""9999-12-31T23:59:59.999Z, the latest time any field may hold: a later one is no message's
(Python's datetime, the console and the query API's times end there), and the index adds hours
and minutes to times it files, which must stay within signed 64 bits."""


class EventType(IntEnum):
    """What happened to the message."""

    PUB = 1  # the send result, from the producer
    SUB_BEFORE = 2  # a consumer received the message
    SUB_AFTER = 3  # the consumer's handler finished
    END_TX = 4  # a transactional message was committed or rolled back
    DEAD = 5  # the message was moved to a dead-letter queue
    # ``tracehook replay`` re-delivered the message to one consumer group (added after DEAD; older
    # readers never see it from older writers): group = the group it was re-delivered for, queue /
    # offset = the original record's, retry = the attempt number its consume will carry,
    # request_id = the replay run's id, props["replay.target"] = "topic:T" or "handler:module:function"
    # (who and where: the batch header's app and host).
    REPLAY = 6


class Status(IntEnum):
    """Outcome of a send or a consume (RocketMQ's consume statuses plus send errors)."""

    OK = 0
    FAILED = 1
    TIMEOUT = 2
    EXCEPTION = 3
    RETRY_LATER = 4
    UNKNOWN = 5


class TxState(IntEnum):
    """State of a transactional message at END_TX."""

    UNKNOWN = 0
    COMMIT = 1
    ROLLBACK = 2


class Event(NamedTuple):
    """One trace event; the field order is the wire order and never changes."""

    type: int
    time_ms: int  # when the event happened (epoch ms)
    group: str  # producer group for PUB/END_TX, consumer group otherwise
    topic: str
    msg_id: str
    broker_msg_id: str = ""  # the broker's own id when it differs (e.g. RocketMQ offsetMsgId)
    keys: str = ""  # business keys, space separated (RocketMQ's KEY_SEPARATOR)
    tags: str = ""
    broker: str = ""  # broker / store host
    queue: int = -1  # queue id or partition, -1 when unknown
    offset: int = -1  # queue offset, -1 when unknown
    born_ms: int = 0  # when the producer created the message
    store_ms: int = 0  # when the broker stored it
    cost_us: int = 0
    status: int = Status.OK
    error: str = ""  # short error text for failed sends/consumes
    retry: int = 0  # delivery attempt number (0 = first delivery)
    body_len: int = 0
    props: dict[str, str] | None = None  # user properties
    request_id: str = ""  # pairs SUB_BEFORE with SUB_AFTER
    tx_id: str = ""
    tx_state: int = TxState.UNKNOWN
    body: bytes | None = None  # optional captured body (off by default)
    # The W3C trace context (added after body; older events decode with both empty):
    trace_id: str = ""  # "" = the message's own trace, context.trace_id_for(msg_id); see trace_id_of()
    span_id: str = ""  # the send's span: on PUB the one it wrote, on consume events the parent they got
    # The kept record, for replay (added after span_id; older events decode with nothing kept):
    body_flags: int = 0  # BODY_TRUNCATED | BODY_ZLIB: how ``body`` holds the message body (body_bytes())
    raw_key: bytes | None = None  # the record's key as the client sent it (Kafka), None: none or not kept
    raw_headers: list[list[Any]] | None = None  # the record's headers as sent: [name (str), value (bytes)] pairs


FIELD_COUNT = len(Event._fields)
MIN_FIELDS = 5  # type, time_ms, group, topic, msg_id are required
LEGACY_FIELD_COUNT = Event._fields.index("body_flags")
"""Event fields a collector that does not advertise :data:`WIRE_HEADER` accepts (up to span_id)."""

BODY_TRUNCATED = 0x1
"""body_flags: ``body`` holds only the first bytes of the message body (``body_len`` is the whole length)."""
BODY_ZLIB = 0x2
"""body_flags: ``body`` is zlib-compressed (standard library ``zlib``); :func:`body_bytes` inflates it."""
BODY_FLAGS = BODY_TRUNCATED | BODY_ZLIB
"""Every known body flag: body_flags takes 0..BODY_FLAGS."""
MAX_RAW_HEADERS = 64
"""Most headers kept per record (raw_headers pairs)."""
MAX_RAW_HEADERS_BYTES = 64 * 1024
"""Most bytes of all kept header names (UTF-8) and values of one record together."""
WIRE_HEADER = "X-Tracehook-Wire"
"""The HTTP header on every ingest answer of a collector that reads this module's format: ``fields=N``, the
number of event fields it accepts (an older collector sends none and accepts :data:`LEGACY_FIELD_COUNT`)."""
DEFAULTS: tuple[Any, ...] = tuple(Event._field_defaults.get(f) for f in Event._fields)

_STR, _INT = str, int
# The exact Python type of every field as msgpack decodes it; props/body may also be None.
_TYPES: tuple[type, ...] = (
    _INT, _INT, _STR, _STR, _STR, _STR, _STR, _STR, _STR, _INT, _INT, _INT, _INT, _INT,
    _INT, _STR, _INT, _INT, dict, _STR, _STR, _INT, bytes, _STR, _STR, _INT, bytes, list,
)
_NULLABLE = {Event._fields.index(f) for f in ("props", "body", "raw_key", "raw_headers")}
_EVENT_TYPES = frozenset(int(t) for t in EventType)
_STATUSES = frozenset(int(s) for s in Status)
_TX_STATES = frozenset(int(s) for s in TxState)
INT_RANGES: dict[str, tuple[int, int]] = {
    "time_ms": (0, MAX_TIME_MS),  # 0: unknown (the message is then filed at 1970-01-01)
    "queue": (-1, MAX_INT),  # -1: unknown; brokers number partitions and offsets in 32 and 64 bits
    "offset": (-1, MAX_INT),
    "born_ms": (-1, MAX_TIME_MS),  # -1 and 0: unknown (the index files the message by another time)
    "store_ms": (-1, MAX_TIME_MS),
    # Not in any row key: any signed 64-bit value (msgpack also carries unsigned 64-bit ones,
    # which no consumer of the format can hold).
    "cost_us": (MIN_INT, MAX_INT),
    "retry": (MIN_INT, MAX_INT),
    "body_len": (MIN_INT, MAX_INT),
    "body_flags": (0, BODY_FLAGS),  # known bits only
}
"""The accepted range of every integer field that is not an enum, inclusive (docs/collector.md)."""
_RANGED = tuple((Event._fields.index(f), lo, hi) for f, (lo, hi) in INT_RANGES.items())
# Integer fields that feed row keys: they must stay within signed 64 bits and >= -1 ...
_KEYED_INTS = tuple(Event._fields.index(f) for f in ("time_ms", "queue", "offset", "store_ms", "born_ms"))
# ... and those of them that are times end at MAX_TIME_MS (time_ms starts at 0, checked on its own).
_TIME_INTS = tuple(Event._fields.index(f) for f in ("time_ms", "store_ms", "born_ms"))
_PLAIN_INTS = tuple(Event._fields.index(f) for f in ("cost_us", "retry", "body_len"))
_BODY_FLAGS, _RAW_HEADERS = Event._fields.index("body_flags"), Event._fields.index("raw_headers")


# The unpacker's limits on received data; the C fast path is configured from the same dict.
_UNPACK_LIMITS = {
    "max_str_len": MAX_STR_LEN,
    "max_bin_len": MAX_BODY_LEN,
    "max_array_len": MAX_EVENTS_PER_BATCH,
    "max_map_len": max(MAX_PROPS, 1024),
    "max_ext_len": 0,
}


@dataclass(frozen=True)
class BatchHeader:
    """Who sent a batch: the collector dedupes retries by (client_id, seq)."""

    client_id: str
    seq: int
    app: str = ""
    host: str = ""
    sent_ms: int = 0
    client_stats: dict[str, int] = field(default_factory=dict)  # the client's drop counters


@dataclass(frozen=True)
class Batch:
    """A decoded, validated batch."""

    version: int
    header: BatchHeader
    events: list[Event]


def trace_id_of(event: Event) -> str:
    """The event's W3C trace id: its ``trace_id``, or when that is empty (the message's own
    trace, and every event older than the field) :func:`tracehook.context.trace_id_for` its msg_id."""
    return event.trace_id or trace_id_for(event.msg_id)


def make_event(type: int, time_ms: int, group: str, topic: str, msg_id: str, **fields: Any) -> tuple:
    """Build an event tuple by field name (the hooks build tuples directly for speed)."""
    values = list(DEFAULTS)
    values[0:5] = [int(type), time_ms, group, topic, msg_id]
    for name, value in fields.items():
        try:
            values[Event._fields.index(name)] = value
        except ValueError:
            raise TypeError(f"unknown event field: {name!r}") from None
    return tuple(values)


def trim(event: Sequence[Any]) -> list[Any]:
    """Drop trailing fields equal to their defaults (the encoder's size saving)."""
    n = len(event)
    while n > MIN_FIELDS and event[n - 1] == DEFAULTS[n - 1]:
        n -= 1
    return list(event[:n])


def encode_event(event: Sequence[Any]) -> bytes:
    """msgpack bytes of one event (trimmed); batches concatenate these."""
    return msgpack.packb(trim(event), use_bin_type=True)


def encode_batch(header: BatchHeader, events: Iterable[Sequence[Any]]) -> bytes:
    """Encode a batch; ``events`` are tuples in :class:`Event` field order."""
    packed = [encode_event(e) for e in events]
    return encode_batch_packed(header, packed)


def encode_batch_packed(header: BatchHeader, packed_events: Sequence[bytes]) -> bytes:
    """Encode a batch from already-encoded events (lets the dispatcher size batches by bytes)."""
    packer = msgpack.Packer(use_bin_type=True)
    head = packer.pack_array_header(8) + b"".join(
        packer.pack(v)
        for v in (
            SCHEMA_VERSION, header.client_id, header.seq, header.app, header.host,
            header.sent_ms, header.client_stats,
        )
    )
    return head + packer.pack_array_header(len(packed_events)) + b"".join(packed_events)


@contextmanager
def no_gc() -> Iterator[None]:
    """Hold the cyclic garbage collector off while a body is turned into objects.

    Unpacking allocates one container per container header, and a hostile body can hold
    one per byte; every 700 allocations start a collection that walks the young objects,
    and the older generations' passes walk the whole heap. That made bodies of many small
    (or deeply nested) arrays cost 4-10 times a valid batch of the same size (about 0.5 ms
    per KB in a collector's heap); without it the cost is the unpacker's, linear in the
    bytes. Nothing built here forms a cycle: reference counting frees it all.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def decode_batch(data: bytes) -> Batch:
    """Decode and validate a batch; raise :class:`WireError` naming the first problem."""
    with no_gc():
        try:
            return _decode_batch(data)
        except WireError as exc:
            # A fresh error: the caught one's traceback holds the frames, and so every
            # object of the body, until it is gone; it goes here, while the GC is off.
            error = WireError(exc.reason, exc.detail)
    raise error


def _decode_batch(data: bytes) -> Batch:
    version, header, events = _decode_envelope(data)
    valid = _validate_all(events)
    if valid is None:  # something is wrong: the per-event path names the first problem
        valid = [validate_event(e, i) for i, e in enumerate(events)]
    return Batch(version, header, valid)


def decode_events_separately(data: bytes) -> tuple[BatchHeader, list[tuple[Any, Event | WireError]]]:
    """Each event of a batch checked on its own: ``(raw event, Event or the WireError refusing it)``.

    For batches already in a trace log (the index path) that :func:`decode_batch` refuses for
    some of their events: the others can still be indexed.  A batch whose envelope does not
    decode raises :class:`WireError` as :func:`decode_batch` does.
    """
    with no_gc():
        _, header, events = _decode_envelope(data)
        out: list[tuple[Any, Event | WireError]] = []
        for i, raw in enumerate(events):
            kept = list(raw) if type(raw) is list else raw  # validate_event pads the list it checks
            try:
                out.append((kept, validate_event(raw, i)))
            except WireError as exc:
                out.append((kept, exc))
        return header, out


def decode_checked_batch(data: bytes) -> Batch:
    """:func:`decode_batch` of a body a validator of these rules has accepted already, without
    checking anything again: the same :class:`Batch` (the collector's index path, whose C validator
    answers "valid" faster; ``collector.wirecheck.validate.decode_batch``).

    Only for bytes :func:`check_batch` accepts; what it makes of anything else is undefined.
    """
    with no_gc():
        # Tuples, not lists: cheaper to build, and a valid batch holds no array a caller sees.
        version, client_id, seq, app, host, sent_ms, stats, events = msgpack.unpackb(
            data, raw=False, use_list=False, strict_map_key=True)[:8]
        built = [_new_tuple(Event, e + _PADDING[len(e)]) for e in events]
        if events and max(map(len, events)) > _RAW_HEADERS:  # pairs as lists, as decode_batch gives them
            built = [e if e.raw_headers is None else e._replace(raw_headers=[list(p) for p in e.raw_headers])
                     for e in built]
        return Batch(version, BatchHeader(client_id, seq, app, host, sent_ms, stats), built)


def check_batch(data: bytes) -> tuple[BatchHeader, int]:
    """Validate a batch exactly as :func:`decode_batch` does, without building events;
    return its header and event count (the collector's ingest path, whose C validator
    answers "valid" faster and falls back to this for the reason)."""
    with no_gc():
        try:
            return _check_unpacked(data)
        except WireError as exc:
            error = WireError(exc.reason, exc.detail)  # as in decode_batch
    raise error


def _check_unpacked(data: bytes) -> tuple[BatchHeader, int]:
    _, header, events = _decode_envelope(data)
    if _validate_all(events, build=False) is None:
        for i, e in enumerate(events):
            validate_event(e, i)  # raises the first problem
    return header, len(events)


def _decode_envelope(data: bytes) -> tuple[int, BatchHeader, Any]:
    # msgpack preallocates an array or map at its declared length, before it knows whether
    # the items follow. Every item takes at least one byte (a map entry two), so a length
    # beyond the body's size is a lie; capping it at the body's size keeps a small body of
    # nested huge headers from costing ~1 GB of allocation and ~100 ms of CPU.
    size = len(data)
    try:
        obj = msgpack.unpackb(
            data,
            raw=False,
            use_list=True,
            strict_map_key=True,
            max_str_len=_UNPACK_LIMITS["max_str_len"],
            max_bin_len=_UNPACK_LIMITS["max_bin_len"],
            max_array_len=min(_UNPACK_LIMITS["max_array_len"], size),
            max_map_len=min(_UNPACK_LIMITS["max_map_len"], size // 2),
            max_ext_len=_UNPACK_LIMITS["max_ext_len"],
        )
    except msgpack.ExtraData:
        raise WireError("trailing_bytes", "data continues after the batch") from None
    except (ValueError, msgpack.UnpackException, TypeError) as exc:
        raise WireError("bad_msgpack", str(exc)[:200]) from None
    except RecursionError:
        raise WireError("bad_msgpack", "nested too deeply") from None
    if type(obj) is not list or len(obj) < 8:
        raise WireError("bad_batch", "a batch is an array of 8 fields")
    version, client_id, seq, app, host, sent_ms, stats, events = obj[:8]
    if type(version) is not int or not 1 <= version <= SCHEMA_VERSION:
        raise WireError("unknown_version", f"batch version {version!r} (known: 1..{SCHEMA_VERSION})")
    for name, value in (("client_id", client_id), ("app", app), ("host", host)):
        if type(value) is not str:
            raise WireError("bad_batch", f"{name} must be a string")
    if not client_id:
        raise WireError("bad_batch", "client_id is empty")
    if type(seq) is not int or not 0 <= seq <= MAX_INT:
        raise WireError("bad_batch", "seq must be a non-negative 64-bit integer")
    if type(sent_ms) is not int or not 0 <= sent_ms <= MAX_TIME_MS:
        raise WireError("bad_batch", "sent_ms must be epoch ms from 0 to the end of the year 9999")
    if type(stats) is not dict or not all(
        type(k) is str and type(v) is int and 0 <= v <= MAX_INT for k, v in stats.items()
    ):
        raise WireError("bad_batch", "client_stats must map strings to non-negative integers")
    if type(events) is not list:
        raise WireError("bad_batch", "events must be an array")
    return version, BatchHeader(client_id, seq, app, host, sent_ms, stats), events


def _keyed_getter(n: int, fields: tuple[int, ...] = _KEYED_INTS) -> Callable[[list[Any]], tuple[Any, ...]]:
    present = [i for i in fields if i < n]
    if len(present) == 1:  # itemgetter with one index returns a bare value, not a tuple
        only = present[0]
        return lambda raw: (raw[only],)
    return operator.itemgetter(*present)


# Per event length, precomputed so the per-event path is a few C-level calls (the
# collector validates every event it receives; this is its hottest loop).
_TYPES_BY_LEN: tuple[tuple[type, ...], ...] = tuple(_TYPES[:n] for n in range(FIELD_COUNT + 1))
_KEYED_BY_LEN = tuple(_keyed_getter(max(n, MIN_FIELDS)) for n in range(FIELD_COUNT + 1))
_TIMES_BY_LEN = tuple(_keyed_getter(max(n, MIN_FIELDS), _TIME_INTS) for n in range(FIELD_COUNT + 1))
_new_tuple = tuple.__new__


_NONE_TYPE = type(None)
_STR_COLUMNS = tuple(i for i, t in enumerate(_TYPES) if t is str)
# Column -> the set of types a valid column may hold (ints are exact: bool is not an int here).
_OTHER_COLUMNS = tuple(
    (i, frozenset({t, _NONE_TYPE}) if i in _NULLABLE else frozenset({t}))
    for i, t in enumerate(_TYPES) if t is not str
)
_PROPS, _STATUS, _TX_STATE = (Event._fields.index(f) for f in ("props", "status", "tx_state"))
# Defaults as plain values (the enum defaults are not exactly int, and padded events must
# still pass validate_event when the column checks fail and it runs on them).
_PLAIN_DEFAULTS = tuple(int(v) if isinstance(v, IntEnum) else v for v in DEFAULTS)


def _validate_all(events: list[Any], build: bool = True) -> list[Any] | None:
    """Validate a whole batch column by column (C-level loops instead of per-event Python).

    Accepts exactly what :func:`validate_event` accepts; returns None when any check
    fails, and the caller then validates event by event for the precise error. Returns
    :class:`Event` tuples, or with ``build=False`` the padded raw lists.
    """
    if not events:
        return []
    if set(map(type, events)) != {list}:
        return None
    lengths = set(map(len, events))
    if min(lengths) < MIN_FIELDS or max(lengths) > FIELD_COUNT:
        return None
    # Pad first so every column exists (validate_event pads too; defaults are valid values).
    if min(lengths) < FIELD_COUNT:
        for e in events:
            if len(e) < FIELD_COUNT:
                e.extend(_PLAIN_DEFAULTS[len(e):])
    columns = list(zip(*events))
    try:
        for i in _STR_COLUMNS:
            "".join(columns[i])  # raises TypeError unless every value is a str
    except TypeError:
        return None
    for i, allowed in _OTHER_COLUMNS:
        if not set(map(type, columns[i])) <= allowed:
            return None
    if not set(columns[0]) <= _EVENT_TYPES or not all(columns[3]) or not all(columns[4]):
        return None
    for i, lo, hi in _RANGED:
        if min(columns[i]) < lo or max(columns[i]) > hi:
            return None
    if not set(columns[_STATUS]) <= _STATUSES or not set(columns[_TX_STATE]) <= _TX_STATES:
        return None
    for props in columns[_PROPS]:
        if props is not None and (
            len(props) > MAX_PROPS or not all(type(k) is str and type(v) is str for k, v in props.items())
        ):
            return None
    for pairs in columns[_RAW_HEADERS]:
        if pairs is not None and not _pairs_ok(pairs):
            return None
    return [_new_tuple(Event, e) for e in events] if build else events


def _pairs_ok(pairs: list[Any]) -> bool:
    """raw_headers: at most MAX_RAW_HEADERS [str, bytes] pairs, names (UTF-8) and values MAX_RAW_HEADERS_BYTES in all."""
    if len(pairs) > MAX_RAW_HEADERS:
        return False
    size = 0
    for pair in pairs:
        if type(pair) is not list or len(pair) != 2 or type(pair[0]) is not str or type(pair[1]) is not bytes:
            return False
        size += len(pair[0].encode()) + len(pair[1])
    return size <= MAX_RAW_HEADERS_BYTES


def _raise_out_of_range(raw: list[Any], index: int) -> None:
    """Raise ``bad_field`` naming the first integer of ``raw`` outside its range (:data:`INT_RANGES`)."""
    for i, lo, hi in _RANGED:
        if i < len(raw) and not lo <= raw[i] <= hi:
            raise WireError("bad_field", f"event {index}: {Event._fields[i]} out of range [{lo}, {hi}]")


_PADDING = tuple(_PLAIN_DEFAULTS[n:] for n in range(FIELD_COUNT + 1))
"""What an event of each length lacks: its trailing fields' (plain) defaults."""


def validate_event(raw: Any, index: int = 0) -> Event:
    """Check one decoded event array and return it as an :class:`Event` (defaults filled in)."""
    if type(raw) is not list or not MIN_FIELDS <= len(raw) <= FIELD_COUNT:
        raise WireError("bad_event", f"event {index}: an array of {MIN_FIELDS}..{FIELD_COUNT} fields")
    n = len(raw)
    if tuple(map(type, raw)) != _TYPES_BY_LEN[n]:
        for i, value in enumerate(raw):
            if type(value) is not _TYPES[i] and not (value is None and i in _NULLABLE):
                name = Event._fields[i]
                raise WireError("bad_field", f"event {index}: {name} must be {_TYPES[i].__name__}")
    if raw[0] not in _EVENT_TYPES:
        raise WireError("bad_field", f"event {index}: unknown event type {raw[0]!r}")
    if not raw[3] or not raw[4]:
        raise WireError("missing_field", f"event {index}: topic and msg_id are required")
    keyed = _KEYED_BY_LEN[n](raw)
    if min(keyed) < -1 or max(keyed) > MAX_INT or raw[1] < 0 or max(_TIMES_BY_LEN[n](raw)) > MAX_TIME_MS:
        _raise_out_of_range(raw, index)
    if n > _PLAIN_INTS[0]:
        for i in _PLAIN_INTS:
            if i < n and not MIN_INT <= raw[i] <= MAX_INT:
                _raise_out_of_range(raw, index)
    if n > 14:
        if raw[14] not in _STATUSES:
            raise WireError("bad_field", f"event {index}: unknown status {raw[14]!r}")
        if n > 21 and raw[21] not in _TX_STATES:
            raise WireError("bad_field", f"event {index}: unknown tx_state {raw[21]!r}")
        if n > 18 and raw[18] is not None:
            props = raw[18]
            if len(props) > MAX_PROPS or not all(type(k) is str and type(v) is str for k, v in props.items()):
                raise WireError("bad_field", f"event {index}: props must map at most {MAX_PROPS} strings to strings")
    if n > _BODY_FLAGS:
        if not 0 <= raw[_BODY_FLAGS] <= BODY_FLAGS:
            _raise_out_of_range(raw, index)
        if n > _RAW_HEADERS and raw[_RAW_HEADERS] is not None and not _pairs_ok(raw[_RAW_HEADERS]):
            raise WireError("bad_field", f"event {index}: raw_headers must be at most {MAX_RAW_HEADERS} "
                                         f"[str, bytes] pairs of {MAX_RAW_HEADERS_BYTES} bytes in all")
    if n < FIELD_COUNT:
        raw.extend(DEFAULTS[n:])
    return _new_tuple(Event, raw)


# -- the rules of the collector's C validator ------------------------------------------------
# collector/wirecheck/_wirecheck.c walks the msgpack bytes instead of building objects. It knows
# nothing of the format by itself: the collector configures it with these rules, so this module
# stays the one definition of the wire format.
_NONEMPTY = frozenset(Event._fields.index(f) for f in ("topic", "msg_id"))  # see validate_event
_COLUMN_KINDS = {int: "int", str: "str", bytes: "bin", dict: "map", list: "pairs"}  # list: raw_headers


def fast_path_rules() -> dict[str, Any]:
    """The arguments of ``_wirecheck.configure``: the limits, the envelope's ranges and,
    per event position, (kind, nullable, nonempty, (lo, hi) or None, enum members or None)."""
    enums = {0: _EVENT_TYPES, _STATUS: _STATUSES, _TX_STATE: _TX_STATES}
    ranges = {i: (lo, hi) for i, lo, hi in _RANGED}
    columns = tuple(
        (
            _COLUMN_KINDS[t], i in _NULLABLE, i in _NONEMPTY, ranges.get(i),
            tuple(sorted(enums[i])) if i in enums else None,
        )
        for i, t in enumerate(_TYPES)
    )
    return {"limits": dict(_UNPACK_LIMITS), "versions": (1, SCHEMA_VERSION), "max_int": MAX_INT,
            "max_sent_ms": MAX_TIME_MS, "min_fields": MIN_FIELDS, "columns": columns, "max_props": MAX_PROPS,
            "max_pairs": MAX_RAW_HEADERS, "max_pairs_bytes": MAX_RAW_HEADERS_BYTES}


# -- kept bodies and records --------------------------------------------------------------------


def advertised() -> str:
    """The value of :data:`WIRE_HEADER` a collector reading this format answers with."""
    return f"fields={FIELD_COUNT}"


def accepted_fields(value: str | None) -> int | None:
    """The event fields a collector takes, from its :data:`WIRE_HEADER` value (None: no header, or one
    this code cannot read)."""
    if not value:
        return None
    for part in value.replace(",", ";").split(";"):
        name, _, number = part.strip().partition("=")
        if name == "fields" and number.isdigit():
            return min(int(number), FIELD_COUNT)
    return None


def body_bytes(event: Event) -> bytes | None:
    """The kept body as the app's redaction left it (inflated when :data:`BODY_ZLIB`), None when none was kept;
    :class:`WireError` ``bad_body`` when a compressed body does not inflate to at most :data:`MAX_BODY_LEN`
    bytes (the collector does not inflate bodies at ingest)."""
    body = event.body
    if body is None or not event.body_flags & BODY_ZLIB:
        return body
    inflater = zlib.decompressobj()
    try:
        data = inflater.decompress(body, MAX_BODY_LEN + 1)
    except zlib.error as exc:
        raise WireError("bad_body", f"the compressed body does not inflate: {exc}") from None
    if len(data) > MAX_BODY_LEN or not inflater.eof or inflater.unused_data:
        raise WireError("bad_body", f"the compressed body is not one zlib stream of at most {MAX_BODY_LEN} bytes")
    return data


_AMQP_DECIMAL = 1  # msgpack ext code of an AMQP decimal in raw_headers values (its str)


def amqp_header_bytes(value: Any) -> bytes:
    """An AMQP ``headers`` table value as kept in raw_headers: its msgpack encoding (str, bytes, int, float,
    bool, None, lists and tables as themselves, a datetime as msgpack's Timestamp, a Decimal as ext 1 holding
    its str); :func:`amqp_header_value` reads it back.  Raises TypeError for any other type."""
    return msgpack.packb(value, use_bin_type=True, datetime=True, default=_amqp_default)


def amqp_header_value(data: bytes) -> Any:
    """The AMQP table value :func:`amqp_header_bytes` encoded (datetimes come back in UTC)."""
    return msgpack.unpackb(data, raw=False, timestamp=3, ext_hook=_amqp_ext, strict_map_key=False)


def _amqp_default(value: Any) -> Any:
    if isinstance(value, decimal.Decimal):
        return msgpack.ExtType(_AMQP_DECIMAL, str(value).encode())
    if isinstance(value, datetime.datetime) and value.tzinfo is None:  # pika's timestamps are naive UTC
        return value.replace(tzinfo=datetime.UTC)
    raise TypeError(f"an AMQP header value of type {type(value).__name__}")


def _amqp_ext(code: int, data: bytes) -> Any:
    if code == _AMQP_DECIMAL:
        return decimal.Decimal(data.decode())
    return msgpack.ExtType(code, data)
