"""aio-pika adapter against a real RabbitMQ node."""

from __future__ import annotations

import asyncio
import gc
from collections import defaultdict

import aio_pika
import pytest
import yarl

from tracehook import EventType, Status
from tracehook.adapters import HEADER_KEYS
from tracehook.adapters import aio_pika as traced_aio_pika
from tracehook.hooks import ConsumeSpan

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


def _unfinished_spans() -> int:
    gc.collect()
    return sum(1 for o in gc.get_objects() if isinstance(o, ConsumeSpan) and not o.finished)


async def test_multiple_settles_earlier_deliveries_without_instrument(rabbitmq_url, capture, topic):
    leftover = _unfinished_spans()
    connection = await aio_pika.connect(rabbitmq_url)
    try:
        channel = await connection.channel()
        queue = await channel.declare_queue(topic, auto_delete=True)
        exchange = traced_aio_pika.TracedExchange(channel.default_exchange, capture.tracer)
        for i in range(7):
            await exchange.publish(aio_pika.Message(b"m", headers={HEADER_KEYS: f"k{i}"}), topic)
        # another part of the app instrumenting and un-instrumenting must not stop the explicit wrapper
        traced_aio_pika.instrument(capture.tracer)
        traced_aio_pika.uninstrument()
        received: list = []
        all_in = asyncio.Event()

        async def hold(message):   # settled below, several at a time
            received.append(message)
            if len(received) == 7:
                all_in.set()

        await traced_aio_pika.TracedQueue(queue, capture.tracer).consume(hold)
        await asyncio.wait_for(all_in.wait(), 30)
        await received[2].ack(multiple=True)                    # k0..k2
        await received[4].nack(multiple=True, requeue=False)    # k3, k4
        await received[5].reject(requeue=False)                 # k5 only
        await received[6].ack()                                 # k6 only
        del received[:]
        assert _unfinished_spans() == leftover                  # settled spans are not kept anywhere
    finally:
        await connection.close()

    outcomes = {e.keys: e.status for e in capture.events() if e.type == EventType.SUB_AFTER}
    assert outcomes == {"k0": Status.OK, "k1": Status.OK, "k2": Status.OK,
                        "k3": Status.FAILED, "k4": Status.FAILED, "k5": Status.FAILED, "k6": Status.OK}


async def test_routing_keys_broker_and_redelivery_counts(rabbitmq_url, capture, topic):
    """Two routing keys of one topic exchange stay apart, the broker is host:port, and a message
    requeued three times counts retry 0..3."""
    connection = await aio_pika.connect(rabbitmq_url)
    try:
        channel = await connection.channel()
        exchange = await channel.declare_exchange(topic, aio_pika.ExchangeType.TOPIC, auto_delete=True)
        queue = await channel.declare_queue(f"{topic}.orders", auto_delete=True)
        await queue.bind(exchange, "order.#")
        traced = traced_aio_pika.TracedExchange(exchange, capture.tracer)
        for key in ("order.created", "order.paid"):
            await traced.publish(aio_pika.Message(b"m", headers={HEADER_KEYS: key}), key)
        paid_attempts: list[bool] = []
        done = asyncio.Event()

        async def on_message(message):
            if message.routing_key == "order.created":
                await message.ack()
                return
            paid_attempts.append(message.redelivered)
            if len(paid_attempts) <= 3:
                await message.nack(requeue=True)
            else:
                await message.ack()
                done.set()

        await traced_aio_pika.TracedQueue(queue, capture.tracer).consume(on_message)
        await asyncio.wait_for(done.wait(), 30)
    finally:
        await connection.close()
    assert paid_attempts == [False, True, True, True]   # the broker says only yes/no

    events = capture.events()
    url = yarl.URL(rabbitmq_url)
    broker = f"{url.host}:{url.port}"
    sends = {e.props["amqp.routing_key"]: e for e in events if e.type == EventType.PUB}
    assert sorted(sends) == ["order.created", "order.paid"]
    for key, send in sends.items():
        assert (send.topic, send.keys, send.broker) == (topic, key, broker)
        assert send.props == {"amqp.exchange": topic, "amqp.routing_key": key}
    consumed = [e for e in events if e.type == EventType.SUB_AFTER]
    assert {(e.topic, e.broker, e.props["amqp.routing_key"]) for e in consumed} == {
        (topic, broker, "order.created"), (topic, broker, "order.paid")}
    paid = [(e.retry, e.status) for e in consumed if e.keys == "order.paid"]
    assert paid == [(0, Status.RETRY_LATER), (1, Status.RETRY_LATER), (2, Status.RETRY_LATER), (3, Status.OK)]
