"""Kafka apps traced only by OpenTelemetry → OTLP/HTTP → collector → index → lookups.

kafka-python with ``opentelemetry-instrumentation-kafka-python``: its send span ends before
the broker assigns an offset, so sends cannot be placed (reported as rejected, counted); its
receive spans carry no offset either, so the app's ``consume_hook`` adds offset, key and
group (docs/otel.md). Messages are then found by the derived id ``kafka:topic/partition/offset``,
by key, by topic + time, and offsets at a time answer per partition.
"""

from __future__ import annotations

from typing import Any

import pytest
from adapter_helpers import collect_and_index_url, trace_query
from fixtures.ports import free_port
from kafka import KafkaConsumer, KafkaProducer
from kafka.admin import KafkaAdminClient, NewTopic
from opentelemetry.instrumentation.kafka import KafkaInstrumentor
from otel_helpers import instrumented, metric, otel_provider

from collector.server.otlp import derived_msg_id

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

N = 18


def _topic(bootstrap: str) -> str:
    topic = f"otel-{free_port()}"
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    admin.create_topics([NewTopic(topic, 3, 1)])
    admin.close()
    return topic


def _consume_all(consumer: KafkaConsumer, count: int) -> list[Any]:
    records = []
    for record in consumer:  # consumer_timeout_ms ends a hang; the loop normally stops at count
        records.append(record)
        if len(records) == count:
            break
    return records


def test_kafka_python_otel_app_found_by_derived_id_key_time_and_offsets(kafka_bootstrap, tmp_path) -> None:
    topic = _topic(kafka_bootstrap)
    metas: dict[str, Any] = {}
    traceparents: dict[str, str] = {}
    counts: dict[str, float] = {}

    def consume_hook(span: Any, record: Any, args: Any, kwargs: Any) -> None:
        # What the instrumentation leaves out; the app knows it (docs/otel.md).
        span.set_attribute("messaging.kafka.message.offset", record.offset)
        span.set_attribute("messaging.kafka.message.key", record.key.decode())
        span.set_attribute("messaging.consumer.group.name", "billing")
        span.set_attribute("tracehook.store_time_ms", record.timestamp)  # places the message (no traced send)

    def run(url: str) -> None:
        with otel_provider(url, "shop-otel") as provider:
            instrumentor = KafkaInstrumentor()
            instrumentor.instrument(tracer_provider=provider, consume_hook=consume_hook)
            try:
                producer = KafkaProducer(bootstrap_servers=kafka_bootstrap)
                futures = {f"k{i}": producer.send(topic, b"m%d" % i, key=b"k%d" % i) for i in range(N)}
                metas.update({key: f.get(10) for key, f in futures.items()})
                producer.close()
                consumer = KafkaConsumer(topic, bootstrap_servers=kafka_bootstrap, group_id="billing",
                                         auto_offset_reset="earliest", consumer_timeout_ms=20_000)
                for record in _consume_all(consumer, N):
                    traceparents[record.key.decode()] = dict(record.headers)["traceparent"].decode()
                consumer.close()
            finally:
                instrumentor.uninstrument()
        counts["accepted"] = metric(url, "tracehook_otlp_spans_accepted_total")
        counts["no_message_id"] = metric(url, 'tracehook_otlp_spans_skipped_total{reason="no_message_id"}')

    store_url = collect_and_index_url(tmp_path, run)
    assert len(traceparents) == N
    assert counts == {"accepted": N, "no_message_id": N}  # every receive placed, every send counted
    ids = {key: derived_msg_id(topic, m.partition, m.offset) for key, m in metas.items()}
    with trace_query(store_url) as query:
        for key, msg_id in ids.items():
            trace = query.get_trace(msg_id)
            assert trace is not None, key
            assert (trace.topic, trace.queue, trace.offset, trace.keys) == (
                topic, metas[key].partition, metas[key].offset, key)
            [attempt] = trace.consumes["billing"]
            assert attempt["before"] is not None
            # The consumer span continued the producer's trace: its trace id is the one in the headers.
            assert trace.trace_id == traceparents[key].split("-")[1] and not trace.send_traced
            [found] = query.by_key(topic, key, 0, 2**62, 10).items
            assert found.msg_id == msg_id
        listed = query.by_time(topic, 0, 2**62, 100).items
        assert sorted(i.msg_id for i in listed) == sorted(ids.values())
        per_partition = {p: sum(1 for m in metas.values() if m.partition == p) for p in range(3)}
        assert query.offsets_at(topic, 0) == {p: 0 for p, n in per_partition.items() if n}
        assert query.offsets_at(topic, 2**62) == {p: n for p, n in per_partition.items() if n}


def test_aiokafka_and_confluent_consumers_land_on_the_same_derived_ids(kafka_bootstrap, tmp_path) -> None:
    """aiokafka (producer and group "billing") and confluent-kafka (another service) on one topic:
    both instrumentations' consume spans join under each record's derived id."""
    import asyncio

    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from confluent_kafka import Consumer
    from opentelemetry.instrumentation.aiokafka import AIOKafkaInstrumentor
    from opentelemetry.instrumentation.confluent_kafka import ConfluentKafkaInstrumentor

    topic = _topic(kafka_bootstrap)
    metas: dict[str, Any] = {}

    async def aio_app() -> None:
        producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap)
        await producer.start()
        try:
            for i in range(N):
                metas[f"k{i}"] = await (await producer.send(topic, b"m%d" % i, key=b"k%d" % i))
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(topic, bootstrap_servers=kafka_bootstrap, group_id="billing",
                                    auto_offset_reset="earliest")
        await consumer.start()
        try:
            for _ in range(N):
                await asyncio.wait_for(consumer.getone(), 20)
        finally:
            await consumer.stop()

    def run(url: str) -> None:
        with otel_provider(url, "shop-aio") as provider:
            with instrumented(AIOKafkaInstrumentor(), provider):
                asyncio.run(aio_app())
        with otel_provider(url, "audit-confluent") as provider:
            consumer = ConfluentKafkaInstrumentor.instrument_consumer(Consumer({
                "bootstrap.servers": kafka_bootstrap, "group.id": "audit", "auto.offset.reset": "earliest"}),
                tracer_provider=provider)
            consumer.subscribe([topic])
            seen = 0
            for _ in range(200):  # a hang guard, not a timing assertion
                record = consumer.poll(0.2)
                if record is not None and record.error() is None:
                    seen += 1
                if seen == N:
                    break
            consumer.close()  # ends the last record's process span
            assert seen == N

    store_url = collect_and_index_url(tmp_path, run)
    with trace_query(store_url) as query:
        for key, meta in metas.items():
            msg_id = derived_msg_id(topic, meta.partition, meta.offset)
            trace = query.get_trace(msg_id)
            assert trace is not None, key
            assert (trace.topic, trace.queue, trace.offset, trace.keys) == (topic, meta.partition, meta.offset, key)
            assert set(trace.consumes) == {"billing", "audit-confluent"}
            [received] = trace.consumes["billing"]  # aiokafka: receive spans (SUB_BEFORE)
            assert received["before"] is not None and received["after"] is None
            [processed] = trace.consumes["audit-confluent"]  # confluent-kafka: process spans (the pair)
            assert processed["status_name"] == "OK"
            [found] = query.by_key(topic, key, 0, 2**62, 10).items
            assert found.msg_id == msg_id and not found.send_traced
        # No span carried a store time: the messages are not placed at their consume time.
        assert query.by_time(topic, 0, 2**62, 100).items == [] and query.offsets_at(topic, 0) == {}


def test_tracehook_producer_and_otel_only_consumer_land_on_one_message(kafka_bootstrap, tmp_path) -> None:
    """The mixed setup of docs/otel.md: sends traced by tracehook, consumes only by OTel. The
    consumer's hook reports the tracehook message id the producer put in the headers."""
    import tracehook
    from tracehook import HEADER_MSG_ID
    from tracehook.adapters import kafka_python

    topic = _topic(kafka_bootstrap)
    sent: dict[str, Any] = {}

    def consume_hook(span: Any, record: Any, args: Any, kwargs: Any) -> None:
        span.set_attribute("messaging.message.id", dict(record.headers)[HEADER_MSG_ID].decode())
        span.set_attribute("messaging.kafka.message.offset", record.offset)
        span.set_attribute("messaging.consumer.group.name", "billing")

    def run(url: str) -> None:
        tracer = tracehook.Tracer(tracehook.TracerConfig(app="shop", collectors=(url,), linger_s=0.02))
        try:
            producer = kafka_python.TracedProducer(KafkaProducer(bootstrap_servers=kafka_bootstrap), tracer)
            for i in range(N):
                future = producer.send(topic, b"m%d" % i, key=b"k%d" % i)
                meta = future.get(10)
                sent[f"k{i}"] = meta
            producer.close()
            assert tracer.flush(10)
        finally:
            tracer.close()
        with otel_provider(url, "billing-otel") as provider:
            instrumentor = KafkaInstrumentor()
            instrumentor.instrument(tracer_provider=provider, consume_hook=consume_hook)
            try:
                consumer = KafkaConsumer(topic, bootstrap_servers=kafka_bootstrap, group_id="billing",
                                         auto_offset_reset="earliest", consumer_timeout_ms=20_000)
                records = _consume_all(consumer, N)
                consumer.close()
            finally:
                instrumentor.uninstrument()
        ids.update({r.key.decode(): dict(r.headers)[HEADER_MSG_ID].decode() for r in records})
        trace_ids.update({r.key.decode(): dict(r.headers)["traceparent"].decode().split("-")[1] for r in records})

    ids: dict[str, str] = {}
    trace_ids: dict[str, str] = {}
    store_url = collect_and_index_url(tmp_path, run)
    assert len(ids) == N
    with trace_query(store_url) as query:
        for key, msg_id in ids.items():
            trace = query.get_trace(msg_id)
            assert trace is not None and trace.send is not None, key
            assert (trace.queue, trace.offset) == (sent[key].partition, sent[key].offset)  # placed by the send
            [attempt] = trace.consumes["billing"]  # ... and consumed by the OTel-only app
            assert attempt["client_id"] == "otel:billing-otel/billing-otel-1"
            # The OTel consumer continued the trace of the traceparent tracehook wrote: one trace, found by its id.
            assert attempt["before"]["trace_id"] == trace.trace_id == trace_ids[key]
            assert attempt["before"]["span_id"] == trace.span_id != ""  # the consumer's parent is the send
            assert [i.msg_id for i in query.by_trace(trace_ids[key], 10).items] == [msg_id]
