"""The message model on both stores: the send alone places a message, consumes and dead letters only
add to its outcome, and every listing shows each message once (issue 11's repros)."""

from __future__ import annotations

import pytest
from index_helpers import CONSUMER, PRODUCER, consumed, ev, message, page_ids, unique

from collector.index.indexer import finish_batch, index_records
from collector.query import backtrack
from collector.store import Store
from collector.store.reader import TraceQuery
from tracehook.wire import EventType, Status

pytestmark = pytest.mark.fallback

HOUR = 3_600_000
NOW = 1_800_000_000_000
END = 2**62


def readme_consume(topic: str, msg_id: str, group: str, at: int, *, queue: int = 3, offset: int = 1017,
                   status: Status = Status.OK, retry: int = 0) -> list:
    """What ``tracehook.consume(topic, None, group, headers=..., queue=, offset=)`` records: no store time."""
    common = dict(queue=queue, offset=offset, retry=retry, request_id=f"{msg_id}/{group}/{retry}")
    return [(CONSUMER, ev(EventType.SUB_BEFORE, at, group, topic, msg_id, **common)),
            (CONSUMER, ev(EventType.SUB_AFTER, at + 2, group, topic, msg_id, status=status,
                          error="" if status == Status.OK else "boom", **common))]


def dead(topic: str, msg_id: str, group: str, at: int, **fields) -> list:
    return [(CONSUMER, ev(EventType.DEAD, at, group, topic, msg_id, error="gave up", **fields))]


def index(store: Store, records: list) -> TraceQuery:
    index_records(store, records)
    finish_batch(store)
    return TraceQuery(store)


def test_consume_without_store_time_does_not_place_the_message(store: Store) -> None:
    """The issue's minimal repro: stored an hour ago, consumed the README way and through consume_batch now."""
    topic = unique("orders")
    stored = NOW - HOUR
    records = message(topic, "m-42", stored, keys="order-42", queue=3, offset=1017)
    records += readme_consume(topic, "m-42", "billing", NOW)
    records += readme_consume(topic, "m-42", "audit", NOW + 5)  # consume_batch records the same fields
    q = index(store, records)
    assert q.by_time(topic, NOW - HOUR // 2, NOW + HOUR, 20).items == []
    listed = q.by_time(topic, 0, END, 20).items
    assert [(i.msg_id, i.time_ms, i.queue, i.offset, i.broker) for i in listed] == [("m-42", stored, 3, 1017, "b1")]
    assert {g: o.outcome for g, o in listed[0].groups.items()} == {"billing": "consumed", "audit": "consumed"}
    assert q.offsets_at(topic, NOW - HOUR // 2) == {3: 1018}
    assert q.offsets_at(topic, stored) == {3: 1017}
    first = q.by_key(topic, "order-42", 0, END, 1)
    assert [i.msg_id for i in first.items] == ["m-42"]
    assert first.next_cursor is None or q.by_key(topic, "order-42", 0, END, 1, first.next_cursor).items == []


def test_shared_key_pages_list_each_message_once(store: Store) -> None:
    topic = unique("orders")
    records = []
    for n in range(150):
        records += message(topic, f"m{n:03d}", NOW - HOUR + n * 1000, keys="shared", queue=n % 3, offset=n)
        records += readme_consume(topic, f"m{n:03d}", "billing", NOW + n)
    q = index(store, records)
    expected = [f"m{n:03d}" for n in reversed(range(150))]
    for limit in (7, 20):
        assert page_ids(lambda **kw: q.by_key(topic, "shared", 0, END, **kw), limit) == expected
        assert page_ids(lambda **kw: q.by_time(topic, 0, END, **kw), limit) == expected


def test_dead_letters_of_two_groups_are_two_rows_at_the_store_time(store: Store) -> None:
    topic = unique("orders")
    stored = NOW - HOUR
    records = message(topic, "m1", stored, queue=0, offset=5) + message(topic, "m2", stored + 10, queue=0, offset=6)
    records += dead(topic, "m1", "billing", NOW) + dead(topic, "m1", "audit", NOW + 1) + dead(topic, "m2", "audit", NOW)
    q = index(store, records)
    window = (stored - 1000, stored + 1000)
    rows = q.dead_letters(topic, None, *window, limit=100).items
    assert sorted((i.msg_id, i.group) for i in rows) == [("m1", "audit"), ("m1", "billing"), ("m2", "audit")]
    assert all(i.time_ms in (stored, stored + 10) and i.groups[i.group].outcome == "dead" for i in rows)
    assert q.dead_letters(topic, None, NOW - 1000, NOW + 1000, limit=100).items == []
    assert [i.msg_id for i in q.dead_letters(topic, "audit", *window, limit=100).items] == ["m2", "m1"]
    counts = backtrack.dead_counts(q, topic, stored - HOUR, stored + HOUR, HOUR)
    assert counts.totals() == {"audit": 2, "billing": 1}


def test_dead_letter_indexed_before_its_send_moves_to_the_send_time(store: Store) -> None:
    """The dead letter and the send reach the index in different batches (another partition, a later run)."""
    topic = unique("orders")
    stored = NOW - HOUR
    q = index(store, dead(topic, "m1", "billing", NOW))
    only_dead = q.dead_letters(topic, None, 0, END, 10).items
    assert [(i.msg_id, i.time_ms, i.send_traced) for i in only_dead] == [("m1", NOW, False)]
    q = index(store, message(topic, "m1", stored))
    assert [(i.msg_id, i.time_ms, i.send_traced) for i in q.dead_letters(topic, None, 0, END, 10).items] == [
        ("m1", stored, True)]
    assert backtrack.dead_counts(q, topic, 0, NOW + HOUR, NOW + HOUR).totals() == {"billing": 1}


def test_listing_rows_are_messages_with_outcomes(store: Store) -> None:
    topic = unique("orders")
    t = NOW - HOUR
    records = []
    # m1: the first send timed out, the retry succeeded; billing failed twice then died; audit consumed it.
    records.append((PRODUCER, ev(EventType.PUB, t - 50, "pg", topic, "m1", born_ms=t - 60, status=Status.TIMEOUT,
                                 error="timeout")))
    records += message(topic, "m1", t, queue=1, offset=9)
    records += consumed(topic, "m1", t, "billing", status=Status.FAILED, queue=1, offset=9)
    records += consumed(topic, "m1", t, "billing", status=Status.FAILED, retry=1, queue=1, offset=9)
    records += dead(topic, "m1", "billing", t + 500)
    records += consumed(topic, "m1", t, "audit", queue=1, offset=9)
    # m2: billing asked for a redelivery, audit has not finished.
    records += message(topic, "m2", t + 1, queue=1, offset=10)
    records += consumed(topic, "m2", t + 1, "billing", status=Status.RETRY_LATER, queue=1, offset=10)
    records += consumed(topic, "m2", t + 1, "audit", status=None, queue=1, offset=10)
    q = index(store, records)
    rows = {i.msg_id: i for i in q.by_time(topic, 0, END, 10).items}
    m1, m2 = rows["m1"].to_json(), rows["m2"].to_json()
    assert (m1["status_name"], m1["broker"], m1["store_ms"], m1["queue"], m1["offset"]) == ("OK", "b1", t, 1, 9)
    assert {g: (o["outcome"], o["attempts"]) for g, o in m1["groups"].items()} == {
        "billing": ("dead", 2), "audit": ("consumed", 1)}
    assert {g: o["outcome"] for g, o in m2["groups"].items()} == {"billing": "retrying", "audit": "pending"}
    assert [i.msg_id for i in q.dead_letters(topic, "billing", 0, END, 10).items] == ["m1"]
    replay = backtrack.replay_list(q, topic, "billing", 0, END)
    assert [(i.msg_id, i.status, i.attempts) for i in replay.items] == [("m1", "DEAD", 2), ("m2", "RETRY_LATER", 1)]


def test_send_not_traced_is_found_by_id_and_key_but_not_placed_at_consume_time(store: Store) -> None:
    topic = unique("orders")
    records = [(CONSUMER, ev(EventType.SUB_BEFORE, NOW, "billing", topic, "m1", keys="k1", queue=0, offset=3,
                             request_id="r1"))]
    records.append((CONSUMER, ev(EventType.SUB_AFTER, NOW + 1, "billing", topic, "m1", queue=0, offset=3,
                                 request_id="r1")))
    q = index(store, records)
    trace = q.get_trace("m1")
    assert trace is not None and not trace.send_traced and trace.placed_ms is None
    assert trace.to_json()["status_name"] == "NOT_TRACED"
    assert [(i.msg_id, i.send_traced) for i in q.by_key(topic, "k1", 0, END, 10).items] == [("m1", False)]
    assert q.by_time(topic, 0, END, 10).items == []
    assert q.offsets_at(topic, 0) == {}


@pytest.mark.parametrize("rounds", [2])
def test_reindexing_rewrites_nothing_new(store: Store, dump_store, rounds: int) -> None:
    topic = unique("orders")
    records = message(topic, "m1", NOW - HOUR, keys="k") + readme_consume(topic, "m1", "billing", NOW)
    records += dead(topic, "m1", "audit", NOW + 5)
    index(store, records)
    first = dump_store(store)
    for _ in range(rounds):
        index(store, records)
    again = dump_store(store)
    assert {t: [r for r, _ in rows] for t, rows in again.items()} == {t: [r for r, _ in rows] for t, rows in first.items()}


def test_messages_are_found_by_their_trace_id(store: Store) -> None:
    """A send's own trace (no trace id on the wire), and an OTel trace carried by send and consume events."""
    from tracehook.context import trace_id_for

    topic = unique("orders")
    otel = "4bf92f3577b34da6a3ce929d0e0e4736"
    records = message(topic, "m1", NOW)
    records.append((PRODUCER, ev(EventType.PUB, NOW, "pg", topic, "m2", store_ms=NOW, trace_id=otel,
                                 span_id="00f067aa0ba902b7")))
    records.append((CONSUMER, ev(EventType.SUB_BEFORE, NOW + 5, "billing", topic, "m3", trace_id=otel)))
    q = index(store, records)
    assert [i.msg_id for i in q.by_trace(trace_id_for("m1"), 10).items] == ["m1"]
    found = q.by_trace(otel, 1)
    rest = q.by_trace(otel, 1, found.next_cursor)
    assert [i.msg_id for i in found.items + rest.items] == ["m2", "m3"] and rest.next_cursor is None
    trace = q.get_trace("m2")
    assert trace is not None and (trace.trace_id, trace.span_id) == (otel, "00f067aa0ba902b7")
    assert q.get_trace("m1").trace_id == trace_id_for("m1")
