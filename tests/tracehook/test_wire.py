"""tracehook.wire: hypothesis round trips, and rejection of every kind of bad input with a named reason."""

from __future__ import annotations

import datetime
import zlib

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tracehook import wire
from tracehook.context import trace_id_for
from tracehook.wire import Event, EventType, Status, TxState

text = st.text(max_size=40)
nonempty = st.text(min_size=1, max_size=40)
keyed_int = st.integers(min_value=-1, max_value=wire.MAX_INT)  # queue, offset
other_time = st.integers(min_value=-1, max_value=wire.MAX_TIME_MS)  # born_ms, store_ms
small_int = st.integers(min_value=0, max_value=2**31)

events = st.builds(
    lambda *values: tuple(values),
    st.sampled_from([int(t) for t in EventType]),  # type
    st.integers(min_value=0, max_value=wire.MAX_TIME_MS),  # time_ms
    text, nonempty, nonempty,  # group, topic, msg_id
    text, text, text, text,  # broker_msg_id, keys, tags, broker
    keyed_int, keyed_int, other_time, other_time,  # queue, offset, born_ms, store_ms
    small_int,  # cost_us
    st.sampled_from([int(s) for s in Status]),
    text, small_int, small_int,  # error, retry, body_len
    st.none() | st.dictionaries(text, text, max_size=5),  # props
    text, text,  # request_id, tx_id
    st.sampled_from([int(s) for s in TxState]),
    st.none() | st.binary(max_size=64),  # body
    st.sampled_from(["", "0af7651916cd43dd8448eb211c80319c"]) | text,  # trace_id
    st.sampled_from(["", "b7ad6b7169203331"]) | text,  # span_id
    st.integers(min_value=0, max_value=wire.BODY_FLAGS),  # body_flags
    st.none() | st.binary(max_size=16),  # raw_key
    st.none() | st.lists(st.tuples(text, st.binary(max_size=16)).map(list), max_size=5),  # raw_headers
)
headers = st.builds(
    wire.BatchHeader, nonempty, st.integers(min_value=0, max_value=wire.MAX_INT), text, text,
    st.integers(min_value=0, max_value=wire.MAX_TIME_MS), st.dictionaries(text, small_int, max_size=4),
)


@given(headers, st.lists(events, max_size=20))
def test_round_trip(header, evs):
    batch = wire.decode_batch(wire.encode_batch(header, evs))
    assert batch.version == wire.SCHEMA_VERSION
    assert batch.header == header
    assert batch.events == [Event(*e) for e in evs]


@given(events)
def test_trimmed_event_decodes_to_the_same_event(ev):
    # Trailing defaults are left off the wire; decoding fills them back in.
    raw = msgpack.unpackb(wire.encode_event(ev), raw=False)
    assert len(raw) <= wire.FIELD_COUNT
    assert wire.validate_event(raw) == Event(*ev)


@given(events, st.integers(min_value=wire.MIN_FIELDS, max_value=wire.FIELD_COUNT))
def test_older_shorter_events_still_decode(ev, n):
    decoded = wire.validate_event(list(ev[:n]))
    assert decoded[:n] == ev[:n] and decoded[n:] == wire.DEFAULTS[n:]


def _batch(events_: list, **overrides) -> bytes:
    fields = dict(version=1, client_id="c", seq=1, app="a", host="h", sent_ms=0, stats={})
    fields.update(overrides)
    return msgpack.packb([*fields.values(), events_], use_bin_type=True)


GOOD = list(wire.make_event(EventType.PUB, 1, "g", "t", "m"))


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"\xc1", "bad_msgpack"),
        (msgpack.packb({"a": 1}), "bad_batch"),
        (_batch([GOOD]) + b"\x00", "trailing_bytes"),
        (_batch([GOOD], version=99), "unknown_version"),
        (_batch([GOOD], version="1"), "unknown_version"),
        (_batch([GOOD], client_id=""), "bad_batch"),
        (_batch([GOOD], seq=-1), "bad_batch"),
        (_batch([GOOD], stats={"x": -1}), "bad_batch"),
        (_batch([GOOD], sent_ms=wire.MAX_TIME_MS + 1), "bad_batch"),
        (_batch("nope"), "bad_batch"),
        (_batch([GOOD[:4]]), "bad_event"),
        (_batch([GOOD + [None] * 30]), "bad_event"),
        (_batch([["1", *GOOD[1:]]]), "bad_field"),
        (_batch([[99, *GOOD[1:]]]), "bad_field"),
        (_batch([[1, 1, "g", "", "m"]]), "missing_field"),
        (_batch([[1, 1, "g", "t", ""]]), "missing_field"),
        (_batch([[1, -5, "g", "t", "m"]]), "bad_field"),
        (_batch([[1, -1, "g", "t", "m"]]), "bad_field"),  # time_ms starts at 0 (born/store at -1)
        (_batch([[1, wire.MAX_TIME_MS + 1, "g", "t", "m"]]), "bad_field"),
        (_batch([wire.trim(wire.make_event(1, 1, "g", "t", "m", store_ms=wire.MAX_TIME_MS + 1))]), "bad_field"),
        (_batch([wire.trim(wire.make_event(1, 1, "g", "t", "m", born_ms=wire.MAX_INT))]), "bad_field"),
        (_batch([[1, 1, "g", "t", "m", "", "", "", "", -2]]), "bad_field"),
        (_batch([wire.trim(wire.make_event(1, 1, "g", "t", "m", status=42))]), "bad_field"),
        (_batch([wire.trim(wire.make_event(1, 1, "g", "t", "m", tx_state=9))]), "bad_field"),
        (_batch([wire.trim(wire.make_event(1, 1, "g", "t", "m", props={"k": 1}))]), "bad_field"),
        (_batch([[1, 1, "g", "t", "x" * (wire.MAX_STR_LEN + 1)]]), "bad_msgpack"),
    ],
)
def test_rejections_name_the_reason(data, reason):
    with pytest.raises(wire.WireError) as caught:
        wire.decode_batch(data)
    assert caught.value.reason == reason


@pytest.mark.parametrize("field", sorted(wire.INT_RANGES))
def test_each_integer_field_takes_its_whole_range_and_nothing_beyond(field):
    lo, hi = wire.INT_RANGES[field]
    i = Event._fields.index(field)

    def event(value: int) -> list:
        return [*GOOD[:i], value, *GOOD[i + 1:]]

    for value in (lo, hi):
        assert wire.decode_batch(_batch([event(value)])).events[0] == Event(*event(value))
    for value in (v for v in (lo - 1, hi + 1) if v >= wire.MIN_INT):  # msgpack holds nothing below MIN_INT
        with pytest.raises(wire.WireError) as caught:
            wire.decode_batch(_batch([event(value)]))
        assert caught.value.reason == "bad_field" and field in caught.value.detail


@settings(max_examples=300)
@given(st.binary(max_size=200))
def test_arbitrary_bytes_never_crash_the_decoder(data):
    try:
        wire.decode_batch(data)
    except wire.WireError as exc:
        assert exc.reason


@given(events)
def test_the_dispatchers_fast_packer_matches_encode_event(ev):
    from tracehook.dispatcher import event_packer

    assert event_packer()(ev) == wire.encode_event(ev)


OLD_FIELD_COUNT = 23  # the event layout before trace_id and span_id were appended


@given(headers, st.lists(events, max_size=10))
def test_old_clients_batches_decode_with_an_empty_trace_context(header, evs):
    # An older client packs at most 23 fields; its events decode with trace_id/span_id "" and
    # belong to their message's own trace, as the old client's traceparent said.
    old = [wire.trim(e[:OLD_FIELD_COUNT]) for e in evs]
    data = msgpack.packb([1, header.client_id, header.seq, header.app, header.host, header.sent_ms,
                          header.client_stats, old], use_bin_type=True)
    batch = wire.decode_batch(data)
    assert [e[:OLD_FIELD_COUNT] for e in batch.events] == [tuple(e[:OLD_FIELD_COUNT]) for e in evs]
    assert all(e.trace_id == "" and e.span_id == "" for e in batch.events)
    assert [wire.trace_id_of(e) for e in batch.events] == [trace_id_for(e[4]) for e in evs]
    assert wire.check_batch(data) == (header, len(evs))


@given(events, st.from_regex(r"[0-9a-f]{32}", fullmatch=True), st.from_regex(r"[0-9a-f]{16}", fullmatch=True))
def test_new_events_carry_their_trace_context(ev, trace_id, span_id):
    ev = ev[:OLD_FIELD_COUNT] + (trace_id, span_id)
    data = wire.encode_batch(wire.BatchHeader("c", 1), [ev])
    (decoded,) = wire.decode_batch(data).events
    assert decoded == Event(*ev) and (decoded.trace_id, decoded.span_id) == (trace_id, span_id)
    assert wire.trace_id_of(decoded) == trace_id
    assert len(msgpack.unpackb(wire.encode_event(ev), raw=False)) == wire.LEGACY_FIELD_COUNT


@given(headers, st.lists(events, max_size=10))
def test_batches_before_the_kept_record_decode_with_nothing_kept(header, evs):
    # A library older than body_flags / raw_key / raw_headers packs at most 25 fields.
    old = [wire.trim(e[:wire.LEGACY_FIELD_COUNT]) for e in evs]
    batch = wire.decode_batch(wire.encode_batch_packed(header, [msgpack.packb(e) for e in old]))
    assert [e[:wire.LEGACY_FIELD_COUNT] for e in batch.events] == [e[:wire.LEGACY_FIELD_COUNT] for e in evs]
    assert all((e.body_flags, e.raw_key, e.raw_headers) == (0, None, None) for e in batch.events)


@given(events, st.integers(min_value=wire.FIELD_COUNT, max_value=wire.FIELD_COUNT + 3))
def test_more_fields_than_known_are_refused_by_name(ev, n):
    raw = list(ev) + [None] * (n - len(ev)) + ([0] if n == wire.FIELD_COUNT else [])
    with pytest.raises(wire.WireError) as caught:
        wire.decode_batch(wire.encode_batch_packed(wire.BatchHeader("c", 1), [msgpack.packb(raw)]))
    assert caught.value.reason == "bad_event"


@given(st.binary(max_size=2048), st.sampled_from([0, wire.BODY_TRUNCATED]))
def test_a_compressed_body_reads_back_as_it_was(body, flags):
    packed = zlib.compress(body)
    ev = wire.make_event(EventType.PUB, 1, "g", "t", "m", body=packed, body_flags=flags | wire.BODY_ZLIB)
    (decoded,) = wire.decode_batch(wire.encode_batch(wire.BatchHeader("c", 1), [ev])).events
    assert wire.body_bytes(decoded) == body
    plain = Event(*wire.make_event(EventType.PUB, 1, "g", "t", "m", body=body, body_flags=flags))
    assert wire.body_bytes(plain) == body


@pytest.mark.parametrize("body", [b"not zlib", zlib.compress(b"x") + b"trailing", zlib.compress(b"x")[:-2],
                                  zlib.compress(b"\0" * (wire.MAX_BODY_LEN + 1), 9)])
def test_a_body_that_does_not_inflate_within_the_cap_is_bad_body(body):
    # The last one is a zlib bomb in miniature: 65 KiB + 1 from a few hundred bytes, refused at the cap.
    ev = Event(*wire.make_event(EventType.PUB, 1, "g", "t", "m", body=body, body_flags=wire.BODY_ZLIB))
    with pytest.raises(wire.WireError) as caught:
        wire.body_bytes(ev)
    assert caught.value.reason == "bad_body"


@pytest.mark.parametrize(("fields", "reason"), [
    (dict(body_flags=4), "body_flags out of range"), (dict(body_flags=-1), "body_flags out of range"),
    (dict(raw_key="text"), "raw_key must be bytes"), (dict(raw_headers=[["n", "v"]]), "raw_headers must be"),
    (dict(raw_headers=[["n", b"v"]] * (wire.MAX_RAW_HEADERS + 1)), "raw_headers must be"),
    (dict(raw_headers=[["é" * 100, b"v" * (wire.MAX_RAW_HEADERS_BYTES - 199)]]), "raw_headers must be"),
    (dict(raw_headers=[[b"n", b"v"]]), "raw_headers must be"), (dict(raw_headers={"n": b"v"}), "raw_headers must be"),
])
def test_hostile_kept_records_are_refused_naming_the_field(fields, reason):
    data = wire.encode_batch(wire.BatchHeader("c", 1), [wire.make_event(EventType.PUB, 1, "g", "t", "m", **fields)])
    with pytest.raises(wire.WireError) as caught:
        wire.decode_batch(data)
    assert caught.value.reason == "bad_field" and reason in caught.value.detail


def test_headers_at_the_caps_are_accepted():
    at_caps = [["é" * 100, b"v" * (wire.MAX_RAW_HEADERS_BYTES - 200)]] + [["", b""]] * (wire.MAX_RAW_HEADERS - 1)
    data = wire.encode_batch(wire.BatchHeader("c", 1), [wire.make_event(1, 1, "g", "t", "m", raw_headers=at_caps)])
    assert wire.decode_batch(data).events[0].raw_headers == at_caps


amqp_values = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(2**63), max_value=2**63 - 1) | st.floats(allow_nan=False)
    | text | st.binary(max_size=8) | st.decimals(allow_nan=False, allow_infinity=False)
    | st.datetimes(min_value=datetime.datetime(1970, 1, 1), max_value=datetime.datetime(2200, 1, 1)),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(text, inner, max_size=3), max_leaves=6)


@given(amqp_values)
def test_amqp_header_values_read_back_as_they_were(value):
    def utc(v):  # pika's timestamps are naive UTC; they read back as aware UTC ones
        if isinstance(v, datetime.datetime):
            return v.replace(tzinfo=datetime.UTC)
        if isinstance(v, list):
            return [utc(x) for x in v]
        if isinstance(v, dict):
            return {k: utc(x) for k, x in v.items()}
        return v

    assert wire.amqp_header_value(wire.amqp_header_bytes(value)) == utc(value)


@given(events, st.integers(min_value=wire.LEGACY_FIELD_COUNT, max_value=wire.FIELD_COUNT))
def test_a_stripped_event_is_what_a_narrower_collector_takes(ev, fields):
    from tracehook.bodies import strip

    narrow = strip(ev, fields)
    assert len(narrow) == fields and narrow[:22] == ev[:22] and narrow[23:] == ev[23:fields]
    # A compressed or cut body cannot be told from a whole one without body_flags: it is left off.
    assert narrow[22] == (None if fields <= wire.LEGACY_FIELD_COUNT and ev[25] else ev[22])
    assert wire.validate_event(list(narrow))[:fields] == narrow
