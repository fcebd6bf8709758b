"""aiokafka adapter against a real Kafka broker."""

from __future__ import annotations

import asyncio
from collections import defaultdict

import aiokafka
import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

from tracehook import HEADER_MSG_ID, EventType, Status
from tracehook.adapters import aiokafka as traced_aiokafka

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

N = 12


def _consumer(bootstrap: str, topic: str, group: str) -> AIOKafkaConsumer:
    return AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group, auto_offset_reset="earliest",
                            enable_auto_commit=False)


async def test_send_and_consume_with_failures(kafka_bootstrap, capture, topic):
    producer = traced_aiokafka.TracedAIOProducer(AIOKafkaProducer(bootstrap_servers=kafka_bootstrap),
                                                 capture.tracer)
    await producer.start()
    try:
        metas = [await producer.send_and_wait(topic, b"m%d" % i, key=b"k%d" % i) for i in range(N)]
    finally:
        await producer.stop()
    failing = {f"k{i}" for i in range(0, N, 3)}
    consumer = traced_aiokafka.TracedAIOConsumer(_consumer(kafka_bootstrap, topic, "g1"), capture.tracer)
    await consumer.start()
    seen = []
    try:
        async for record in consumer:
            assert dict(record.headers)[HEADER_MSG_ID]
            if record.key.decode() in failing:
                consumer.fail(record, "nope")
            seen.append(record)
            if len(seen) == N:
                break
    finally:
        await consumer.stop()

    events = capture.events()
    pubs = {e.msg_id: e for e in events if e.type == EventType.PUB}
    assert sorted((e.queue, e.offset) for e in pubs.values()) == sorted((m.partition, m.offset) for m in metas)
    after = defaultdict(list)
    for e in events:
        if e.type == EventType.SUB_AFTER:
            after[e.msg_id].append((e.group, e.status, e.queue, e.offset))
    for msg_id, send in pubs.items():
        status = Status.FAILED if send.keys in failing else Status.OK
        assert after[msg_id] == [("g1", status, send.queue, send.offset)]


async def test_instrument_idempotent(kafka_bootstrap, capture, topic):
    original = AIOKafkaProducer.send
    traced_aiokafka.instrument(capture.tracer)
    traced_aiokafka.instrument(capture.tracer)
    try:
        producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap)
        await producer.start()
        await producer.send_and_wait(topic, b"x")
        with pytest.raises(TypeError):   # the client's own check of a non-bytes value, unchanged
            await producer.send(topic, "not bytes")
        await producer.stop()
        consumer = _consumer(kafka_bootstrap, topic, "inst")
        await consumer.start()
        record = await asyncio.wait_for(consumer.getone(), 30)
        await consumer.stop()
    finally:
        traced_aiokafka.uninstrument()
        traced_aiokafka.uninstrument()
    assert AIOKafkaProducer.send is original and aiokafka.AIOKafkaConsumer.getone.__name__ == "getone"
    assert dict(record.headers)[HEADER_MSG_ID]
    events = capture.events()
    assert sorted(e.type for e in events) == sorted([EventType.PUB, EventType.SUB_BEFORE, EventType.SUB_AFTER])
