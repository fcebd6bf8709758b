"""The read-back's C fast path (collector.store._readback) gives exactly what the Python path gives.

``readback.py_part_events`` (``codec.decode_events`` cut down to :class:`PartEvent`) and
``schema.message_rows`` are the references: for any events the wire format accepts, as the indexer
stores them, the extension gives the same fields, value for value and type for type; for any other
bytes it gives the same or nothing (None: the caller decodes in Python).  The parts computed from
:class:`PartEvent` are checked against the full trace in test_rollup_parts.py.
"""

from __future__ import annotations

import hashlib
import pathlib

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from index_helpers import consumed, ev, message
from test_codec import _valid_event

from collector.index import readback
from collector.index.indexer import index_records
from collector.index.readback import PartEvent
from collector.index.rollup import Part, _part_values, read_parts
from collector.store import codec, keys, open_store, schema
from collector.store.model import build_trace
from tracehook.wire import Event, EventType, Status

T0 = 1_700_000_000_000 - 1_700_000_000_000 % 60_000

try:
    from collector.store import _readback
except ImportError:  # checked by test_extension_is_built
    _readback = None

_senders = st.tuples(st.text(max_size=4), st.text(max_size=4), st.text(max_size=4))


def test_extension_is_built() -> None:
    # Like collector.store._rowbuild: without a C compiler `pip install -e .[all]` leaves it out, and
    # this fails rather than skipping silently.
    assert _readback is not None, ("collector.store._readback is not built (it needs a C compiler and "
                                   "Python.h): run pip install -e '.[all]'")
    assert readback.FAST_PATH


_TYPES = [int, int, str, str, str, int, int, int, int]


def _fields(e: Event) -> PartEvent:
    """The reference, from the event itself."""
    return PartEvent(e.time_ms, e.type, e.request_id, e.group, e.topic, e.store_ms, e.born_ms, e.status, e.retry)


@settings(max_examples=200)
@given(st.lists(st.tuples(_valid_event(), _senders, st.booleans()), max_size=5))
def test_the_fields_of_any_stored_events_are_the_python_paths(
        drawn: list[tuple[Event, tuple[str, str, str], bool]]) -> None:
    """Layout 3 values, and layout 2 ones (a store upgraded in place), mixed in one row."""
    values = [(codec.encode_event_value_v2 if old else codec.encode_event_value)(*sender, event)
              for event, sender, old in drawn]
    expected = [_fields(codec.decode_event_value(e.msg_id, v).event) for v, (e, _, _) in zip(values, drawn)]
    assert readback.py_part_events(values) == expected
    found = _readback.part_events(values, PartEvent)
    # Not modelled: an int the stored difference of two times puts beyond 64 bits.
    beyond = any(not -2**63 <= e.born_ms - e.time_ms < 2**63 or not -2**63 <= e.store_ms - e.time_ms < 2**63
                 for e, _, _ in drawn)
    if found is None:
        assert beyond
    else:
        assert found == expected
        assert all(type(e) is PartEvent and [type(v) for v in e] == _TYPES for e in found)
    assert readback.part_events(values) == expected


def test_missing_fields_take_their_defaults_and_hex_request_ids_their_text() -> None:
    short = ev(EventType.SUB_BEFORE, 5, "g", "t", "m", request_id="0a1b")  # trimmed after request_id
    value = codec.encode_event_value("a", "h", "c", short)
    assert msgpack.unpackb(value)[3 + 19 - 1] == bytes.fromhex("0a1b")  # after the sender, without the msg_id
    assert _readback.part_events([value], PartEvent) == [PartEvent(5, 2, "0a1b", "g", "t", 0, 0, 0, 0)]
    shortest = codec.encode_event_value("a", "h", "c", ev(EventType.PUB, 7, "", "t", "m"))
    assert _readback.part_events([shortest], PartEvent) == [PartEvent(7, 1, "", "", "t", 0, 0, 0, 0)]


def _raw(**changes: object) -> list[object]:
    """The event array of a layout 2 value, with fields (``f<index>``) changed."""
    raw = msgpack.unpackb(codec.encode_event_value_v2("a", "h", "c", ev(
        EventType.SUB_AFTER, 100, "g", "t", "m", born_ms=90, store_ms=95, retry=1, request_id="r")))[3]
    for index, value in changes.items():
        raw[int(index[1:])] = value
    return raw


def _flat(**changes: object) -> list[object]:
    """A layout 3 value's array (the sender, then the event without its msg_id), with fields changed."""
    raw = _raw(**changes)
    return ["a", "h", "c", *raw[:4], *raw[5:]]


@pytest.mark.parametrize("stored", [
    ["a", "h", "c", _raw(f2=b"g")],  # a needed str as bin
    ["a", "h", "c", _raw(f0=True)],  # a bool where an int is needed
    ["a", "h", "c", _raw(f1=2**64 - 1)],  # an int beyond 64 bits signed
    ["a", "h", "c", _raw(f11=2**63 - 50)],  # a time that overflows once restored
    ["a", "h", "c", _raw(f18={1: "x"})],  # a map key msgpack refuses (strict_map_key)
    ["a", "h", "c", _raw(f18=msgpack.ExtType(1, b"x"))],
    ["a", "h", "c", _raw()[:4]],  # fewer fields than the wire format's minimum
    ["a", "h", "c", (_raw() + [0] * 25)[:26]],  # more than it has
    ["a", "h", "c"],
    ["a", "h", "c", _raw(), "more"],
    # The same in layout 3.
    _flat(f2=b"g"), _flat(f0=True), _flat(f1=2**64 - 1), _flat(f11=2**63 - 50), _flat(f18={1: "x"}),
    _flat(f18=msgpack.ExtType(1, b"x")), _flat()[:6], (_flat() + [0] * 25)[:28], ["a", "h", "c", 1, 2, "g"],
])
def test_values_the_indexer_never_writes_are_left_to_python(stored: list[object]) -> None:
    value = msgpack.packb(stored, use_bin_type=True)
    good = codec.encode_event_value("a", "h", "c", ev(EventType.PUB, 1, "", "t", "m"))
    assert _readback.part_events([good, value], PartEvent) is None


def test_values_cut_short_or_run_on_are_left_to_python() -> None:
    good = codec.encode_event_value("a", "h", "c", ev(EventType.PUB, 1, "", "t", "m"))
    assert _readback.part_events([good + b"\x00"], PartEvent) is None  # trailing bytes
    assert _readback.part_events([good[:-1]], PartEvent) is None  # truncated
    assert _readback.part_events([bytearray(good)], PartEvent) is None  # not bytes


@settings(max_examples=200)
@given(event=_valid_event(), cut=st.integers(0, 200), byte=st.integers(0, 255), garbage=st.binary(max_size=30))
def test_damaged_values_give_the_python_paths_fields_or_none(event: Event, cut: int, byte: int, garbage: bytes) -> None:
    value = codec.encode_event_value("a", "h", "c", event)
    damaged = [garbage, value[:cut] + bytes([byte]) + value[cut + 1:], value[:cut] + garbage]
    for v in damaged:
        found = _readback.part_events([v], PartEvent)
        if found is not None:
            assert found == readback.py_part_events([v])


_sends = _valid_event().map(lambda e: e._replace(type=int(EventType.PUB)))


@settings(max_examples=200)
@given(st.lists(st.one_of(st.lists(_sends, min_size=1, max_size=1), st.lists(_valid_event() | _sends, max_size=3)),
                max_size=4))
def test_the_parts_of_message_rows_are_the_python_paths(rows_events: list[list[Event]]) -> None:
    """``parts``: a message only sent gets its part values straight from C (every time and status a send
    can have), any other its fields; both are what ``_part_values`` gives for its decoded events."""
    rows = [{b"s:" + q: v for q, v in (codec.encode_event("a", "h", "c", e) for e in events)}
            for events in rows_events]
    found = readback.parts(rows)
    assert len(found) == len(rows)
    for got, columns in zip(found, rows):
        expected = _part_values(codec.decode_events("m", list(columns.values())))
        assert (got if type(got) is dict else _part_values(got, readback.ORDER)) == expected
        if len(columns) == 1 and codec.decode_events("m", list(columns.values()))[0].type == EventType.PUB:
            assert type(got) is dict or not all(-2**63 <= t < 2**63 for t in _stored_times(columns))
    assert _readback.parts([None, {}], PartEvent, 2, schema.MINUTE_MS) == [None, []]


def _stored_times(columns: dict[bytes, bytes]) -> list[int]:
    """The time and the stored differences of the born and store times (what the extension reads as 64-bit ints)."""
    flat = msgpack.unpackb(next(iter(columns.values())))  # layout 3: the sender, then the event without its msg_id
    return [flat[3 + 1], *flat[3 + 11 - 1:3 + 13 - 1]]


@given(st.lists(st.text(max_size=20), max_size=20))
def test_message_rows_are_the_layouts(msg_ids: list[str]) -> None:
    expected = [keys.pack((hashlib.blake2b(m.encode("utf-8"), digest_size=4).digest(), m)) for m in msg_ids]
    assert _readback.message_rows(msg_ids) == expected
    assert readback.message_rows(msg_ids) == expected
    in_order = sorted(zip(expected, msg_ids))
    for found in (_readback.sorted_message_rows(msg_ids), readback.sorted_message_rows(iter(msg_ids))):
        assert found == ([row for row, _ in in_order], [m for _, m in in_order])


def test_message_rows_of_ids_it_cannot_encode_are_left_to_python() -> None:
    assert _readback.message_rows(["m", "\ud800"]) is None
    assert _readback.message_rows(["m", b"m"]) is None
    assert _readback.sorted_message_rows({"m", "\ud800"}) is None
    with pytest.raises(UnicodeEncodeError):
        readback.message_rows(["\ud800"])


def test_read_parts_gives_the_same_parts_with_and_without_the_extension(
        tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The whole read-back, over a store: messages only sent (the C shortcut), sent and consumed, consumed
    without a traced send, a failed send, and an id that is not there; the Python path is the reference,
    and each part is the full trace's."""
    store = open_store(f"local:{tmp_path / 'index.sqlite3'}")
    records = [*message("t", "sent", T0), *message("t", "failed", T0 + 61_000, status=Status.FAILED),
               *message("u", "both", T0 + 5), *consumed("u", "both", T0 + 5, "billing"),
               *consumed("u", "orphan", T0 + 7, "billing", status=None)]
    records += [r for i in range(50) for r in message("t", f"m{i:02x}", T0 + 1000 * i)]
    index_records(store, records, touched=set())
    msg_ids = {e.msg_id for _, e in records} | {"missing"}
    with_c = read_parts(store, msg_ids, chunk=7)
    monkeypatch.setattr(readback, "_readback", None)
    assert read_parts(store, msg_ids, chunk=7) == with_c
    for msg_id in msg_ids:
        stored = [codec.decode_event_value(msg_id, v) for v in store.get_row(schema.MESSAGES, schema.message_row(msg_id)).values()]
        trace = build_trace(msg_id, stored)
        parts = {} if trace is None or trace.placed_ms is None else {
            (trace.topic, schema.minute_of(trace.placed_ms)): Part.of(trace).encode()}
        assert with_c[msg_id] == (len(stored), parts)
    store.close()
