"""aio-pika adapter against a real RabbitMQ node."""

from __future__ import annotations

import asyncio
from collections import defaultdict

import aio_pika
import pytest

from tracehook import EventType, Status
from tracehook.adapters import HEADER_KEYS
from tracehook.adapters import aio_pika as traced_aio_pika

pytestmark = [pytest.mark.rabbitmq, pytest.mark.slow]

N = 12


async def test_publish_and_consume_ack_requeue_dead_letter(rabbitmq_url, capture, topic):
    connection = await aio_pika.connect(rabbitmq_url)
    try:
        channel = await connection.channel()
        await channel.declare_exchange(f"{topic}.dlx", aio_pika.ExchangeType.FANOUT, auto_delete=True)
        queue = await channel.declare_queue(topic, auto_delete=True,
                                            arguments={"x-dead-letter-exchange": f"{topic}.dlx"})
        exchange = traced_aio_pika.TracedExchange(channel.default_exchange, capture.tracer)
        for i in range(N):
            await exchange.publish(aio_pika.Message(b"m%d" % i, headers={HEADER_KEYS: f"k{i}"}), topic)
        requeue_once = {f"k{i}" for i in range(0, N, 3)}
        dead = {f"k{i}" for i in range(1, N, 4)}
        requeued: set[str] = set()
        done = asyncio.Event()
        settled = []

        async def on_message(message):
            key = message.headers[HEADER_KEYS]
            if key in requeue_once and key not in requeued:
                requeued.add(key)
                await message.nack(requeue=True)
            elif key in dead:
                await message.reject(requeue=False)
                settled.append(key)
            else:
                async with message.process():
                    settled.append(key)
            if len(settled) == N:
                done.set()

        await traced_aio_pika.TracedQueue(queue, capture.tracer).consume(on_message)
        await asyncio.wait_for(done.wait(), 30)
    finally:
        await connection.close()
        traced_aio_pika.uninstrument()

    events = capture.events()
    pubs = {e.msg_id: e for e in events if e.type == EventType.PUB}
    assert len(pubs) == N and all(e.topic == topic and e.status == Status.OK for e in pubs.values())
    after = defaultdict(list)
    for e in events:
        if e.type == EventType.SUB_AFTER:
            after[e.msg_id].append((e.group, e.status))
    deads = {e.msg_id for e in events if e.type == EventType.DEAD}
    for msg_id, send in pubs.items():
        expected = [(topic, Status.RETRY_LATER)] if send.keys in requeue_once else []
        expected.append((topic, Status.FAILED if send.keys in dead else Status.OK))
        assert after[msg_id] == expected, send.keys
        assert (msg_id in deads) == (send.keys in dead)


async def test_instrument_idempotent_and_exceptions_unchanged(rabbitmq_url, capture, topic):
    original = aio_pika.Exchange.publish
    traced_aio_pika.instrument(capture.tracer)
    traced_aio_pika.instrument(capture.tracer)
    connection = await aio_pika.connect(rabbitmq_url)
    try:
        channel = await connection.channel()
        queue = await channel.declare_queue(topic, auto_delete=True)
        await channel.default_exchange.publish(aio_pika.Message(b"x"), topic)
        failed = asyncio.Event()

        async def handler(message):
            failed.set()   # the span settles in this same task step, before the waiter resumes
            raise RuntimeError("handler failed")

        await queue.consume(handler, no_ack=True)
        await asyncio.wait_for(failed.wait(), 30)
    finally:
        await connection.close()
        traced_aio_pika.uninstrument()
        traced_aio_pika.uninstrument()
    assert aio_pika.Exchange.publish is original and not traced_aio_pika.is_instrumented()
    events = capture.events()
    assert [e.type for e in events] == [EventType.PUB, EventType.SUB_BEFORE, EventType.SUB_AFTER]
    assert events[2].status == Status.EXCEPTION and "handler failed" in events[2].error
