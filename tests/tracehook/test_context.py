"""Message ids and header helpers (dict and Kafka-style lists, str and bytes values)."""

from __future__ import annotations

import re

import tracehook
from tracehook.context import new_request_id, trace_id_for

TRACEPARENT = re.compile(r"^00-[0-9a-f]{32}-[0-9a-f]{16}-0[0-3]$")


def test_inject_into_a_dict_and_extract():
    headers: dict[str, str] = {}
    msg_id = tracehook.inject_headers(headers, "abc")
    assert msg_id == "abc" and headers[tracehook.HEADER_MSG_ID] == "abc"
    assert TRACEPARENT.match(headers["traceparent"])
    ctx = tracehook.extract_headers(headers)
    assert ctx.msg_id == "abc" and ctx.traceparent == headers["traceparent"]
    assert ctx.trace_id == trace_id_for("abc")


def test_generated_id_is_the_trace_id():
    msg_id = tracehook.new_msg_id()
    headers: dict[str, str] = {}
    tracehook.inject_headers(headers, msg_id)
    assert tracehook.extract_headers(headers).trace_id == msg_id


def test_kafka_style_list_of_byte_pairs():
    headers: list[tuple[str, bytes]] = [("other", b"x")]
    tracehook.inject_headers(headers, "id-1")
    assert ("tracehook-msg-id", b"id-1") in headers
    assert all(isinstance(v, bytes) for _, v in headers)
    assert tracehook.extract_headers(headers).msg_id == "id-1"


def test_existing_values_are_kept():
    theirs = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    headers = {"traceparent": theirs, "tracehook-msg-id": "first-id"}
    assert tracehook.inject_headers(headers, "second-id") == "first-id"
    assert headers == {"traceparent": theirs, "tracehook-msg-id": "first-id"}


def test_extract_is_case_insensitive_and_accepts_bytes():
    ctx = tracehook.extract_headers({"Tracehook-Msg-Id": b"m-1", "TraceParent": b"00-x"})
    assert ctx == ("m-1", "00-x")


def test_absent_headers_give_none():
    assert tracehook.extract_headers({}) == (None, None)
    assert tracehook.extract_headers(None) == (None, None)
    assert tracehook.extract_headers([]).trace_id is None


def test_record_send_writes_headers(make_tracer):
    tracer = make_tracer()
    headers: dict[str, str] = {}
    msg_id = tracer.record_send("orders", headers=headers)
    assert headers["tracehook-msg-id"] == msg_id
    assert tracer.record_send("orders", "broker-id", headers={}) == "broker-id"


def test_request_ids_are_unique():
    assert len({new_request_id() for _ in range(1000)}) == 1000
