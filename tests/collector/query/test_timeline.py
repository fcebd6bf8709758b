"""Timeline rows built from the store's trace documents (pure, no store)."""

from __future__ import annotations

from collector.query.timeline import build_timeline
from collector.store.codec import StoredEvent
from collector.store.model import build_trace
from tests.fixtures.sample import BILLING_HEADER, consume, send
from tracehook.wire import Status

T = 1_795_341_600_000
MSG = dict(keys="k", broker="b", queue=0, offset=1, born_ms=T - 1, store_ms=T)


def timeline(records) -> dict:
    stored = [StoredEvent(h.app, h.host, h.client_id, e) for h, e in records]
    return build_timeline(build_trace("m", stored).to_json())


def test_failed_send_and_resend_both_show_on_the_producer_row():
    doc = timeline([
        send("m", T - 3000, MSG, status=int(Status.TIMEOUT), cost_us=3_000_000, error="timeout"),
        send("m", T, MSG),
    ])
    bars = doc["rows"][0]["bars"]
    assert [(b["outcome"], b["start_ms"], b["end_ms"]) for b in bars] == [
        ("failed", T - 6000, T - 3000), ("success", T - 1, T + 0)
    ]
    assert (doc["start_ms"], doc["end_ms"]) == (T - 6000, T)


def test_finish_without_receive_spans_its_cost():
    _, after = consume(BILLING_HEADER, "billing", "m", T + 10, MSG, cost_ms=7)
    doc = timeline([send("m", T, MSG), after])
    bar = doc["rows"][1]["bars"][0]
    assert (bar["start_ms"], bar["end_ms"], bar["outcome"], bar["finished"]) == (T + 10, T + 17, "success", True)


def test_groups_are_ordered_by_first_receive():
    records = [send("m", T, MSG)]
    records += consume(BILLING_HEADER, "late", "m", T + 50, MSG)
    records += consume(BILLING_HEADER, "early", "m", T + 5, MSG)
    doc = timeline(records)
    assert [r["group"] for r in doc["rows"]] == ["shop-web", "early", "late"]


def test_consumer_only_trace_has_an_empty_producer_row():
    doc = timeline(consume(BILLING_HEADER, "billing", "m", T, MSG, status=Status.RETRY_LATER))
    assert doc["rows"][0] == {"kind": "producer", "group": "", "bars": []}
    assert doc["rows"][1]["bars"][0]["status"] == "retry_later"
    assert doc["rows"][1]["bars"][0]["outcome"] == "failed"


def test_attempts_sharing_a_millisecond_keep_their_retry_order():
    """Retry 1 received in the millisecond retry 0 finished: its bar still comes after retry 0's."""
    from tests.fixtures.sample import _event
    from tracehook.wire import EventType

    records = [send("m", T, MSG)]
    for retry, request_id in ((1, "a-second"), (0, "z-first")):  # request ids sort against the retry order
        for kind in (EventType.SUB_BEFORE, EventType.SUB_AFTER):
            records.append((BILLING_HEADER, _event(kind, T + 5, "billing", "m", retry=retry, request_id=request_id,
                                                   status=int(Status.EXCEPTION if retry == 0 else Status.OK), **MSG)))
    bars = timeline(records)["rows"][1]["bars"]
    assert [(b["retry"], b["status"]) for b in bars] == [(0, "exception"), (1, "ok")]


def test_a_replay_is_a_mark_in_its_groups_row_and_not_a_second_message():
    from tracehook.wire import BatchHeader, Event, EventType, make_event

    replayer = BatchHeader("replay-client", 1, app="tracehook-replay", host="ops-1")
    failed = consume(BILLING_HEADER, "billing", "m", T + 10, MSG, status=Status.FAILED)
    replay = (replayer, Event._make(make_event(EventType.REPLAY, T + 5000, "billing", "orders", "m", retry=1,
                                               props={"replay.target": "topic:orders.billing-replay"}, **MSG)))
    again = consume(BILLING_HEADER, "billing", "m", T + 6000, MSG, retry=1)
    stored = [StoredEvent(h.app, h.host, h.client_id, e) for h, e in [send("m", T, MSG), *failed, replay, *again]]
    trace = build_trace("m", stored).to_json()
    assert [(r["group"], r["app"], r["host"]) for r in trace["replays"]] == [("billing", "tracehook-replay", "ops-1")]
    assert trace["outcomes"]["billing"]["outcome"] == "consumed"
    assert trace["outcomes"]["billing"]["replayed_ms"] == T + 5000
    rows = build_timeline(trace)["rows"]
    assert [r["kind"] for r in rows] == ["producer", "consumer"]  # one message: its producer row and billing's
    (billing,) = [r for r in rows if r["group"] == "billing"]
    assert [(b["kind"], b["start_ms"]) for b in billing["bars"]] == [
        ("consume", T + 10), ("replay", T + 5000), ("consume", T + 6000)]
    assert billing["bars"][1]["replay_target"] == "topic:orders.billing-replay"


def test_a_failed_send_comes_before_the_retry_stored_in_its_millisecond():
    """Cells come back in hash order: whichever comes first, and whichever request id sorts first, a failed
    send shows before the successful one that ended in the same millisecond, in the events and on the
    producer row; by its start (a 3 s timeout), else (both as quick) because it failed."""
    unstored = dict(MSG, queue=-1, offset=-1, store_ms=0)
    for cost_us in (3_000_000, 1500):
        for failed_id, ok_id in (("a", "b"), ("b", "a")):
            failed = send("m", T, unstored, status=int(Status.TIMEOUT), cost_us=cost_us, error="timeout",
                          request_id=failed_id)
            ok = send("m", T, MSG, request_id=ok_id)
            for records in ([failed, ok], [ok, failed]):
                stored = [StoredEvent(h.app, h.host, h.client_id, e) for h, e in records]
                trace = build_trace("m", stored).to_json()
                assert [(e["status_name"], e["queue"]) for e in trace["events"]] == [("TIMEOUT", -1), ("OK", 0)]
                assert trace["send"]["status_name"] == "OK"
                bars = build_timeline(trace)["rows"][0]["bars"]
                assert [(b["outcome"], b["start_ms"]) for b in bars] == [
                    ("failed", T - cost_us // 1000), ("success", T - 1)]
