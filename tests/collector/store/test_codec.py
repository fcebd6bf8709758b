"""Message cells (collector/store/codec.py) decode to exactly what was indexed, in layout 3 and in
layout 2 (a store upgraded in place), and index rows filed by several events of one message are one cell."""

from __future__ import annotations

import hashlib
from typing import Any

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from index_helpers import CONSUMER, PRODUCER, consumed, ev, message

from collector.index.rows import rows_for
from collector.store import codec, keys, schema
from collector.store.errors import StoredValueError
from tracehook.wire import (
    FIELD_COUNT,
    INT_RANGES,
    MAX_TIME_MS,
    MIN_FIELDS,
    Event,
    EventType,
    Status,
    TxState,
    trim,
    validate_event,
)

pytestmark = pytest.mark.fallback

# Ids as tracehook makes them (lower-case hex) and as other clients do: odd length, upper case, other text.
ids = st.one_of(st.text(alphabet="0123456789abcdef", max_size=40), st.text(alphabet="0123456789abcdefABCDEF -g",
                                                                          max_size=40), st.text(max_size=12))
times = st.one_of(st.sampled_from([-1, 0, 1, MAX_TIME_MS]), st.integers(min_value=-1, max_value=MAX_TIME_MS))


@given(msg_id=ids.filter(bool), request_id=ids, trace_id=ids, span_id=ids, broker_msg_id=ids,
       time_ms=times.filter(lambda t: t >= 0), born_ms=times, store_ms=times, type_=st.sampled_from(list(EventType)))
def test_stored_events_decode_to_the_indexed_event(msg_id, request_id, trace_id, span_id, broker_msg_id,
                                                   time_ms, born_ms, store_ms, type_) -> None:
    event = ev(type_, time_ms, "g", "t", msg_id, request_id=request_id, trace_id=trace_id, span_id=span_id,
               broker_msg_id=broker_msg_id, born_ms=born_ms, store_ms=store_ms)
    value = codec.encode_event_value("app", "host", "client", event)
    stored = codec.decode_event_value(msg_id, value)
    assert stored == codec.StoredEvent("app", "host", "client", event)
    assert all(type(getattr(stored.event, f)) is str for f in ("msg_id", "request_id", "trace_id", "span_id"))


def test_hex_ids_are_stored_as_the_bytes_they_spell() -> None:
    hex_id, text_id = "0af" * 10 + "12", "order-" + "0" * 25 + "1"  # both 32 characters
    sizes = [len(codec.encode_event_value("a", "h", "c", ev(EventType.PUB, 5, "g", "t", "m", request_id=i)))
             for i in (hex_id, text_id)]
    assert sizes[1] - sizes[0] == 16
    # The msg_id is the row key's: no cell holds it, whatever its length.
    assert len({len(codec.encode_event_value("a", "h", "c", ev(EventType.PUB, 5, "g", "t", i))) for i in (hex_id, "m")}) == 1


def test_send_and_consume_file_a_message_in_the_same_empty_cells() -> None:
    """A consume that knew the store time files the message where its send did: the same cell, not one more."""
    (_, pub), = message("t", "m1", 1000, keys="k1", queue=3, offset=42)
    # As a consumer records it: the key, broker, queue, offset and store time read from the message.
    before, after = (e._replace(keys="k1", broker="b1") for _, e in consumed("t", "m1", 1000, "billing",
                                                                               queue=3, offset=42))
    index = {schema.KEYIDX, schema.TRACEIDX, schema.TIMEIDX, schema.QUEUEIDX, schema.SEQIDX}
    by_pub = {(t, row): dict(cols) for t, row, cols in rows_for(PRODUCER, pub) if t in index}
    by_before = {(t, row): dict(cols) for t, row, cols in rows_for(CONSUMER, before) if t in index}
    assert by_pub == by_before and len(by_pub) == 5
    assert all(cols == {b"i:": b""} for cols in by_pub.values())
    records = {t: dict(cols) for t, _, cols in rows_for(CONSUMER, before) + rows_for(CONSUMER, after)
               if t == schema.RECORDS}
    assert schema.record_positions(records[schema.RECORDS]) == [(3, 42)]
    received = [cols for t, _, cols in rows_for(CONSUMER, before) if t == schema.RECORDS]
    assert received == [{b"c:": b""}] and schema.record_positions(received[0]) == []


def _valid_field(i: int) -> st.SearchStrategy[Any]:
    """Any value the wire format accepts at event position ``i`` (validate_event checks it again)."""
    name = Event._fields[i]
    enums = {"type": EventType, "status": Status, "tx_state": TxState}
    if name in enums:
        return st.sampled_from([int(m) for m in enums[name]])
    if name in INT_RANGES:
        lo, hi = INT_RANGES[name]
        return st.integers(min_value=lo, max_value=hi)
    if name == "props":
        return st.none() | st.dictionaries(st.text(max_size=4), st.text(max_size=4), max_size=3)
    if name in ("body", "raw_key"):
        return st.none() | st.binary(max_size=8)
    if name == "raw_headers":
        return st.none() | st.lists(st.tuples(st.text(max_size=4), st.binary(max_size=4)).map(list), max_size=3)
    return ids.filter(bool) if name in ("topic", "msg_id") else ids


def _without_body(event: Event) -> Event:
    return event._replace(body=None, body_flags=0, raw_key=None, raw_headers=None)


@st.composite
def _valid_event(draw: st.DrawFn) -> Event:
    return validate_event([draw(_valid_field(i)) for i in range(draw(st.integers(MIN_FIELDS, FIELD_COUNT)))])


_senders = st.tuples(st.text(max_size=4), st.text(max_size=4), st.text(max_size=4))


@given(st.lists(st.tuples(_valid_event(), _senders, st.booleans()), max_size=4), ids.filter(bool))
def test_the_unvalidated_read_back_gives_what_the_validated_one_does(
        drawn: list[tuple[Event, tuple[str, str, str], bool]], msg_id: str) -> None:
    """Any events the wire format accepts, of any length, as the indexer stores them (layout 3, or layout 2
    in a store upgraded in place): ``decode_events`` (the rollups' read-back) gives exactly the events
    indexed and ``decode_event_value(...).event`` of each, value for value and type for type."""
    events = [(e._replace(msg_id=msg_id), sender, old) for e, sender, old in drawn]  # one message's events
    values = [(codec.encode_event_value_v2 if old else codec.encode_event_value)(*sender, e) for e, sender, old in events]
    validated = [codec.decode_event_value(msg_id, v) for v in values]
    assert validated == [codec.StoredEvent(*sender, _without_body(e)) for e, sender, _ in events]
    trusted = codec.decode_events(msg_id, values)
    assert trusted == [_without_body(e) for e, _, _ in events]
    assert [[type(v) for v in e] for e in trusted] == [[type(v) for v in s.event] for s in validated]
    assert all(type(e) is Event for e in trusted)


@settings(max_examples=50)
@given(_valid_event(), _senders)
def test_a_cell_leaves_out_the_msg_id_and_keeps_its_layout_2_qualifier(event: Event, sender: tuple[str, str, str]) -> None:
    """Layout 3 values are layout 2's without the msg_id (and one array header): the qualifier stays
    the hash of the layout 2 value, so an event indexed again after an in-place upgrade overwrites its old cell."""
    qualifier, value = codec.encode_event(*sender, event)
    old = codec.encode_event_value_v2(*sender, event)
    assert qualifier == hashlib.blake2b(old, digest_size=8).digest() == codec.event_id(old)
    assert value == codec.encode_event_value(*sender, event)
    assert (codec.value_layout(value), codec.value_layout(old)) == (codec.LAYOUT_3, codec.LAYOUT_2)
    stored_id = msgpack.packb(codec.hex_bytes(event.msg_id), use_bin_type=True)
    n = len(trim(event))
    header = lambda items: 1 if items < 16 else 3  # noqa: E731  (msgpack's array header)
    assert len(old) - len(value) == 1 + header(n) + len(stored_id) - header(n + 2)
    assert msgpack.unpackb(value)[3:] == [v for i, v in enumerate(msgpack.unpackb(old)[3]) if i != 4]


def test_a_cell_that_is_not_an_event_value_is_a_named_error() -> None:
    good = codec.encode_event_value("a", "h", "c", ev(EventType.PUB, 5, "g", "t", "m"))
    for bad in (b"", b"\x94", good[:-1], good + b"\x00", msgpack.packb([1, 2, 3, 4, 5, 6, 7]),
                msgpack.packb(["a", "h", "c", [1, 5, "g", "t", "m", 1.5]])):
        with pytest.raises(StoredValueError, match="message 'm'"):
            codec.decode_event_value("m", bad)


@given(st.lists(st.text(max_size=20), max_size=20))
def test_message_rows_are_the_message_row_of_each_id(msg_ids: list[str]) -> None:
    """The read-back's uncached bulk form: the same keys, in order, as the cached one and as the layout spells them."""
    rows = schema.message_rows(msg_ids)
    assert rows == [schema.message_row(m) for m in msg_ids]
    assert rows == [keys.pack((hashlib.blake2b(m.encode("utf-8"), digest_size=4).digest(), m)) for m in msg_ids]
