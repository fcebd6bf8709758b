"""The hooks' events as a real collector stub receives them."""

from __future__ import annotations

import asyncio
import logging
import time

import pytest

import tracehook
from tracehook import hooks, wire
from tracehook.wire import EventType, Status, TxState


def delivered(tracer: tracehook.Tracer, stub) -> list[wire.Event]:
    assert tracer.flush(10)
    return sorted(stub.events(), key=lambda e: (e.time_ms, e.type))


def test_record_send_fields_and_generated_id(stub, make_tracer):
    tracer = make_tracer(stub.url)
    before = int(time.time() * 1000)
    msg_id = tracer.record_send("orders", group="pg", keys="k1 k2", tags="created", broker="b1", queue=3,
                                offset=42, born_ms=5, store_ms=6, cost_us=700, status=Status.TIMEOUT,
                                error="timed out", body_len=99, props={"region": "eu", "n": 1},
                                broker_msg_id="B-1", tx_id="tx-9")
    (event,) = delivered(tracer, stub)
    assert len(msg_id) == 32 and event.msg_id == msg_id
    assert event.time_ms >= before
    assert event[:1] == (EventType.PUB,) and event[2:19] == (
        "pg", "orders", msg_id, "B-1", "k1 k2", "created", "b1", 3, 42, 5, 6, 700, Status.TIMEOUT,
        "timed out", 0, 99, {"region": "eu", "n": "1"},
    )
    assert event.tx_id == "tx-9"


def test_generated_ids_are_unique(make_tracer):
    tracer = make_tracer()
    ids = {tracer.record_send("orders") for _ in range(10_000)}
    assert len(ids) == 10_000


class FakeClock:
    """Stands in for the hooks' ``perf_counter_ns``: time moves only when the test says so."""

    def __init__(self) -> None:
        self.now_ns = 1_000_000_000

    def __call__(self) -> int:
        return self.now_ns

    def advance(self, ns: int) -> None:
        self.now_ns += ns


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> FakeClock:
    fake = FakeClock()
    monkeypatch.setattr(hooks, "_perf_ns", fake)
    return fake


def test_consume_pairs_before_and_after_with_cost(stub, make_tracer, clock):
    tracer = make_tracer(stub.url)
    with tracer.consume("orders", "m-1", "billing", keys="k", queue=1, offset=7, retry=2) as span:
        clock.advance(12_345_678)
    before, after = delivered(tracer, stub)
    assert (before.type, after.type) == (EventType.SUB_BEFORE, EventType.SUB_AFTER)
    assert before.request_id == after.request_id == span.request_id != ""
    assert after.cost_us == 12_345 and after.status == Status.OK  # whole microseconds, rounded down
    for event in (before, after):
        assert (event.group, event.topic, event.msg_id, event.keys, event.queue, event.offset, event.retry) == (
            "billing", "orders", "m-1", "k", 1, 7, 2)


def test_consume_exception_is_recorded_and_reraised_unchanged(stub, make_tracer):
    tracer = make_tracer(stub.url)
    error = ValueError("broken message")
    with pytest.raises(ValueError) as caught:
        with tracer.consume("orders", "m-1", "billing"):
            raise error
    assert caught.value is error
    after = delivered(tracer, stub)[-1]
    assert after.status == Status.EXCEPTION and after.error == "ValueError: broken message"


def test_span_status_is_settable_and_finish_is_idempotent(stub, make_tracer):
    tracer = make_tracer(stub.url)
    span = tracer.start_consume("orders", "m-1", "billing")
    span.status = Status.RETRY_LATER
    span.finish()
    span.finish(Status.OK)
    with span:  # exiting a finished span records nothing more
        pass
    events = delivered(tracer, stub)
    assert [e.type for e in events] == [EventType.SUB_BEFORE, EventType.SUB_AFTER]
    assert events[1].status == Status.RETRY_LATER


def test_consume_reads_the_id_from_headers(stub, make_tracer):
    tracer = make_tracer(stub.url)
    headers: dict[str, str] = {}
    msg_id = tracer.record_send("orders", headers=headers)
    with tracer.consume("orders", None, "billing", headers=headers):
        pass
    assert {e.msg_id for e in delivered(tracer, stub)} == {msg_id}


def test_consume_batch_shares_one_request_id_and_divides_the_cost(stub, make_tracer, clock):
    tracer = make_tracer(stub.url)
    messages = [dict(msg_id=f"m-{i}", keys=f"k{i}", queue=0, offset=i) for i in range(4)]
    with tracer.consume_batch("orders", "billing", messages, broker="b1"):
        clock.advance(20_003_999)  # 20,003 us for the batch
    events = delivered(tracer, stub)
    afters = [e for e in events if e.type == EventType.SUB_AFTER]
    befores = [e for e in events if e.type == EventType.SUB_BEFORE]
    assert len(afters) == len(befores) == 4
    assert len({e.request_id for e in events}) == 1
    assert {e.offset for e in afters} == {0, 1, 2, 3} and {e.broker for e in events} == {"b1"}
    assert [e.cost_us for e in afters] == [20_003 // 4] * 4  # each message a quarter of the batch's cost


def test_consume_batch_exception(stub, make_tracer):
    tracer = make_tracer(stub.url)
    with pytest.raises(KeyError):
        with tracer.consume_batch("orders", "billing", [dict(msg_id="a"), dict(msg_id="b")]):
            raise KeyError("x")
    afters = [e for e in delivered(tracer, stub) if e.type == EventType.SUB_AFTER]
    assert [e.status for e in afters] == [Status.EXCEPTION] * 2


def test_end_tx_and_dead(stub, make_tracer):
    tracer = make_tracer(stub.url)
    tracer.record_end_tx("orders", "m-1", "pg", "tx-1", TxState.ROLLBACK, keys="k")
    tracer.record_dead("orders", "m-1", "billing", error="max retries", retry=16, queue=2, offset=9)
    tx, dead = sorted(delivered(tracer, stub), key=lambda e: e.type)
    assert (tx.type, tx.tx_id, tx.tx_state, tx.group, tx.keys) == (EventType.END_TX, "tx-1", TxState.ROLLBACK, "pg", "k")
    assert (dead.type, dead.error, dead.retry, dead.group, dead.queue, dead.offset) == (
        EventType.DEAD, "max retries", 16, "billing", 2, 9)


def test_consumer_decorator_sync_and_async(stub, make_tracer):
    tracer = make_tracer(stub.url)

    @tracer.consumer(topic="orders", group="billing")
    def handle(message: dict) -> str:
        return "done"

    @tracer.consumer(topic="orders", group="audit")
    async def handle_async(message: object) -> str:
        await asyncio.sleep(0)
        raise RuntimeError("nope")

    class Record:
        headers = [("tracehook-msg-id", b"from-headers")]

    assert handle({"msg_id": "m-1"}) == "done"
    with pytest.raises(RuntimeError):
        asyncio.run(handle_async(Record()))
    events = delivered(tracer, stub)
    by_group = {(e.group, e.type): e for e in events}
    assert by_group[("billing", EventType.SUB_AFTER)].msg_id == "m-1"
    failed = by_group[("audit", EventType.SUB_AFTER)]
    assert failed.msg_id == "from-headers" and failed.status == Status.EXCEPTION


def test_misuse_never_raises_and_is_logged_once_per_kind(make_tracer, caplog, accounted):
    tracer = make_tracer()
    with caplog.at_level(logging.WARNING, logger="tracehook"):
        for _ in range(3):
            tracer.record_send("")  # type: ignore[arg-type]
            tracer.record_send(None)  # type: ignore[arg-type]
            tracer.record_dead("orders", "", "g")
            with tracer.consume("orders", None, "g") as span:
                span.status = Status.FAILED
    messages = [r.getMessage() for r in caplog.records]
    assert len([m for m in messages if "record_send" in m]) == 1
    assert len([m for m in messages if "record_dead" in m]) == 1
    assert len([m for m in messages if "start_consume" in m]) == 1
    stats = accounted(tracer.stats())
    assert stats["dropped"]["invalid"] == 12


def test_hooks_do_not_block_an_event_loop_when_the_collector_hangs(stub, make_tracer):
    tracer = make_tracer(stub.url)
    stub.hold()
    tracer.record_send("orders", "first")
    assert stub.waiting.wait(5)

    async def app() -> int:
        ticks = 0
        for i in range(100):
            with tracer.consume("orders", f"m-{i}", "g"):
                await asyncio.sleep(0)
            ticks += 1
        return ticks

    assert asyncio.run(app()) == 100  # the collector has not answered yet: hooks only queued
    assert tracer.stats()["queued"] == 200
    stub.release()
    assert tracer.flush(10) and len(stub.events()) == 201


def test_module_level_shortcuts_use_the_global_tracer(stub):
    tracer = tracehook.configure(app="global-app", collectors=[stub.url], linger_s=0.01, flush_at_exit=False)
    try:
        assert tracehook.get_tracer() is tracer
        msg_id = tracehook.record_send("orders", keys="k")
        with tracehook.consume("orders", msg_id, "g"):
            pass
        tracehook.record_dead("orders", msg_id, "g")
        assert tracehook.flush(10)
        assert tracehook.stats()["sent"] == 4
        assert {b.header.app for b in stub.batches} == {"global-app"}
    finally:
        tracehook.close(1.0)


def test_module_level_consumer_decorates_before_configure(stub):
    @tracehook.consumer(topic="orders", group="late")
    def handle(message: str) -> str:
        return message.upper()

    tracer = tracehook.configure(app="late-app", collectors=[stub.url], linger_s=0.01, flush_at_exit=False)
    try:
        assert handle("m-1") == "M-1"
        assert tracer.flush(10)
        assert {(e.group, e.msg_id) for e in stub.events()} == {("late", "m-1")}
    finally:
        tracer.close(1.0)


def test_body_is_not_kept_unless_capture_is_on(stub, make_tracer):
    tracer = make_tracer(stub.url)
    tracer.record_send("orders", "m-1", body=b"secret")
    (event,) = delivered(tracer, stub)
    assert event.body is None


def test_captured_body_is_redacted_then_capped(stub, make_tracer, accounted):
    def redact(body: bytes) -> bytes | None:
        if body.startswith(b"drop"):
            return None
        if body.startswith(b"fail"):
            raise ValueError("cannot parse")
        return body.replace(b"4111-1111", b"XXXX")

    tracer = make_tracer(stub.url, capture_body=True, max_body_bytes=12, redact_body=redact)
    tracer.record_send("orders", "card", body=b"card=4111-1111;amount=10")
    tracer.record_send("orders", "dropped", body=b"drop me")
    tracer.record_send("orders", "failing", body=b"fail")
    bodies = {e.msg_id: e.body for e in delivered(tracer, stub)}
    assert bodies == {"card": b"card=XXXX;am", "dropped": None, "failing": None}
    assert accounted(tracer.stats())["sent"] == 3
