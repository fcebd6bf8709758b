"""RabbitMQ apps traced only by OpenTelemetry (``opentelemetry-instrumentation-pika``) → OTLP/HTTP →
collector → index → lookups.

The publisher sets AMQP ``message_id`` (the instrumentation records it as the message id); the
consumer's handler spans become consume attempts of the service (pika gives no queue name),
failed where the handler recorded an exception on its span.
"""

from __future__ import annotations

from typing import Any

import pika
import pytest
from adapter_helpers import collect_and_index_url, trace_query
from fixtures.brokers import drain
from fixtures.ports import free_port
from opentelemetry import trace
from opentelemetry.instrumentation.pika import PikaInstrumentor
from otel_helpers import instrumented, metric, otel_provider

from collector.query import backtrack
from tracehook.wire import Status

pytestmark = [pytest.mark.rabbitmq, pytest.mark.slow]

N = 12
FAILING = {f"m{i}" for i in range(0, N, 4)}


def test_pika_otel_app_found_by_id_and_time_with_outcomes(rabbitmq_url, tmp_path) -> None:
    queue = f"otel-{free_port()}"
    counts: dict[str, float] = {}

    def on_message(ch: Any, method: Any, props: Any, body: bytes) -> None:
        if props.message_id in FAILING:
            # As an app reports a failure on the consumer span the instrumentation made current.
            span = trace.get_current_span()
            span.record_exception(ValueError(f"bad order {props.message_id}"))
            span.set_status(trace.Status(trace.StatusCode.ERROR))
            ch.basic_nack(method.delivery_tag, requeue=False)
        else:
            ch.basic_ack(method.delivery_tag)

    def run(url: str) -> None:
        with otel_provider(url, "billing-otel") as provider:
            instrumentor = PikaInstrumentor()
            instrumentor.instrument(tracer_provider=provider)
            try:
                connection = pika.BlockingConnection(pika.URLParameters(rabbitmq_url))
                channel = connection.channel()
                channel.queue_declare(queue, auto_delete=True)
                for i in range(N):  # the default exchange: the destination is the routing key (the queue)
                    channel.basic_publish("", queue, b"order %d" % i, pika.BasicProperties(message_id=f"m{i}"))
                drain(channel, queue, on_message, N)
                connection.close()
            finally:
                instrumentor.uninstrument()
        counts["accepted"] = metric(url, "tracehook_otlp_spans_accepted_total")
        counts["nested"] = metric(url, 'tracehook_otlp_spans_skipped_total{reason="nested_send"}')

    store_url = collect_and_index_url(tmp_path, run)
    # pika's instrumentation makes two nested send spans per publish: one send is kept. (Exact
    # counts would depend on both landing in one export, which is almost but not always so.)
    assert counts["accepted"] + counts["nested"] == 3 * N and counts["nested"] > 0
    with trace_query(store_url) as query:
        for i in range(N):
            msg_id = f"m{i}"
            trace_ = query.get_trace(msg_id)
            assert trace_ is not None and trace_.send is not None, msg_id
            assert trace_.topic == queue and trace_.send["status"] == Status.OK
            [attempt] = trace_.consumes["billing-otel"]
            if msg_id in FAILING:
                assert attempt["status"] == Status.EXCEPTION
                assert attempt["after"]["error"] == f"ValueError: bad order {msg_id}"
            else:
                assert attempt["status_name"] == "PENDING"  # a receive span without error: received
            # The consumer continued the publisher's trace.
            assert trace_.send["trace_id"] == attempt["before"]["trace_id"] == trace_.trace_id
        listed = query.by_time(queue, 0, 2**62, 100).items
        assert sorted(i.msg_id for i in listed) == sorted(f"m{i}" for i in range(N))
        # The replay list answers from the spans too: receive spans alone never say "consumed".
        replay = {i.msg_id: i.status for i in backtrack.iter_replay(query, queue, "billing-otel", 0, 2**62)}
        assert replay == {f"m{i}": "EXCEPTION" if f"m{i}" in FAILING else "PENDING" for i in range(N)}


def test_aio_pika_otel_app_exception_in_the_callback_is_a_failed_attempt(rabbitmq_url, tmp_path) -> None:
    import asyncio

    import aio_pika
    from opentelemetry.instrumentation.aio_pika import AioPikaInstrumentor

    queue_name = f"otel-aio-{free_port()}"

    async def app() -> None:
        connection = await aio_pika.connect_robust(rabbitmq_url)
        async with connection:
            channel = await connection.channel()
            queue = await channel.declare_queue(queue_name, auto_delete=True)
            for i in range(N):
                await channel.default_exchange.publish(aio_pika.Message(b"order %d" % i, message_id=f"a{i}"),
                                                       routing_key=queue_name)
            done = asyncio.Event()
            seen: list[str] = []

            async def on_message(message: aio_pika.abc.AbstractIncomingMessage) -> None:
                async with message.process(requeue=False):
                    seen.append(message.message_id or "")
                    if len(seen) == N:
                        done.set()
                    if message.message_id in {f"a{i}" for i in range(0, N, 4)}:
                        raise ValueError(f"bad order {message.message_id}")  # the span records it

            await queue.consume(on_message)
            await asyncio.wait_for(done.wait(), 30)

    def run(url: str) -> None:
        with otel_provider(url, "billing-aio") as provider:
            with instrumented(AioPikaInstrumentor(), provider):
                asyncio.run(app())

    store_url = collect_and_index_url(tmp_path, run)
    with trace_query(store_url) as query:
        for i in range(N):
            msg_id = f"a{i}"
            trace_ = query.get_trace(msg_id)
            assert trace_ is not None and trace_.send is not None and trace_.topic == queue_name, msg_id
            [attempt] = trace_.consumes["billing-aio"]
            if i % 4 == 0:
                assert (attempt["status"], attempt["after"]["error"]) == (Status.EXCEPTION,
                                                                          f"ValueError: bad order {msg_id}")
            else:
                assert attempt["after"] is None
