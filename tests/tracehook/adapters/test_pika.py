"""pika adapter against a real RabbitMQ node."""

from __future__ import annotations

from collections import defaultdict

import pika
import pytest
from fixtures.brokers import drain

from tracehook import HEADER_MSG_ID, EventType, Status
from tracehook.adapters import HEADER_KEYS
from tracehook.adapters import pika as traced_pika

pytestmark = [pytest.mark.rabbitmq, pytest.mark.slow]

N = 20


@pytest.fixture
def connection(rabbitmq_url):
    conn = pika.BlockingConnection(pika.URLParameters(rabbitmq_url))
    yield conn
    conn.close()


def test_publish_confirm_and_two_queues_retry_and_dead_letter(connection, capture, topic):
    channel = traced_pika.TracedChannel(connection.channel(), capture.tracer)
    channel.confirm_delivery()
    channel.exchange_declare(topic, "fanout", auto_delete=True)
    channel.exchange_declare(f"{topic}.dlx", "fanout", auto_delete=True)
    retry_q, dlq_q, parking = f"{topic}.retry", f"{topic}.dlq", f"{topic}.parking"
    channel.queue_declare(retry_q, auto_delete=True)
    channel.queue_declare(dlq_q, auto_delete=True, arguments={"x-dead-letter-exchange": f"{topic}.dlx"})
    channel.queue_declare(parking, auto_delete=True)
    for queue in (retry_q, dlq_q):
        channel.queue_bind(queue, topic)
    channel.queue_bind(parking, f"{topic}.dlx")

    caller_props = pika.BasicProperties(headers={"x-app": "1"})
    for i in range(N):
        props = pika.BasicProperties(headers={"x-app": "1", HEADER_KEYS: f"k{i}"})
        channel.basic_publish(topic, "", b"m%d" % i, props)
    channel.basic_publish(topic, "", b"extra", caller_props)
    assert caller_props.headers == {"x-app": "1"}  # the caller's properties are not changed
    # an unroutable mandatory publish under confirms: pika's own exception, and a FAILED send
    with pytest.raises(pika.exceptions.UnroutableError):
        channel.basic_publish("", f"{topic}.nowhere", b"lost", mandatory=True)

    failing = {f"k{i}" for i in range(0, N, 3)}
    dead = {f"k{i}" for i in range(1, N, 4)}
    nacked: set[str] = set()

    def on_retry(ch, method, props, body):
        key = props.headers.get(HEADER_KEYS, "")
        if key in failing and key not in nacked:
            nacked.add(key)
            ch.basic_nack(method.delivery_tag, requeue=True)
        else:
            ch.basic_ack(method.delivery_tag)

    def on_dlq(ch, method, props, body):
        if props.headers.get(HEADER_KEYS, "") in dead:
            ch.basic_reject(method.delivery_tag, requeue=False)
        else:
            ch.basic_ack(method.delivery_tag)

    drain(channel, retry_q, on_retry, N + 1 + len(failing))
    drain(channel, dlq_q, on_dlq, N + 1)
    parked = channel.queue_declare(parking, passive=True).method.message_count
    assert parked == len(dead)

    events = capture.events()
    pubs = {e.msg_id: e for e in events if e.type == EventType.PUB}
    assert len(pubs) == N + 2
    lost = [e for e in pubs.values() if e.status != Status.OK]
    assert [(e.topic, e.status) for e in lost] == [(f"{topic}.nowhere", Status.FAILED)]
    outcomes: dict[tuple[str, str], list[int]] = defaultdict(list)
    for e in events:
        if e.type == EventType.SUB_AFTER:
            outcomes[(e.msg_id, e.group)].append(e.status)
    deads = {(e.msg_id, e.group) for e in events if e.type == EventType.DEAD}
    for msg_id, send in pubs.items():
        if send.status != Status.OK:
            continue
        assert send.topic == topic
        retry_expected = [Status.RETRY_LATER, Status.OK] if send.keys in failing else [Status.OK]
        assert outcomes[(msg_id, retry_q)] == retry_expected, send.keys
        assert outcomes[(msg_id, dlq_q)] == ([Status.FAILED] if send.keys in dead else [Status.OK]), send.keys
        assert ((msg_id, dlq_q) in deads) == (send.keys in dead)
    assert len(deads) == len(dead)


def test_instrument_traces_plain_channels_and_callback_exceptions(connection, capture, topic):
    original = pika.adapters.blocking_connection.BlockingChannel.basic_publish
    traced_pika.instrument(capture.tracer)
    traced_pika.instrument(capture.tracer)
    try:
        channel = connection.channel()
        channel.queue_declare(topic, auto_delete=True)
        channel.basic_publish("", topic, b"x")

        class Boom(Exception):
            pass

        def handler(ch, method, props, body):
            assert props.headers[HEADER_MSG_ID]
            raise Boom("handler failed")

        channel.basic_consume(topic, handler, auto_ack=True)
        with pytest.raises(Boom):   # the app's exception reaches it unchanged
            connection.process_data_events(time_limit=5)
    finally:
        traced_pika.uninstrument()
        traced_pika.uninstrument()
    assert pika.adapters.blocking_connection.BlockingChannel.basic_publish is original
    events = capture.events()
    assert [e.type for e in events] == [EventType.PUB, EventType.SUB_BEFORE, EventType.SUB_AFTER]
    assert events[2].status == Status.EXCEPTION and "handler failed" in events[2].error
    assert events[0].topic == events[1].topic == topic and events[1].group == topic


def test_multiple_settles_every_open_delivery(connection, capture, topic):
    channel = traced_pika.TracedChannel(connection.channel(), capture.tracer)
    channel.exchange_declare(f"{topic}.dlx", "fanout", auto_delete=True)
    # exclusive, not auto_delete: the queue must outlive the first consumer
    channel.queue_declare(topic, exclusive=True, arguments={"x-dead-letter-exchange": f"{topic}.dlx"})
    for i in range(9):
        channel.basic_publish("", topic, b"m", pika.BasicProperties(headers={HEADER_KEYS: f"k{i}"}))
    tags: dict[str, int] = {}

    def hold(ch, method, props, body):   # settled below, several at a time
        tags[props.headers[HEADER_KEYS]] = method.delivery_tag

    drain(channel, topic, hold, 9)
    channel.basic_ack(tags["k2"], multiple=True)              # k0..k2: up to and including the tag
    channel.basic_nack(0, multiple=True, requeue=True)        # k3..k8: "all outstanding"
    drain(channel, topic, hold, 6)                            # the requeued ones come back
    channel.basic_nack(0, multiple=True, requeue=False)       # all outstanding again, dead-lettered
    channel.basic_ack(0, multiple=True)                       # nothing left: settles nothing

    outcomes: dict[str, list[int]] = defaultdict(list)
    deads = []
    for e in capture.events():
        if e.type == EventType.SUB_AFTER:
            outcomes[e.keys].append(e.status)
        elif e.type == EventType.DEAD:
            deads.append(e.keys)
    assert outcomes == {f"k{i}": [Status.OK] if i < 3 else [Status.RETRY_LATER, Status.FAILED] for i in range(9)}
    assert sorted(deads) == [f"k{i}" for i in range(3, 9)]


def test_routing_keys_recorded_and_redeliveries_counted(connection, capture, topic, rabbitmq_url):
    """Two routing keys of one topic exchange stay apart; a message requeued three times, then
    dead-lettered back into its own queue (a retry loop), counts retry 0..4."""
    channel = traced_pika.TracedChannel(connection.channel(), capture.tracer)
    channel.exchange_declare(topic, "topic", auto_delete=True)
    queue = f"{topic}.orders"
    # exclusive, not auto_delete: the queue must outlive the consumer; it dead-letters into itself
    channel.queue_declare(queue, exclusive=True,
                          arguments={"x-dead-letter-exchange": "", "x-dead-letter-routing-key": queue})
    channel.queue_bind(queue, topic, "order.#")
    for key in ("order.created", "order.paid"):
        channel.basic_publish(topic, key, b"m", pika.BasicProperties(headers={HEADER_KEYS: key}))
    paid_attempts = []

    def on_message(ch, method, props, body):
        if props.headers[HEADER_KEYS] == "order.created":
            ch.basic_ack(method.delivery_tag)
            return
        paid_attempts.append(method.redelivered)
        if len(paid_attempts) <= 3:
            ch.basic_nack(method.delivery_tag, requeue=True)
        elif len(paid_attempts) == 4:
            ch.basic_reject(method.delivery_tag, requeue=False)   # back into the queue through x-death
        else:
            ch.basic_ack(method.delivery_tag)

    drain(channel, queue, on_message, 6)
    assert paid_attempts == [False, True, True, True, False]   # the broker says only yes/no

    events = capture.events()
    amqp = {(e.props or {}).get("amqp.routing_key"): e for e in events if e.type == EventType.PUB}
    assert sorted(amqp) == ["order.created", "order.paid"]
    url = pika.URLParameters(rabbitmq_url)
    for key, send in amqp.items():
        assert (send.topic, send.keys, send.props) == (topic, key, {"amqp.exchange": topic, "amqp.routing_key": key})
        assert send.broker == f"{url.host}:{url.port}"
    created = [e for e in events if e.type == EventType.SUB_BEFORE and e.keys == "order.created"]
    assert [(e.topic, e.props, e.retry) for e in created] == [(topic, amqp["order.created"].props, 0)]
    paid = [e for e in events if e.type == EventType.SUB_AFTER and e.keys == "order.paid"]
    assert [(e.retry, e.status) for e in paid] == [
        (0, Status.RETRY_LATER), (1, Status.RETRY_LATER), (2, Status.RETRY_LATER), (3, Status.FAILED), (4, Status.OK)]
    # the dead-lettered copy comes through the default exchange: its delivery says so
    assert [e.topic for e in paid] == [topic] * 4 + [queue]
    assert paid[-1].props == {"amqp.exchange": "", "amqp.routing_key": queue}
