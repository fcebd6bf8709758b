"""Kept bodies (issue 43): per topic, cut and flagged, compressed, with the record's key and headers for
replay; sent only to collectors that advertise the fields (a stub that answers as an older collector)."""

from __future__ import annotations

import os
import zlib

import pytest

import tracehook
from tracehook import wire
from tracehook.config import TracerConfig
from tracehook.errors import ConfigError

HEADERS = [("tracehook-msg-id", b"m"), ("orderId", b"42")]


def delivered(tracer: tracehook.Tracer, stub) -> dict[str, wire.Event]:
    assert tracer.flush(10)
    return {e.msg_id: e for e in stub.events()}


def test_bodies_are_kept_only_for_the_named_topics(stub, make_tracer, accounted):
    tracer = make_tracer(stub.url, body_topics={"orders"})
    tracer.record_send("orders", "kept", body=b"{\"id\": 1}", raw_key=b"k1", raw_headers=HEADERS)
    tracer.record_send("payments", "other", body=b"card", raw_key=b"k2", raw_headers=HEADERS)
    events = delivered(tracer, stub)
    kept, other = events["kept"], events["other"]
    assert (wire.body_bytes(kept), kept.body_flags, kept.raw_key) == (b"{\"id\": 1}", 0, b"k1")
    assert kept.raw_headers == [list(h) for h in HEADERS] and kept.body_len == 9
    assert (other.body, other.raw_key, other.raw_headers, other.body_len) == (None, None, None, 0)
    stats = accounted(tracer.stats())
    assert stats["bodies"]["kept"] == 1 and stats["stripped"] == {"events": 0, "bodies": 0}


def test_a_long_body_keeps_its_first_bytes_compressed_and_flagged(stub, make_tracer):
    body = b"order-line;" * 500  # 5,500 bytes, compresses well
    tracer = make_tracer(stub.url, body_topics=lambda topic: topic.startswith("ord"), max_body_bytes=2048,
                         redact_body=lambda b: b.replace(b"order", b"ORDER"))
    tracer.record_send("orders", "long", body=body)
    tracer.record_send("orders", "short", body=b"tiny")
    tracer.record_send("orders", "random", body=os.urandom(600))  # zlib does not help: sent as it is
    events = delivered(tracer, stub)
    long, short, rand = events["long"], events["short"], events["random"]
    assert long.body_flags == wire.BODY_TRUNCATED | wire.BODY_ZLIB and len(long.body) < 200
    assert wire.body_bytes(long) == body.replace(b"order", b"ORDER")[:2048] and long.body_len == len(body)
    assert (short.body, short.body_flags) == (b"tiny", 0)
    assert rand.body_flags == 0 and len(rand.body) == 600
    assert tracer.stats()["bodies"] == {"kept": 3, "truncated": 1, "compressed": 1, "unkeepable": 0}


def test_capture_body_still_keeps_every_topic(stub, make_tracer, accounted):
    tracer = make_tracer(stub.url, capture_body=True)
    tracer.record_send("anything", "m", body="text é")
    tracer.record_send("anything", "v", body=memoryview(b"view"))
    tracer.record_send("anything", "n", body=5)  # not a body: the send is recorded, nothing kept
    events = delivered(tracer, stub)
    assert wire.body_bytes(events["m"]) == "text é".encode() and events["v"].body == b"view"
    assert events["n"].body is None and accounted(tracer.stats())["sent"] == 3


@pytest.mark.parametrize("headers", [
    [("h", b"v")] * (wire.MAX_RAW_HEADERS + 1),
    [("h", b"v" * wire.MAX_RAW_HEADERS_BYTES)],
    [(b"\xff\xfe", b"v")],  # a name that is not UTF-8
    [("h", None)],  # Kafka allows a null header value; the wire keeps bytes only
])
def test_a_record_whose_headers_cannot_be_kept_exactly_keeps_no_body(stub, make_tracer, accounted, headers):
    tracer = make_tracer(stub.url, body_topics=["orders"])
    tracer.record_send("orders", "m", body=b"body", raw_key=b"k", raw_headers=headers)
    event = delivered(tracer, stub)["m"]
    assert (event.body, event.body_flags, event.raw_key, event.raw_headers) == (None, 0, None, None)
    stats = accounted(tracer.stats())
    assert stats["sent"] == 1 and stats["bodies"]["unkeepable"] == 1


def test_an_older_collector_gets_no_newer_fields_and_loses_no_event(stub, make_tracer, accounted):
    stub.wire = None  # answers as a collector before the header: a 26-field event is a 400 there
    tracer = make_tracer(stub.url, body_topics={"orders"}, max_body_bytes=8)
    tracer.record_send("orders", "whole", body=b"ab", raw_key=b"k", raw_headers=HEADERS)
    tracer.record_send("orders", "cut", body=b"0123456789", raw_key=b"k")
    tracer.record_send("orders", "plain")
    events = delivered(tracer, stub)
    assert sorted(events) == ["cut", "plain", "whole"]
    assert (events["whole"].body, events["whole"].raw_key, events["whole"].raw_headers) == (b"ab", None, None)
    assert events["cut"].body is None  # a cut body it cannot be told about is left off, not kept as whole
    stats = accounted(tracer.stats())
    assert stats["sent"] == 3 and stats["dropped_total"] == 0
    assert stats["stripped"] == {"events": 2, "bodies": 1}
    assert tracer._dispatcher.stripped == stats["stripped"]
    # the empty batch that asked what it takes, then the batch itself (never a refused one)
    assert stub.requests == 2 and len(stub.batches[0].events) == 0


def test_a_collector_replaced_by_an_older_one_gets_the_batch_again_narrower(stub, make_tracer, accounted):
    tracer = make_tracer(stub.url, body_topics={"orders"})
    tracer.record_send("orders", "first", body=b"one", raw_key=b"k")
    assert delivered(tracer, stub)["first"].raw_key == b"k"
    stub.wire = None
    tracer.record_send("orders", "second", body=b"two", raw_key=b"k")
    tracer.record_send("orders", "third")
    events = delivered(tracer, stub)
    assert events["second"].raw_key is None and events["second"].body == b"two" and "third" in events
    stats = accounted(tracer.stats())
    assert stats["sent"] == 3 and stats["dropped_total"] == 0 and stats["stripped"]["events"] == 1
    stub.wire = wire.advertised()  # upgraded again: its answer to this batch says so, the next one is whole
    tracer.record_send("orders", "fourth", body=b"4", raw_key=b"k")
    assert delivered(tracer, stub)["fourth"].raw_key is None
    tracer.record_send("orders", "fifth", body=b"5", raw_key=b"k")
    assert delivered(tracer, stub)["fifth"].raw_key == b"k"


def test_hostile_props_are_capped_not_refused(stub, make_tracer, accounted):
    tracer = make_tracer(stub.url)
    props = {f"p{i}": "v" for i in range(5000)} | {"long": "é" * wire.MAX_STR_LEN}
    tracer.record_send("orders", "m", props=props)
    tracer.record_send("orders", "n", props={"long": "é" * wire.MAX_STR_LEN, "k" * wire.MAX_STR_LEN: "v"})
    events = delivered(tracer, stub)
    assert len(events["m"].props) == wire.MAX_PROPS and events["m"].props["p0"] == "v"
    assert all(len(k.encode()) <= wire.MAX_STR_LEN and len(v.encode()) <= wire.MAX_STR_LEN
               for k, v in events["n"].props.items())
    assert accounted(tracer.stats())["sent"] == 2


def test_body_and_props_settings():
    config = TracerConfig.from_env({"TRACEHOOK_BODY_TOPICS": "orders, payments,", "TRACEHOOK_CAPTURE_PROPS": "orderId"})
    assert config.body_topics == frozenset({"orders", "payments"}) and config.capture_props == frozenset({"orderId"})
    assert TracerConfig(body_topics="a,b").body_topics == frozenset({"a", "b"})
    assert TracerConfig().body_topics == frozenset() and not TracerConfig().capture_body
    for bad in (dict(capture_props={"amqp.exchange"}), dict(capture_props={"replay.target", "x"}),
                dict(body_topics=[1]), dict(body_topics=3), dict(max_body_bytes=wire.MAX_BODY_LEN + 1)):
        with pytest.raises(ConfigError):
            TracerConfig(**bad)


def test_zlib_output_is_what_the_standard_library_inflates():
    # body_bytes is the one reader; the collector never inflates at ingest.
    data = b"x" * 1000
    event = wire.Event(*wire.make_event(1, 1, "g", "t", "m", body=zlib.compress(data), body_flags=wire.BODY_ZLIB))
    assert zlib.decompress(event.body) == wire.body_bytes(event) == data
