"""Kept records through every adapter on its real broker (issue 43): the body (exact up to the cap, cut and
flagged past it), the raw key and headers as the client sent them, and props only through the allowlist."""

from __future__ import annotations

import asyncio
import datetime
import uuid

import pytest

import tracehook
from tracehook import wire
from tracehook.adapters import PROP_EXCHANGE, PROP_ROUTING_KEY
from tracehook.wire import EventType

pytestmark = pytest.mark.slow
BODY = b"order 42: " + bytes(range(256)) * 3  # binary, compresses a little, 778 bytes
LONG = b"L" * 3000  # past the 1 KiB cap


@pytest.fixture
def capture_kept(capture):
    """The adapters' capture with bodies kept for topics starting "keep-" and two props allowlisted."""
    stub, old = capture.stub, capture.tracer
    capture.tracer = tracehook.Tracer(tracehook.TracerConfig(
        app="kept-test", collectors=[stub.url], linger_s=0.01, flush_at_exit=False,
        body_topics=lambda topic: topic.startswith("keep-"),
        capture_props={"orderId", "amqp.correlation_id", "amqp.app_id"}))
    yield capture
    capture.tracer.close()
    capture.tracer = old


def _pubs(capture) -> dict[str, wire.Event]:
    return {e.keys: e for e in capture.of(EventType.PUB)}


def _check_kafka(capture, topic: str, untraced: str) -> None:
    pubs = _pubs(capture)
    whole, long, other = pubs["k-whole"], pubs["k-long"], pubs["k-other"]
    assert wire.body_bytes(whole) == BODY and whole.raw_key == b"k-whole" and whole.body_len == len(BODY)
    names = [name for name, _ in whole.raw_headers]
    assert names[:2] == ["orderId", "secret"] and "tracehook-msg-id" in names and "traceparent" in names
    assert dict(map(tuple, whole.raw_headers))["secret"] == b"\xff\x00"
    assert whole.props == {"orderId": "42"}  # "secret" is not allowlisted
    assert wire.body_bytes(long) == LONG[:1024] and long.body_flags & wire.BODY_TRUNCATED
    assert long.body_len == len(LONG)
    assert (other.topic, other.body, other.raw_key, other.raw_headers) == (untraced, None, None, None)
    consumed = [e for e in capture.of(EventType.SUB_BEFORE) if e.topic == topic]
    assert consumed and all(e.props == {"orderId": "42"} and e.body is None for e in consumed)


def _kafka_headers() -> list[tuple[str, bytes]]:
    return [("orderId", b"42"), ("secret", b"\xff\x00")]


@pytest.mark.kafka
def test_kafka_python(kafka_bootstrap, capture_kept):
    from kafka import KafkaConsumer, KafkaProducer

    from tracehook.adapters import kafka_python

    topic, other = f"keep-{uuid.uuid4().hex[:8]}", f"t-{uuid.uuid4().hex[:8]}"
    producer = kafka_python.TracedProducer(KafkaProducer(bootstrap_servers=kafka_bootstrap), capture_kept.tracer)
    producer.send(topic, BODY, key=b"k-whole", headers=_kafka_headers()).get(10)
    producer.send(topic, LONG, key=b"k-long", headers=_kafka_headers()).get(10)
    producer.send(other, b"not kept", key=b"k-other", headers=_kafka_headers()).get(10)
    producer.close()
    consumer = kafka_python.TracedConsumer(KafkaConsumer(topic, bootstrap_servers=kafka_bootstrap, group_id="g",
                                                         auto_offset_reset="earliest", consumer_timeout_ms=5000),
                                           capture_kept.tracer)
    assert len(list(consumer)) == 2
    consumer.close()
    _check_kafka(capture_kept, topic, other)


@pytest.mark.kafka
def test_aiokafka(kafka_bootstrap, capture_kept):
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

    from tracehook.adapters import aiokafka as traced

    topic, other = f"keep-{uuid.uuid4().hex[:8]}", f"t-{uuid.uuid4().hex[:8]}"

    async def run() -> None:
        producer = traced.TracedAIOProducer(AIOKafkaProducer(bootstrap_servers=kafka_bootstrap), capture_kept.tracer)
        await producer.start()
        await producer.send_and_wait(topic, BODY, key=b"k-whole", headers=_kafka_headers())
        await producer.send_and_wait(topic, LONG, key=b"k-long", headers=_kafka_headers())
        await producer.send_and_wait(other, b"not kept", key=b"k-other", headers=_kafka_headers())
        await producer.stop()
        consumer = traced.TracedAIOConsumer(AIOKafkaConsumer(topic, bootstrap_servers=kafka_bootstrap, group_id="g",
                                                             auto_offset_reset="earliest"), capture_kept.tracer)
        await consumer.start()
        for _ in range(2):
            await asyncio.wait_for(consumer.getone(), 20)
        await consumer.stop()

    asyncio.run(run())
    _check_kafka(capture_kept, topic, other)


@pytest.mark.kafka
def test_confluent(kafka_bootstrap, capture_kept):
    import confluent_kafka

    from tracehook.adapters import confluent

    topic, other = f"keep-{uuid.uuid4().hex[:8]}", f"t-{uuid.uuid4().hex[:8]}"
    producer = confluent.TracedProducer(confluent_kafka.Producer({"bootstrap.servers": kafka_bootstrap}),
                                        capture_kept.tracer)
    producer.produce(topic, BODY, key=b"k-whole", headers=_kafka_headers())
    producer.produce(topic, LONG, key=b"k-long", headers=_kafka_headers())
    producer.produce(other, b"not kept", key=b"k-other", headers=_kafka_headers())
    assert producer.flush(20) == 0
    consumer = confluent.TracedConsumer(confluent_kafka.Consumer({
        "bootstrap.servers": kafka_bootstrap, "group.id": "g", "auto.offset.reset": "earliest"}), "g",
        capture_kept.tracer)
    consumer.subscribe([topic])
    got = 0
    while got < 2:
        message = consumer.poll(20)
        assert message is not None
        got += message.error() is None
    consumer.close()
    _check_kafka(capture_kept, topic, other)


def _check_amqp(capture, topic: str) -> None:
    pubs = {e.msg_id: e for e in capture.of(EventType.PUB) if e.topic == topic}
    (whole,) = [e for e in pubs.values() if e.body_len == len(BODY)]
    (long,) = [e for e in pubs.values() if e.body_len == len(LONG)]
    assert wire.body_bytes(whole) == BODY and whole.raw_key is None
    table = {name: wire.amqp_header_value(value) for name, value in whole.raw_headers}
    assert table["orderId"] == 42 and table["nested"] == {"a": [1, "x"]} and table["tracehook-msg-id"] == whole.msg_id
    assert table["when"] == datetime.datetime(2026, 1, 2, 3, 4, 5, tzinfo=datetime.UTC)
    assert whole.props == {PROP_EXCHANGE: "", PROP_ROUTING_KEY: topic, "orderId": "42", "amqp.correlation_id": "c-1"}
    assert wire.body_bytes(long) == LONG[:1024] and long.body_flags & wire.BODY_TRUNCATED
    consumed = [e for e in capture.of(EventType.SUB_BEFORE) if e.topic == topic]
    assert len(consumed) == 2 and all(e.props["orderId"] == "42" and e.props["amqp.correlation_id"] == "c-1"
                                      and e.props[PROP_ROUTING_KEY] == topic for e in consumed)


AMQP_HEADERS = {"orderId": 42, "nested": {"a": [1, "x"]}, "when": datetime.datetime(2026, 1, 2, 3, 4, 5),
                PROP_EXCHANGE: "a header may carry a reserved name: the recorded prop is not replaced"}


@pytest.mark.rabbitmq
def test_pika(rabbitmq_url, capture_kept):
    import pika

    from tracehook.adapters import pika as traced_pika

    topic = f"keep-{uuid.uuid4().hex[:8]}"
    connection = pika.BlockingConnection(pika.URLParameters(rabbitmq_url))
    channel = traced_pika.TracedChannel(connection.channel(), capture_kept.tracer)
    channel.queue_declare(topic, auto_delete=True)
    for body in (BODY, LONG):
        channel.basic_publish("", topic, body, pika.BasicProperties(headers=dict(AMQP_HEADERS), correlation_id="c-1"))
    seen = []

    def on_message(ch, method, properties, body):
        seen.append(body)
        ch.basic_ack(method.delivery_tag)
        if len(seen) == 2:
            ch.stop_consuming()

    channel.basic_consume(topic, on_message)
    connection.call_later(20, channel.stop_consuming)
    channel.start_consuming()
    connection.close()
    assert seen == [BODY, LONG]
    _check_amqp(capture_kept, topic)


@pytest.mark.rabbitmq
def test_aio_pika(rabbitmq_url, capture_kept):
    import aio_pika

    from tracehook.adapters import aio_pika as traced

    topic = f"keep-{uuid.uuid4().hex[:8]}"

    async def run() -> list[bytes]:
        connection = await aio_pika.connect(rabbitmq_url)
        channel = await connection.channel()
        queue = await channel.declare_queue(topic, auto_delete=True)
        exchange = traced.TracedExchange(channel.default_exchange, capture_kept.tracer)
        for body in (BODY, LONG):
            await exchange.publish(aio_pika.Message(body, headers=dict(AMQP_HEADERS), correlation_id="c-1"), topic)
        seen: list[bytes] = []
        done = asyncio.Event()

        async def on_message(message):
            seen.append(message.body)
            await message.ack()
            if len(seen) == 2:
                done.set()

        await traced.TracedQueue(queue, capture_kept.tracer).consume(on_message)
        await asyncio.wait_for(done.wait(), 20)
        await connection.close()
        return seen

    assert asyncio.run(run()) == [BODY, LONG]
    _check_amqp(capture_kept, topic)
