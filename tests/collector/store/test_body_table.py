"""The bodies table on the embedded store: which body a message shows, inflation limits, erasure
against re-indexing, and that a body changes nothing of the trace's cells."""

from __future__ import annotations

import zlib

import pytest

from collector.index.indexer import index_records
from collector.index.rows import rows_for
from collector.store import bodies, codec, open_store, schema
from collector.store.reader import TraceQuery
from tracehook import wire
from tracehook.wire import BODY_TRUNCATED, BODY_ZLIB, BatchHeader, EventType

HEADER = BatchHeader("c", 1, "shop", "host")
T = 1_700_000_000_000


def _ev(etype: int, msg_id: str, body: bytes | None, topic: str = "sms", **fields: object) -> wire.Event:
    return wire.Event(*wire.make_event(etype, T, "g", topic, msg_id, body=body, **fields))


@pytest.fixture
def store(tmp_path):  # type: ignore[no-untyped-def]
    s = open_store(f"local:{tmp_path / 'i.sqlite3'}")
    yield s
    s.close()


def test_the_sends_body_wins_over_a_consumes(store) -> None:  # type: ignore[no-untyped-def]
    index_records(store, [(HEADER, _ev(EventType.SUB_BEFORE, "m", b"seen by consumer", request_id="r"))])
    assert bodies.read_body(store, "m").kept.body == b"seen by consumer"  # type: ignore[union-attr]
    index_records(store, [(HEADER, _ev(EventType.PUB, "m", b"as sent"))])
    assert bodies.read_body(store, "m").kept.body == b"as sent"  # type: ignore[union-attr]
    assert bodies.read_body(store, "other") == bodies.BodyLookup()
    query = TraceQuery(store)  # the message page's one call: the trace and its body together
    message = query.get_message("m")
    assert message is not None and message.trace == query.get_trace("m") and message.body.kept.body == b"as sent"
    assert query.get_message("other") is None


def test_the_trace_cells_are_the_same_with_or_without_a_body() -> None:
    plain = _ev(EventType.PUB, "m", None, body_len=9)
    with_body = _ev(EventType.PUB, "m", b"123456789", body_len=9, body_flags=BODY_TRUNCATED, raw_key=b"k",
                    raw_headers=[["h", b"v"]])
    rows = {t: (r, c) for t, r, c in rows_for(HEADER, with_body)}
    assert {t: (r, c) for t, r, c in rows_for(HEADER, plain)} == {t: v for t, v in rows.items() if t != schema.BODIES}
    assert codec.decode_event_value("m", next(iter(rows[schema.MESSAGES][1].values()))).event == plain
    kept = bodies.decode_body(next(iter(rows[schema.BODIES][1].values())))
    assert (kept.body, kept.flags, kept.raw_key, kept.raw_headers, kept.topic) == (
        b"123456789", BODY_TRUNCATED, b"k", [["h", b"v"]], "sms")


def test_inflating_is_capped_and_a_bad_stream_is_marked() -> None:
    bomb = bodies.KeptBody("sms", T, BODY_ZLIB, zlib.compress(b"\0" * 10**6), 10**6, None, None)
    plain, truncated = bomb.plain()
    assert plain == b"\0" * bodies.MAX_PLAIN_BYTES and truncated
    bad = bodies.KeptBody("sms", T, BODY_ZLIB, b"not zlib", 8, None, None)
    assert bad.plain() == (None, False) and bad.to_json()["body_corrupt"] is True
    ok = bodies.KeptBody("sms", T, BODY_ZLIB | BODY_TRUNCATED, zlib.compress(b"abc"), 99, None, None)
    assert ok.to_json() == {"body": b"abc".hex(), "body_len": 99, "body_truncated": True, "raw_key": None,
                            "raw_headers": None}


def test_an_erased_body_indexed_again_is_not_served_and_erased_again(store) -> None:  # type: ignore[no-untyped-def]
    events = [(HEADER, _ev(EventType.PUB, m, b"secret " + m.encode(), topic=t)) for m, t in
              (("a", "sms"), ("b", "sms"), ("c", "orders"))]
    index_records(store, events)
    assert bodies.erase_topic(store, "sms") == 2
    assert [bodies.read_body(store, m).erased for m in "abc"] == [True, True, False]
    index_records(store, events)  # a re-index from a trace log that still holds them
    assert bodies.read_body(store, "a") == bodies.BodyLookup(erased=True)
    assert bodies.erase_messages(store, ["a", "b", "c", "zzz"]) == 3
    assert not any(b"secret" in v for _, cols in store.scan(schema.BODIES, b"", b"\xff") for v in cols.values())
    assert store.get_row(schema.MESSAGES, schema.message_row("a"))  # the trace stays
