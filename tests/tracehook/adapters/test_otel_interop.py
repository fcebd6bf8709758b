"""OpenTelemetry on either side of real Kafka and RabbitMQ messages, tracehook on the other: one trace.

In each test an app, inside an active OTel span, sends message A through tracehook's adapter and
message B with plain OTel (a producer span + the W3C propagator).  Then an OTel consumer (extracting
the context from the headers) and a tracehook consumer read both.  Every OTel span and every
tracehook event must be in the app's trace, each consumer a child of the send it read.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from fixtures.deps import require

require("opentelemetry.sdk.trace")  # the dev extra: a missing SDK fails the run

import pika  # noqa: E402
from fixtures.brokers import drain, to_end  # noqa: E402
from kafka import KafkaConsumer, KafkaProducer  # noqa: E402
from opentelemetry.sdk.trace import TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter  # noqa: E402
from opentelemetry.trace import SpanKind  # noqa: E402
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator  # noqa: E402

from tracehook import HEADER_MSG_ID, EventType, wire  # noqa: E402
from tracehook.adapters import kafka_python  # noqa: E402
from tracehook.adapters import pika as traced_pika  # noqa: E402
from tracehook.context import derived_msg_id  # noqa: E402

PROPAGATOR = TraceContextTextMapPropagator()


class KafkaHeaders:
    """OTel getter/setter for kafka-python headers (a list of (str, bytes)), as OTel's kafka instrumentation has."""

    def get(self, carrier: list[tuple[str, bytes]], key: str) -> list[str] | None:
        values = [v.decode() for k, v in carrier if k == key]
        return values or None

    def keys(self, carrier: list[tuple[str, bytes]]) -> list[str]:
        return [k for k, _ in carrier]

    def set(self, carrier: list[tuple[str, bytes]], key: str, value: str) -> None:
        carrier.append((key, value.encode()))


@pytest.fixture
def otel() -> Iterator[tuple[Any, InMemorySpanExporter]]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield provider.get_tracer("interop-test"), exporter
    provider.shutdown()


def hexes(span_context: Any) -> tuple[str, str]:
    return f"{span_context.trace_id:032x}", f"{span_context.span_id:016x}"


def check_one_trace(app_span: Any, exporter: InMemorySpanExporter, events: list[wire.Event],
                    sent_a: str, send_b: Any, b_msg_id: str) -> None:
    """The assertions both brokers share (A: tracehook producer, B: OTel producer)."""
    trace_id = hexes(app_span.get_span_context())[0]
    spans = {s.name: s for s in exporter.get_finished_spans()}
    assert {hexes(s.context)[0] for s in spans.values()} == {trace_id}
    # tracehook events: every one in the app's trace, found by both message ids.
    assert events and {wire.trace_id_of(e) for e in events} == {trace_id}
    (pub,) = [e for e in events if e.type == EventType.PUB]
    assert pub.msg_id == sent_a
    consumed = {(e.msg_id, e.type) for e in events if e.type != EventType.PUB}
    assert consumed == {(m, t) for m in (sent_a, b_msg_id) for t in (EventType.SUB_BEFORE, EventType.SUB_AFTER)}
    # A: the send is a child of the app's span; the OTel consumer a child of the send.
    assert spans["process A"].parent is not None and spans["process A"].parent.span_id == int(pub.span_id, 16)
    assert {e.span_id for e in events if e.msg_id == sent_a} == {pub.span_id}
    # B: tracehook's consumer names OTel's producer span as the send it continued.
    b_span = hexes(send_b.get_span_context())[1]
    assert {e.span_id for e in events if e.msg_id == b_msg_id} == {b_span}
    assert spans["process B"].parent is not None and f"{spans['process B'].parent.span_id:016x}" == b_span
    assert spans["send B"].parent is not None and spans["send B"].parent.span_id == app_span.get_span_context().span_id


@pytest.mark.kafka
@pytest.mark.slow
def test_kafka_one_trace_across_otel_and_tracehook(kafka_bootstrap, capture, topic, otel) -> None:
    tracer, exporter = otel
    plain = KafkaProducer(bootstrap_servers=kafka_bootstrap)
    traced = kafka_python.TracedProducer(KafkaProducer(bootstrap_servers=kafka_bootstrap), capture.tracer)
    with tracer.start_as_current_span("checkout") as app_span:
        traced.send(topic, b"A", key=b"A", partition=0).get(10)                # tracehook producer
        with tracer.start_as_current_span("send B", kind=SpanKind.PRODUCER) as send_b:
            headers: list[tuple[str, bytes]] = []
            PROPAGATOR.inject(headers, setter=KafkaHeaders())                  # OTel producer
            meta_b = plain.send(topic, b"B", key=b"B", headers=headers, partition=0).get(10)
    plain.close()
    traced.close()

    # An OTel consumer: the context from the headers, a consumer span per record.
    consumer = KafkaConsumer(topic, bootstrap_servers=kafka_bootstrap, group_id="otel",
                             auto_offset_reset="earliest", consumer_timeout_ms=5000)
    records = list(to_end(consumer))
    consumer.close()
    assert sorted(r.key for r in records) == [b"A", b"B"]
    sent_a = {r.key: dict(r.headers).get(HEADER_MSG_ID) for r in records}[b"A"].decode()
    for record in records:
        parent = PROPAGATOR.extract(record.headers, getter=KafkaHeaders())
        tracer.start_span(f"process {record.key.decode()}", context=parent, kind=SpanKind.CONSUMER).end()

    # tracehook's consumer: B has no tracehook-msg-id, so it is recorded under its derived id.
    th = kafka_python.TracedConsumer(KafkaConsumer(topic, bootstrap_servers=kafka_bootstrap, group_id="th",
                                                   auto_offset_reset="earliest", consumer_timeout_ms=5000),
                                     capture.tracer)
    assert len(list(to_end(th))) == 2
    th.close()
    events = capture.events()
    assert capture.tracer.stats()["dropped"].get("invalid", 0) == 0
    check_one_trace(app_span, exporter, events, sent_a, send_b, derived_msg_id(topic, 0, meta_b.offset))


@pytest.mark.rabbitmq
@pytest.mark.slow
def test_rabbitmq_one_trace_across_otel_and_tracehook(rabbitmq_url, capture, topic, otel) -> None:
    tracer, exporter = otel
    connection = pika.BlockingConnection(pika.URLParameters(rabbitmq_url))
    try:
        plain = connection.channel()
        plain.exchange_declare(topic, "fanout", auto_delete=True)
        for queue in (f"{topic}.otel", f"{topic}.th"):
            plain.queue_declare(queue, auto_delete=True)
            plain.queue_bind(queue, topic)
        traced = traced_pika.TracedChannel(connection.channel(), capture.tracer)
        with tracer.start_as_current_span("checkout") as app_span:
            traced.basic_publish(topic, "", b"A")                                  # tracehook producer
            with tracer.start_as_current_span("send B", kind=SpanKind.PRODUCER) as send_b:
                headers: dict[str, str] = {}
                PROPAGATOR.inject(headers)                                         # OTel producer
                # no tracehook header: the AMQP message-id names the message (OTel's messaging.message.id)
                plain.basic_publish(topic, "", b"B", pika.BasicProperties(headers=headers, message_id="order-B"))

        # An OTel consumer of one queue.
        sent: dict[bytes, str] = {}
        for _ in range(2):
            method, props, body = plain.basic_get(f"{topic}.otel", auto_ack=True)
            assert method is not None
            sent[body] = (props.headers or {}).get(HEADER_MSG_ID, "")
            parent = PROPAGATOR.extract(props.headers or {})
            tracer.start_span(f"process {body.decode()}", context=parent, kind=SpanKind.CONSUMER).end()

        # tracehook's consumer of the other.
        drain(traced, f"{topic}.th", lambda ch, method, props, body: ch.basic_ack(method.delivery_tag), 2)
    finally:
        connection.close()
    events = capture.events()
    assert capture.tracer.stats()["dropped"].get("invalid", 0) == 0
    check_one_trace(app_span, exporter, events, sent[b"A"], send_b, "order-B")

