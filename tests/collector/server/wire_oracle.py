"""An independent reading of the batch wire format: the ingest fuzz's oracle.

Plain ``msgpack.unpackb`` with its default settings, then the schema written out here by hand
from the format's documentation (``tracehook/wire.py``: the module docstring, the limits and
the fields of ``Event``; docs/collector.md: the 400 reasons). Nothing of the product's decoder
or validator is imported, so a verdict that agrees with ``check_body`` is a second opinion,
not the same code asked twice.

A body may break several rules at once and the product names "the first problem" in an
order of its own, so the oracle answers with the set of reasons it would accept: every
problem of the first stage that has one (unpacking, then the envelope, then the first bad
event).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, NamedTuple

import msgpack

MAX_INT = 2**63 - 1  # "integers travel as signed 64-bit values"
MIN_INT = -(2**63)
SCHEMA_VERSIONS = range(1, 2)  # batch versions 1..1 are known
MIN_FIELDS, FIELD_COUNT = 5, 28
MAX_PROPS = 64
MAX_HEADERS, MAX_HEADERS_BYTES = 64, 64 * 1024  # raw_headers: pairs, and bytes of names and values

# What the unpacker refuses anywhere in a body (reason bad_msgpack), as wire.py documents it.
MAX_STR_BYTES = 16 * 1024
MAX_BIN_BYTES = 64 * 1024
MAX_ARRAY_LEN = 100_000  # MAX_EVENTS_PER_BATCH
MAX_MAP_LEN = 1024
MAX_EXT_BYTES = 0

MAX_TIME = 253_402_300_799_999  # "no later than the end of the year 9999" (9999-12-31T23:59:59.999Z)
KEYED = (-1, MAX_INT)  # queue and offset: -1 ("unknown") up to 64-bit signed
TIME = (0, MAX_TIME)  # time_ms: 0 up to the end of 9999
OTHER_TIME = (-1, MAX_TIME)  # born_ms, store_ms: -1 and 0 unknown
ANY_INT = (MIN_INT, MAX_INT)


class Field(NamedTuple):
    name: str
    kind: type
    nullable: bool = False
    required: bool = False  # a non-empty string
    bounds: tuple[int, int] | None = None
    members: frozenset[int] | None = None


# Event's fields in wire order (wire.Event): an event is an array of the first 5..28 of them.
EVENT_FIELDS: tuple[Field, ...] = (
    Field("type", int, bounds=ANY_INT, members=frozenset({1, 2, 3, 4, 5, 6})),  # PUB .. DEAD, REPLAY
    Field("time_ms", int, bounds=TIME),
    Field("group", str),
    Field("topic", str, required=True),
    Field("msg_id", str, required=True),
    Field("broker_msg_id", str),
    Field("keys", str),
    Field("tags", str),
    Field("broker", str),
    Field("queue", int, bounds=KEYED),
    Field("offset", int, bounds=KEYED),
    Field("born_ms", int, bounds=OTHER_TIME),
    Field("store_ms", int, bounds=OTHER_TIME),
    Field("cost_us", int, bounds=ANY_INT),
    Field("status", int, bounds=ANY_INT, members=frozenset(range(6))),  # OK .. UNKNOWN
    Field("error", str),
    Field("retry", int, bounds=ANY_INT),
    Field("body_len", int, bounds=ANY_INT),
    Field("props", dict, nullable=True),
    Field("request_id", str),
    Field("tx_id", str),
    Field("tx_state", int, bounds=ANY_INT, members=frozenset({0, 1, 2})),  # UNKNOWN, COMMIT, ROLLBACK
    Field("body", bytes, nullable=True),
    Field("trace_id", str),
    Field("span_id", str),
    Field("body_flags", int, bounds=(0, 3)),  # TRUNCATED 1 | ZLIB 2
    Field("raw_key", bytes, nullable=True),
    Field("raw_headers", list, nullable=True),
)
assert len(EVENT_FIELDS) == FIELD_COUNT


class Verdict(NamedTuple):
    """``reasons`` empty: a valid batch with this header and event count."""

    reasons: frozenset[str]
    header: tuple[str, int, str, str, int, dict[str, int]] | None = None
    events: int = 0


def verdict(body: bytes) -> Verdict:
    """What the collector must answer for ``body``."""
    try:
        obj = msgpack.unpackb(body)
    except msgpack.ExtraData as extra:
        return Verdict(frozenset({"bad_msgpack" if _over_limits(extra.unpacked) else "trailing_bytes"}))
    except (ValueError, msgpack.UnpackException):
        return Verdict(frozenset({"bad_msgpack"}))
    if _over_limits(obj):
        return Verdict(frozenset({"bad_msgpack"}))
    envelope = _envelope_problems(obj)
    if envelope:
        return Verdict(envelope)
    for event in obj[7]:
        problems = _event_problems(event)
        if problems:
            return Verdict(problems)
    version, client_id, seq, app, host, sent_ms, stats, events = obj[:8]
    return Verdict(frozenset(), (client_id, seq, app, host, sent_ms, stats), len(events))


def _values(obj: Any) -> Iterator[Any]:
    """Every value in ``obj``, containers and map keys included (no recursion: msgpack nests 1,024 deep)."""
    stack = [obj]
    while stack:
        value = stack.pop()
        yield value
        if type(value) is list:
            stack.extend(value)
        elif type(value) is dict:
            stack.extend(value.keys())
            stack.extend(value.values())


def _over_limits(obj: Any) -> bool:
    for value in _values(obj):
        kind = type(value)
        if kind is str and len(value.encode()) > MAX_STR_BYTES:
            return True
        if kind is bytes and len(value) > MAX_BIN_BYTES:
            return True
        if kind is list and len(value) > MAX_ARRAY_LEN:
            return True
        if kind is dict and len(value) > MAX_MAP_LEN:
            return True
        if kind is msgpack.Timestamp or (kind is msgpack.ExtType and len(value.data) > MAX_EXT_BYTES):
            return True
    return False


def _is_int(value: Any, bounds: tuple[int, int]) -> bool:
    return type(value) is int and bounds[0] <= value <= bounds[1]  # a bool is not an int here


def _envelope_problems(obj: Any) -> frozenset[str]:
    """batch = [version, client_id, seq, app, host, sent_ms, client_stats, events] (fields may be appended)."""
    if type(obj) is not list or len(obj) < 8:
        return frozenset({"bad_batch"})
    version, client_id, seq, app, host, sent_ms, stats, events = obj[:8]
    problems = set()
    if type(version) is not int or version not in SCHEMA_VERSIONS:
        problems.add("unknown_version")
    if any(type(v) is not str for v in (client_id, app, host)) or client_id == "":
        problems.add("bad_batch")
    if not _is_int(seq, (0, MAX_INT)) or not _is_int(sent_ms, TIME):
        problems.add("bad_batch")
    if type(stats) is not dict or not all(type(k) is str and _is_int(v, (0, MAX_INT)) for k, v in stats.items()):
        problems.add("bad_batch")
    if type(events) is not list:
        problems.add("bad_batch")
    return frozenset(problems)


def _event_problems(event: Any) -> frozenset[str]:
    if type(event) is not list or not MIN_FIELDS <= len(event) <= FIELD_COUNT:
        return frozenset({"bad_event"})
    problems = set()
    for spec, value in zip(EVENT_FIELDS, event, strict=False):
        if value is None and spec.nullable:
            continue
        if type(value) is not spec.kind:
            problems.add("bad_field")
        elif spec.required and value == "":
            problems.add("missing_field")
        elif spec.bounds is not None and not _is_int(value, spec.bounds):
            problems.add("bad_field")
        elif spec.members is not None and value not in spec.members:
            problems.add("bad_field")
        elif spec.kind is dict and (len(value) > MAX_PROPS or not all(
                type(k) is str and type(v) is str for k, v in value.items())):
            problems.add("bad_field")
        elif spec.kind is list and not _headers_ok(value):
            problems.add("bad_field")
    return frozenset(problems)


def _headers_ok(pairs: list[Any]) -> bool:
    """raw_headers: [name (str), value (bytes)] pairs, at most 64, 64 KiB of UTF-8 names and values together."""
    if len(pairs) > MAX_HEADERS:
        return False
    if not all(type(p) is list and len(p) == 2 and type(p[0]) is str and type(p[1]) is bytes for p in pairs):
        return False
    return sum(len(name.encode()) + len(value) for name, value in pairs) <= MAX_HEADERS_BYTES
