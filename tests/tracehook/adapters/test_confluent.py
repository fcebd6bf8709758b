"""confluent-kafka adapter against a real Kafka broker."""

from __future__ import annotations

from collections import defaultdict

import pytest
from fixtures.deps import require

from tracehook import HEADER_MSG_ID, EventType, Status
from tracehook.adapters import confluent

confluent_kafka = require("confluent_kafka")  # the kafka extra: a missing wheel fails the run

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

N = 12


def _consume_all(consumer, n: int, handle) -> None:
    """Poll until n messages were handled; each is handled before the next poll ends its attempt."""
    handled = 0
    for _ in range(200):   # a hang guard, not a timing assertion
        message = consumer.poll(0.5)
        if message is not None and message.error() is None:
            handle(message)
            handled += 1
            if handled == n:
                break
    assert handled == n


def test_produce_and_consume(kafka_bootstrap, capture, topic):
    producer = confluent.TracedProducer(confluent_kafka.Producer({"bootstrap.servers": kafka_bootstrap}),
                                        capture.tracer, broker=kafka_bootstrap)
    reports = []
    for i in range(N):
        producer.produce(topic, b"m%d" % i, key=b"k%d" % i, on_delivery=lambda err, msg: reports.append(msg))
    producer.flush(10)
    assert len(reports) == N   # the app's own delivery callback still runs
    consumer = confluent.TracedConsumer(confluent_kafka.Consumer({
        "bootstrap.servers": kafka_bootstrap, "group.id": "cg", "auto.offset.reset": "earliest"}), "cg",
        capture.tracer)
    consumer.subscribe([topic])
    failing = {b"k0", b"k5"}

    def handle(message):
        assert dict(message.headers())[HEADER_MSG_ID]
        if message.key() in failing:
            consumer.fail(message, "nope")

    _consume_all(consumer, N, handle)
    consumer.close()

    events = capture.events()
    pubs = {e.msg_id: e for e in events if e.type == EventType.PUB}
    assert sorted((e.keys, e.queue, e.offset) for e in pubs.values()) == sorted(
        (m.key().decode(), m.partition(), m.offset()) for m in reports)
    after = defaultdict(list)
    for e in events:
        if e.type == EventType.SUB_AFTER:
            after[e.msg_id].append((e.group, e.status, e.queue, e.offset))
    for msg_id, send in pubs.items():
        status = Status.FAILED if send.keys.encode() in failing else Status.OK
        assert after[msg_id] == [("cg", status, send.queue, send.offset)]


def test_instrument_swaps_classes_idempotently(kafka_bootstrap, capture, topic):
    original = confluent_kafka.Producer
    confluent.instrument(capture.tracer)
    confluent.instrument(capture.tracer)
    try:
        producer = confluent_kafka.Producer({"bootstrap.servers": kafka_bootstrap})
        producer.produce(topic, b"x", key=b"a")
        producer.flush(10)
        with pytest.raises(TypeError):   # the client's own argument error, unchanged
            producer.produce(topic, 12345)
    finally:
        confluent.uninstrument()
        confluent.uninstrument()
    assert confluent_kafka.Producer is original
    assert [e.type for e in capture.events()] == [EventType.PUB]


def test_dict_headers_and_positional_arguments(kafka_bootstrap, capture, topic):
    producer = confluent.TracedProducer(confluent_kafka.Producer({"bootstrap.servers": kafka_bootstrap}),
                                        capture.tracer, broker=kafka_bootstrap)
    reports = []

    def report(err, msg):
        reports.append(msg.key())

    caller_headers = {"x-app": b"1"}
    producer.produce(topic, b"dict", b"k0", headers=caller_headers, on_delivery=report)
    producer.produce(topic, b"positional", b"k1", 0, report)                       # on_delivery by position
    producer.produce(topic, b"all-positional", b"k2", 0, report, None, 0, caller_headers)   # headers too
    producer.flush(10)
    assert caller_headers == {"x-app": b"1"}                    # the caller's dict is not changed
    assert sorted(reports) == [b"k0", b"k1", b"k2"]            # the app's callback ran once per message
    # calls the client rejects fail with the client's own error, as without the adapter
    with pytest.raises(TypeError, match=r"at most 8 arguments \(9 given\)"):
        producer.produce(topic, b"v", b"k", 0, report, None, 0, [], 1)
    with pytest.raises(TypeError, match="'bogus' is an invalid keyword"):
        producer.produce(topic, b"v", bogus=1)

    consumer = confluent.TracedConsumer(confluent_kafka.Consumer({
        "bootstrap.servers": kafka_bootstrap, "group.id": "cg", "auto.offset.reset": "earliest"}), "cg",
        capture.tracer)
    consumer.subscribe([topic])
    seen = {}
    _consume_all(consumer, 3, lambda message: seen.update({message.key(): dict(message.headers())}))
    consumer.close()

    for key in (b"k0", b"k2"):
        assert seen[key]["x-app"] == b"1", key                   # the app's dict headers arrived
    assert all(h[HEADER_MSG_ID] and h["traceparent"].startswith(b"00-") for h in seen.values())
    events = capture.events()
    pubs = {e.msg_id: e.keys for e in events if e.type == EventType.PUB}
    assert sorted(pubs.values()) == ["k0", "k1", "k2"]
    assert {h[HEADER_MSG_ID].decode() for h in seen.values()} == set(pubs)
    # the consume events join the sends through the ids the headers carried
    assert sorted(pubs[e.msg_id] for e in events if e.type == EventType.SUB_AFTER) == ["k0", "k1", "k2"]


def test_the_configs_delivery_callback_still_runs(kafka_bootstrap, capture, topic):
    """A per-message callback replaces the config's on_delivery in the client; the adapter must not lose it."""
    config_reports, own_reports = [], []
    config = {"bootstrap.servers": kafka_bootstrap, "on_delivery": lambda err, msg: config_reports.append(msg.key())}
    wrapped = confluent.TracedProducer(confluent_kafka.Producer(config), capture.tracer, broker=kafka_bootstrap,
                                       on_delivery=config["on_delivery"])
    wrapped.produce(topic, b"v", key=b"w0")
    wrapped.produce(topic, b"v", key=b"w1", on_delivery=None)          # None: the client uses the config's
    wrapped.produce(topic, b"v", key=b"w2", on_delivery=lambda err, msg: own_reports.append(msg.key()))
    wrapped.flush(10)
    confluent.instrument(capture.tracer)
    try:
        instrumented = confluent_kafka.Producer(config)
        instrumented.produce(topic, b"v", key=b"i0")
        instrumented.flush(10)
    finally:
        confluent.uninstrument()
    assert sorted(config_reports) == [b"i0", b"w0", b"w1"]
    assert own_reports == [b"w2"]                                     # a message's own callback wins, as in the client
    assert sorted(e.keys for e in capture.events() if e.type == EventType.PUB) == ["i0", "w0", "w1", "w2"]
