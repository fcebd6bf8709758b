"""Assembling a trace from stored events (pure: no store)."""

from __future__ import annotations

import pytest
from index_helpers import ev

from collector.store.codec import StoredEvent
from collector.store.model import build_trace
from tracehook.wire import EventType, Status

pytestmark = pytest.mark.fallback


def stored(type_: EventType, t: int, group: str = "g", **fields) -> StoredEvent:
    return StoredEvent("app", "host", "client", ev(type_, t, group, "topic", "m", **fields))


def test_no_events_no_trace() -> None:
    assert build_trace("m", []) is None


def test_attempts_without_request_ids_pair_in_time_order() -> None:
    trace = build_trace("m", [
        stored(EventType.SUB_AFTER, 20, status=Status.FAILED),
        stored(EventType.SUB_BEFORE, 10),
        stored(EventType.SUB_BEFORE, 30, retry=1),
        stored(EventType.SUB_AFTER, 40, retry=1),
        stored(EventType.SUB_BEFORE, 50, retry=2),  # still running
    ])
    attempts = trace.consumes["g"]
    assert [(a["before"]["time_ms"], a["after"] and a["after"]["time_ms"]) for a in attempts] == [
        (10, 20), (30, 40), (50, None)]
    assert [a["status_name"] for a in attempts] == ["FAILED", "OK", "PENDING"]


def test_interleaved_attempts_pair_by_request_id() -> None:
    trace = build_trace("m", [
        stored(EventType.SUB_BEFORE, 10, request_id="a"),
        stored(EventType.SUB_BEFORE, 11, request_id="b"),
        stored(EventType.SUB_AFTER, 12, request_id="b", status=Status.TIMEOUT),
        stored(EventType.SUB_AFTER, 13, request_id="a"),
        stored(EventType.SUB_AFTER, 14, request_id="c"),  # its SUB_BEFORE was lost
    ])
    attempts = trace.consumes["g"]
    assert [(a["request_id"], a["status_name"]) for a in attempts] == [("a", "OK"), ("b", "TIMEOUT"), ("c", "OK")]
    assert attempts[2]["before"] is None and attempts[2]["time_ms"] == 14


def test_send_prefers_the_successful_attempt_and_gives_message_attributes() -> None:
    trace = build_trace("m", [
        stored(EventType.SUB_BEFORE, 30, keys="from-consumer"),
        stored(EventType.PUB, 10, "pg", status=Status.TIMEOUT, keys="k"),
        stored(EventType.PUB, 20, "pg", keys="k", queue=3, offset=9),
    ])
    assert trace.send["time_ms"] == 20
    assert (trace.keys, trace.queue, trace.offset) == ("k", 3, 9)
    only_consumed = build_trace("m", [stored(EventType.SUB_BEFORE, 30, keys="from-consumer")])
    assert only_consumed.send is None and only_consumed.keys == "from-consumer"
