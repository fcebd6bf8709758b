"""Layout 2's compact cells: stored events decode to exactly what was indexed, and index rows
filed by several events of one message are one cell."""

from __future__ import annotations

import hashlib
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from index_helpers import CONSUMER, PRODUCER, consumed, ev, message

from collector.store import keys, schema
from collector.store.indexer import rows_for
from tracehook.wire import (
    FIELD_COUNT,
    INT_RANGES,
    MAX_TIME_MS,
    MIN_FIELDS,
    Event,
    EventType,
    Status,
    TxState,
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
    value = schema.encode_event_value("app", "host", "client", event)
    stored = schema.decode_event_value(value)
    assert stored == schema.StoredEvent("app", "host", "client", event)
    assert all(type(getattr(stored.event, f)) is str for f in ("msg_id", "request_id", "trace_id", "span_id"))


def test_hex_ids_are_stored_as_the_bytes_they_spell() -> None:
    hex_id, text_id = "0af" * 10 + "12", "order-" + "0" * 25 + "1"  # both 32 characters
    sizes = [len(schema.encode_event_value("a", "h", "c", ev(EventType.PUB, 5, "g", "t", i)))
             for i in (hex_id, text_id)]
    assert sizes[1] - sizes[0] == 16


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


@given(st.lists(st.tuples(_valid_event(), st.text(max_size=4), st.text(max_size=4), st.text(max_size=4)),
                max_size=4))
def test_the_unvalidated_read_back_gives_what_the_validated_one_does(
        drawn: list[tuple[Event, str, str, str]]) -> None:
    """Any events the wire format accepts, of any length, as the indexer stores them: ``decode_events``
    (the rollups' read-back) gives exactly ``decode_event_value(...).event`` of each, value for value and
    type for type."""
    values = [schema.encode_event_value(app, host, client_id, event) for event, app, host, client_id in drawn]
    validated = [schema.decode_event_value(v) for v in values]
    # A cell never holds the body fields: they live in the bodies table (collector.store.bodies).
    assert validated == [schema.StoredEvent(app, host, client_id, _without_body(event))
                         for event, app, host, client_id in drawn]
    trusted = schema.decode_events(values)
    assert trusted == [s.event for s in validated]
    assert [[type(v) for v in e] for e in trusted] == [[type(v) for v in s.event] for s in validated]
    assert all(type(e) is Event for e in trusted)


@given(st.lists(st.text(max_size=20), max_size=20))
def test_message_rows_are_the_message_row_of_each_id(msg_ids: list[str]) -> None:
    """The read-back's uncached bulk form: the same keys, in order, as the cached one and as the layout spells them."""
    rows = schema.message_rows(msg_ids)
    assert rows == [schema.message_row(m) for m in msg_ids]
    assert rows == [keys.pack((hashlib.blake2b(m.encode("utf-8"), digest_size=4).digest(), m)) for m in msg_ids]
